# Installation and the CMake package (find_package(KalmanOracle)). Included at the end of the
# top-level CMakeLists.txt. What a `cmake --install build --prefix P` lays out:
#
#   P/bin/kalman-oracle                                   the tool (fixtures/CMakeLists.txt installs it)
#   P/include/kalman_oracle/...                           the header-only reference (reference/include/)
#   P/share/kalman-oracle/golden/*.safetensors            the golden fixtures (fixtures/golden/)
#   P/share/kalman-oracle/suite/*.json                    the suite files (fixtures/CMakeLists.txt)
#   P/lib/cmake/KalmanOracle/KalmanOracleConfig.cmake     the package: KalmanOracle::kalman-oracle,
#   P/lib/cmake/KalmanOracle/KalmanOracleConfigVersion.cmake   KalmanOracle::reference,
#   P/lib/cmake/KalmanOracle/KalmanOracleConformance.cmake     KalmanOracle_GOLDEN_DIR and
#                                                         kalman_oracle_add_conformance_test()
#
# The package is relocatable: every path in it is relative to the prefix it is found under.
include_guard(GLOBAL)
include(CMakePackageConfigHelpers)

# Relative to the install prefix (kept literal, not GNUInstallDirs: the layout above is the contract
# examples/conformance and tests/package rely on).
set(KALMAN_ORACLE_INSTALL_BINDIR bin)
set(KALMAN_ORACLE_INSTALL_INCLUDEDIR include)
set(KALMAN_ORACLE_INSTALL_GOLDENDIR share/kalman-oracle/golden)
set(KALMAN_ORACLE_INSTALL_CMAKEDIR lib/cmake/KalmanOracle)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/reference/include/
        DESTINATION ${KALMAN_ORACLE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/fixtures/golden/
        DESTINATION ${KALMAN_ORACLE_INSTALL_GOLDENDIR}
        FILES_MATCHING PATTERN "*.safetensors")

set(_kalman_oracle_package_dir ${PROJECT_BINARY_DIR}/package/KalmanOracle)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/KalmanOracleConfig.cmake.in
  ${_kalman_oracle_package_dir}/KalmanOracleConfig.cmake
  INSTALL_DESTINATION ${KALMAN_ORACLE_INSTALL_CMAKEDIR}
  PATH_VARS KALMAN_ORACLE_INSTALL_BINDIR KALMAN_ORACLE_INSTALL_INCLUDEDIR KALMAN_ORACLE_INSTALL_GOLDENDIR)
write_basic_package_version_file(
  ${_kalman_oracle_package_dir}/KalmanOracleConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
          ${_kalman_oracle_package_dir}/KalmanOracleConfig.cmake
          ${_kalman_oracle_package_dir}/KalmanOracleConfigVersion.cmake
          ${PROJECT_SOURCE_DIR}/cmake/KalmanOracleConformance.cmake
        DESTINATION ${KALMAN_ORACLE_INSTALL_CMAKEDIR})
unset(_kalman_oracle_package_dir)
