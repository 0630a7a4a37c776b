# gyre_library(NAME name SRCS ... DEPS ...): one library per layer directory. Dependencies
# are PUBLIC so a layer sees exactly what it declares; a wrong include fails to link.
function(gyre_library)
  cmake_parse_arguments(G "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(${G_NAME} STATIC ${G_SRCS})
  target_include_directories(${G_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${G_NAME} PUBLIC ${G_DEPS})
  target_compile_options(${G_NAME} PRIVATE ${GYRE_WARNINGS})
endfunction()

# One precompiled header for every test binary, made by the first gyre_test call: GoogleTest,
# GoogleMock and the standard headers the tests share take about 2 s of each test file's
# compile, which about 100 test files would otherwise pay again, in each of CI's two builds.
# Only headers from outside the project go in, so editing gyre's headers rebuilds no more
# than before. A compiler that refuses the header for a test's flags reads the text instead.
function(gyre_test_pch)
  if(TARGET gyre_test_pch)
    return()
  endif()
  add_library(gyre_test_pch STATIC ${PROJECT_SOURCE_DIR}/tests/support/test_pch.cc)
  target_link_libraries(gyre_test_pch PUBLIC GTest::gtest GTest::gmock)
  target_compile_options(gyre_test_pch PRIVATE ${GYRE_WARNINGS})
  target_precompile_headers(gyre_test_pch PRIVATE
    <gtest/gtest.h> <gmock/gmock.h>
    <algorithm> <atomic> <chrono> <cstdint> <cstdio> <cstdlib> <cstring> <fstream>
    <functional> <map> <memory> <mutex> <random> <set> <sstream> <string> <thread> <vector>)
endfunction()

# gyre_test(NAME name SRCS ... DEPS ... LABELS ... TIMEOUT seconds FILTER gtest-filter): one
# GoogleTest binary; each of its test cases (those FILTER matches, default all) becomes a
# CTest test with that timeout and those labels.
function(gyre_test)
  cmake_parse_arguments(G "" "NAME;TIMEOUT;FILTER" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${G_NAME} ${G_SRCS})
  target_link_libraries(${G_NAME} PRIVATE ${G_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${G_NAME} PRIVATE ${GYRE_WARNINGS})
  gyre_test_pch()
  target_precompile_headers(${G_NAME} REUSE_FROM gyre_test_pch)
  set_target_properties(${G_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  gyre_test_variant(NAME ${G_NAME} PREFIX "" VAR TZ VALUE UTC FILTER "${G_FILTER}"
    LABELS ${G_LABELS} TIMEOUT "${G_TIMEOUT}")
endfunction()

# gyre_test_variant(NAME name PREFIX prefix VAR var VALUE value FILTER gtest-filter LABELS ...
#                   TIMEOUT seconds): the test cases of gyre_test binary `name` (those FILTER
# matches, default all) as CTest tests named <prefix><suite.case> that run with var=value in
# their environment, and GYRE_BIN_DIR. gyre_test registers a binary's own cases this way (TZ
# = UTC); a variant the binary chooses at run time, registered again, costs no second build.
#
# Each environment property holds one variable: gtest_discover_tests (CMake 3.25) splits a
# list in its PROPERTIES into separate arguments, so "A=1;B=2" would set only A.
function(gyre_test_variant)
  cmake_parse_arguments(G "" "NAME;PREFIX;TIMEOUT;FILTER;VAR;VALUE" "LABELS" ${ARGN})
  if(NOT G_TIMEOUT)
    set(G_TIMEOUT 120)
  endif()
  if(NOT G_FILTER)
    set(G_FILTER "*")
  endif()
  # Sanitizer builds run several times slower; their CI stage scales every timeout.
  math(EXPR G_TIMEOUT "${G_TIMEOUT} * ${GYRE_TEST_TIMEOUT_SCALE}")
  # Several labels must reach the property as one list, not as extra property names.
  string(REPLACE ";" "\\;" labels "${G_LABELS}")
  # tests/CMakeLists.txt makes one target per label (gyre-tests-unit, ...) that builds only
  # the binaries of that label's tests, so a stage running one label builds no more. A test
  # added with add_test instead appends the programs it runs to the same property.
  foreach(label ${G_LABELS})
    set_property(GLOBAL APPEND PROPERTY GYRE_TESTS_OF_LABEL_${label} ${G_NAME})
  endforeach()
  gtest_discover_tests(${G_NAME}
    TEST_PREFIX "${G_PREFIX}"
    TEST_FILTER "${G_FILTER}"
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 30
    PROPERTIES TIMEOUT ${G_TIMEOUT} LABELS "${labels}"
               ENVIRONMENT "GYRE_BIN_DIR=${CMAKE_BINARY_DIR}/bin"
               ENVIRONMENT_MODIFICATION "${G_VAR}=set:${G_VALUE}")
endfunction()
