// Compiled only to build the tests' precompiled header (CMakeLists.txt beside it).
