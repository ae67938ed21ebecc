# Every third-party dependency, found once. scripts/install-deps.sh installs the Debian packages.
find_package(Boost 1.74 REQUIRED)           # Boost.Multiprecision (header-only)
find_package(PkgConfig REQUIRED)
pkg_check_modules(MPFR REQUIRED IMPORTED_TARGET mpfr)
pkg_check_modules(GMP REQUIRED IMPORTED_TARGET gmp)
# MPFI ships no pkg-config file on Debian 12: find it by hand.
find_path(MPFI_INCLUDE_DIR mpfi.h REQUIRED)
find_library(MPFI_LIBRARY mpfi REQUIRED)
add_library(KalmanOracle::mpfi UNKNOWN IMPORTED)
set_target_properties(KalmanOracle::mpfi PROPERTIES
  IMPORTED_LOCATION ${MPFI_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${MPFI_INCLUDE_DIR})
find_package(Eigen3 3.4 REQUIRED NO_MODULE)   # dense and information forms
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)      # safetensors headers, fixture metadata, reports
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 of fixture manifests
if(KALMAN_ORACLE_TESTS)
  find_package(doctest REQUIRED)
  find_package(rapidcheck REQUIRED)
  include(doctest)                          # doctest_discover_tests
endif()
