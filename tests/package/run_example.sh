#!/usr/bin/env bash
# run_example.sh BUILD_DIR SOURCE_DIR: the installed package works for a project outside this tree.
#
# Installs BUILD_DIR into a temporary prefix, configures and builds examples/conformance against it
# (find_package(KalmanOracle) through CMAKE_PREFIX_PATH only, Ninja), runs the example's tests and
# fails on any failure; checks the example found the package in the temporary prefix (not an
# installation elsewhere) and that the EXACT test failed for the right reason (a ULP report, not a
# crash). The temporary directories live under BUILD_DIR and are removed on exit (keep them with
# KALMAN_ORACLE_KEEP_TEMP=1). Needs the tool built (cmake --build BUILD_DIR --target kalman-oracle).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)

if [ ! -x "$build_dir/fixtures/kalman-oracle" ]; then
  echo "run_example: $build_dir/fixtures/kalman-oracle is not built (cmake --build $build_dir --target kalman-oracle)" >&2
  exit 1
fi

work=$(mktemp -d "$build_dir/package-example.XXXXXX")
cleanup() {
  if [ "${KALMAN_ORACLE_KEEP_TEMP:-0}" = 1 ]; then
    echo "run_example: kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
prefix=$work/prefix
example_build=$work/build

echo "== install $build_dir -> $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
for f in bin/kalman-oracle lib/cmake/KalmanOracle/KalmanOracleConfig.cmake \
         lib/cmake/KalmanOracle/KalmanOracleConfigVersion.cmake lib/cmake/KalmanOracle/KalmanOracleConformance.cmake \
         include/kalman_oracle/io/safetensors.hpp share/kalman-oracle/golden/gla_f32_small.safetensors; do
  [ -e "$prefix/$f" ] || { echo "run_example: the install lacks $f" >&2; exit 1; }
done

echo "== configure examples/conformance against $prefix"
cmake -S "$source_dir/examples/conformance" -B "$example_build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON -DCMAKE_BUILD_TYPE=Release
found=$(sed -n 's/^KalmanOracle_DIR:PATH=//p' "$example_build/CMakeCache.txt")
if [ "$found" != "$prefix/lib/cmake/KalmanOracle" ]; then
  echo "run_example: the example found KalmanOracle at '$found', not in $prefix" >&2
  exit 1
fi

echo "== build"
cmake --build "$example_build" --parallel 2

echo "== ctest"
# Both tests are registered (ctest passes with no tests at all) ...
ntests=$(ctest --test-dir "$example_build" -N | sed -n 's/^Total Tests: //p')
if [ "$ntests" != 2 ]; then
  echo "run_example: expected 2 tests in the example, found '$ntests'" >&2
  exit 1
fi
ctest --test-dir "$example_build" --output-on-failure
# ... and the exact-mode failure is the check's verdict, a ULP count (WILL_FAIL accepts any failure,
# a crash included). LastTest.log holds every test's output.
log=$example_build/Testing/Temporary/LastTest.log
if ! grep -Eq 'gla_[A-Za-z0-9_]*\.safetensors +gla +FAIL +[0-9.]+s +[A-Za-z_.]+: [1-9][0-9]* ULP \(budget 0\)' "$log"; then
  echo "run_example: gla_conformance_exact_fails did not fail with a ULP report; its log:" >&2
  cat "$log" >&2
  exit 1
fi
echo "run_example: OK"
