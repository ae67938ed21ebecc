# kalman_oracle_precompile_headers(<target> [TESTS] [PROPERTIES] [JSON]): precompiles the heavy
# third-party headers every translation unit of <target> parses (Boost.Multiprecision over
# MPFR/MPFI/GMP, Eigen, the standard library; doctest with TESTS, RapidCheck with PROPERTIES,
# nlohmann-json with JSON). Parsing them costs several seconds per translation unit on the CI's
# 2 cores (docs/testing.md, "CI time"). Off with -DKALMAN_ORACLE_PRECOMPILED_HEADERS=OFF.
#
# A source that defines a configuration macro before including one of these headers (doctest's
# DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN in the main files) must not see the precompiled copy first:
# mark it with set_source_files_properties(... SKIP_PRECOMPILE_HEADERS ON).
include_guard(GLOBAL)
option(KALMAN_ORACLE_PRECOMPILED_HEADERS "Precompile the third-party headers" ON)

function(kalman_oracle_precompile_headers target)
  if(NOT KALMAN_ORACLE_PRECOMPILED_HEADERS)
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 1 arg "TESTS;PROPERTIES;JSON" "" "")
  set(headers
    <algorithm> <cmath> <cstddef> <cstdint> <map> <optional> <span> <sstream> <stdexcept> <string> <vector>
    <boost/multiprecision/gmp.hpp> <boost/multiprecision/mpfi.hpp> <boost/multiprecision/mpfr.hpp>
    <boost/multiprecision/eigen.hpp> <Eigen/Core>)
  if(arg_TESTS OR arg_PROPERTIES)
    list(APPEND headers <doctest/doctest.h>)
  endif()
  if(arg_PROPERTIES)
    list(APPEND headers <rapidcheck.h>)
  endif()
  if(arg_JSON)
    list(APPEND headers <nlohmann/json.hpp>)
  endif()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()
