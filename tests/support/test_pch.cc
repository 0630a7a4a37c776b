// Compiled only to build the tests' precompiled header (gyre_test_pch in
// cmake/GyreHelpers.cmake).
