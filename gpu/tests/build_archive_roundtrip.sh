#!/usr/bin/env bash
# scripts/gpu-build-archive.sh end to end (label twin): the build packed, unpacked into a copy of the
# sources at another path, and the GPU tools' twin tests run there through the unpacked CTest files:
# every carried path must have been rewritten (no test may reach back into the original checkout, which
# a GPU machine does not have) and the tests must pass there.
#   build_archive_roundtrip.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$source_dir/scripts/gpu-build-archive.sh" pack --build "$build_dir" "$work/build.tar"
mkdir "$work/checkout"
# The sources the GPU tests read (the scripts and the fixtures), as a checkout on another machine has them.
cp -r "$source_dir/scripts" "$source_dir/fixtures" "$source_dir/gpu" "$work/checkout/"
"$work/checkout/scripts/gpu-build-archive.sh" unpack "$work/build.tar"
if grep -l -F "$source_dir" "$work/checkout/build/CTestTestfile.cmake" "$work/checkout/build/gpu/"*.cmake; then
  echo "build_archive_roundtrip: a path of $source_dir survived the unpacking" >&2
  exit 1
fi
. "$work/checkout/build/gpu-archive-env.sh"
# A test that runs a carried tool on the carried sources, and its meta-test.
ctest --test-dir "$work/checkout/build" -R 'twin[.](meta[.])?compare_gpu_builds' --output-on-failure 2>&1 |
  tee "$work/ctest.log"
grep -q "100% tests passed, 0 tests failed out of 2" "$work/ctest.log"
# A second build beside the first (--into), as a GPU session carries a base and a new build to compare.
"$work/checkout/scripts/gpu-build-archive.sh" unpack --into base "$work/build.tar"
"$work/checkout/scripts/compare-gpu-builds.sh" --device twin "$work/checkout/base/gpu" "$work/checkout/build/gpu" |
  tail -1 | tee "$work/compare.log"
grep -q " 0 differ" "$work/compare.log"
# A folder that is no earlier unpacking (a real build, say) is never replaced.
mkdir "$work/checkout/mine"
touch "$work/checkout/mine/kept"
if "$work/checkout/scripts/gpu-build-archive.sh" unpack --into mine "$work/build.tar"; then
  echo "build_archive_roundtrip: unpack replaced a folder it had not made" >&2
  exit 1
fi
[ -f "$work/checkout/mine/kept" ]
echo "build_archive_roundtrip: packed, unpacked at another path (twice, side by side), 2 of 2 carried tests passed there"
