# kalman_oracle_add_conformance_test(): register a CTest test that runs an implementation over a
# fixture suite through `kalman-oracle conform` (the file protocol) and checks every output.
# Installed with the package and included by KalmanOracleConfig.cmake; needs the imported target
# KalmanOracle::kalman-oracle (the Config defines it).
#
#   kalman_oracle_add_conformance_test(
#     NAME <name>                 the CTest test name (required)
#     SUITE <dir>                 a directory of fixtures, *.safetensors (required); each one is a
#                                 separate run of COMMAND, and the test passes only if all pass. A
#                                 relative path is taken relative to CMAKE_CURRENT_SOURCE_DIR
#                                 (a generator expression is passed through as it is)
#     COMMAND <cmd> [<arg>...]    the implementation under test (required). Every "{fixture}" and
#                                 "{output}" inside an argument is replaced by the fixture's path and
#                                 the path the outputs must be written to (also given in the
#                                 environment as KALMAN_ORACLE_FIXTURE and KALMAN_ORACLE_OUTPUT). The
#                                 command reads the fixture's inputs and writes its outputs under
#                                 the fixture's tensor names to the output path, and exits 0.
#                                 Generator expressions work: COMMAND $<TARGET_FILE:my_impl> ...
#                                 Keep COMMAND after the other keywords or before them; an argument
#                                 of COMMAND spelt exactly like a keyword below would be taken as one.
#     [EXACT]                     --exact: require 0 ULP from the correctly rounded value (only a
#                                 correctly rounded implementation passes)
#     [ARITHMETIC <f32|f64>]      --arithmetic: the implementation's working precision, which sets
#                                 the error budget (default: f64 when its outputs are F64, else f32)
#     [TIMEOUT <seconds>]         --timeout: seconds allowed per fixture run (the tool's default: 600).
#                                 This is not CTest's TIMEOUT property of the whole test; set that
#                                 with set_tests_properties() if needed (CTest's default is 1500 s).
#     [LABELS <label>...]         CTest labels of the test
#   )
#
# The test runs
#   KalmanOracle::kalman-oracle conform --suite <dir> [--exact] [--arithmetic x] [--timeout s] -- <cmd...>
# whose exit status is 0 when every fixture passes, 1 when one fails (or the command fails), 2 on
# bad input (e.g. a malformed output file). Further test properties (WILL_FAIL, ENVIRONMENT,
# WORKING_DIRECTORY via set_tests_properties, ...) can be set on <name> afterwards.
include_guard(GLOBAL)

function(kalman_oracle_add_conformance_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "EXACT" "NAME;SUITE;ARITHMETIC;TIMEOUT" "COMMAND;LABELS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kalman_oracle_add_conformance_test: unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  foreach(required IN ITEMS NAME SUITE COMMAND)
    if(NOT DEFINED arg_${required} OR "${arg_${required}}" STREQUAL "")
      message(FATAL_ERROR "kalman_oracle_add_conformance_test: ${required} is required")
    endif()
  endforeach()
  if(DEFINED arg_ARITHMETIC AND NOT arg_ARITHMETIC MATCHES "^(f32|f64)$")
    message(FATAL_ERROR "kalman_oracle_add_conformance_test(${arg_NAME}): ARITHMETIC must be f32 or f64, got '${arg_ARITHMETIC}'")
  endif()
  if(DEFINED arg_TIMEOUT AND NOT arg_TIMEOUT MATCHES "^[0-9]+(\\.[0-9]+)?$")
    message(FATAL_ERROR "kalman_oracle_add_conformance_test(${arg_NAME}): TIMEOUT must be a number of seconds, got '${arg_TIMEOUT}'")
  endif()
  if(NOT TARGET KalmanOracle::kalman-oracle)
    message(FATAL_ERROR "kalman_oracle_add_conformance_test: no target KalmanOracle::kalman-oracle (call find_package(KalmanOracle) first)")
  endif()

  set(suite "${arg_SUITE}")
  if(NOT suite MATCHES "^\\$<")
    cmake_path(ABSOLUTE_PATH suite BASE_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}" NORMALIZE)
  endif()
  set(args conform --suite "${suite}")
  if(arg_EXACT)
    list(APPEND args --exact)
  endif()
  if(DEFINED arg_ARITHMETIC)
    list(APPEND args --arithmetic "${arg_ARITHMETIC}")
  endif()
  if(DEFINED arg_TIMEOUT)
    list(APPEND args --timeout "${arg_TIMEOUT}")
  endif()
  add_test(NAME "${arg_NAME}" COMMAND KalmanOracle::kalman-oracle ${args} -- ${arg_COMMAND})
  if(arg_LABELS)
    set_tests_properties("${arg_NAME}" PROPERTIES LABELS "${arg_LABELS}")
  endif()
endfunction()
