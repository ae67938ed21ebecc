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
# The same libraries as static archives, for the tool that generates fixtures: MPFR's thread-local
# state and every call through the PLT cost a shared library about a tenth of a generation, which
# CI repeats for the whole default suite (docs/conformance.md, "Generation time"). Where the archives
# are missing the target is empty and the tool links the shared libraries; the numbers are the same.
find_library(KALMAN_ORACLE_MPFI_ARCHIVE NAMES libmpfi.a)
find_library(KALMAN_ORACLE_MPFR_ARCHIVE NAMES libmpfr.a)
find_library(KALMAN_ORACLE_GMP_ARCHIVE NAMES libgmp.a)
add_library(KalmanOracle::multiprecision_archives INTERFACE IMPORTED)
if(KALMAN_ORACLE_MPFI_ARCHIVE AND KALMAN_ORACLE_MPFR_ARCHIVE AND KALMAN_ORACLE_GMP_ARCHIVE)
  # On the link line before the shared libraries (a target's own libraries come first), which then
  # resolve nothing and, with --as-needed, are not recorded.
  set_target_properties(KalmanOracle::multiprecision_archives PROPERTIES
    INTERFACE_LINK_LIBRARIES "${KALMAN_ORACLE_MPFI_ARCHIVE};${KALMAN_ORACLE_MPFR_ARCHIVE};${KALMAN_ORACLE_GMP_ARCHIVE}"
    INTERFACE_LINK_OPTIONS "LINKER:--as-needed")
endif()
find_package(Eigen3 3.4 REQUIRED NO_MODULE)   # dense and information forms
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)      # safetensors headers, fixture metadata, reports
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 of fixture manifests
if(KALMAN_ORACLE_TESTS)
  find_package(doctest REQUIRED)
  find_package(rapidcheck REQUIRED)
  include(doctest)                          # doctest_discover_tests
endif()
