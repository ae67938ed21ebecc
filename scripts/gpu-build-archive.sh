#!/usr/bin/env bash
# The GPU tests of a build made on one machine, run on another (docs/kernels.md, "Running the GPU tests on
# another machine"): a GPU machine often has the CUDA driver, CMake and a Python with PyTorch but not this
# project's build dependencies (MPFR, GMP, Boost, …), so the build is made where they are and carried.
#
#   gpu-build-archive.sh pack [--build DIR] ARCHIVE      (where the build was made)
#   gpu-build-archive.sh unpack [--suite] [--into NAME] ARCHIVE
#                                                        (in a checkout of the same commit on the GPU machine)
#
# pack writes ARCHIVE (.tar, or .tar.xz / .tar.gz by its name) holding the build's GPU tools and tests
# (kalman-oracle-gpu, gpu_tests, gpu_bench, gpu_twin_tests), the conformance tool kalman-oracle, the CTest
# file of gpu/ (every `gpu.*` test and the GPU tools' twin tests) under a top-level one, the shared
# libraries those programs need beyond the C and C++ runtimes, and the build's source and build paths.
# unpack extracts it into a folder of this checkout (build/, beside scripts/, or --into NAME: a second
# build beside the first, for scripts/compare-gpu-builds.sh), replacing an earlier unpacking there (never a folder made otherwise), rewrites the
# recorded paths to this checkout's, writes NAME/gpu-archive-env.sh (LD_LIBRARY_PATH for the carried
# libraries: source it before ctest) and, with --suite, generates the default fixture suite where the GPU
# tests that need it read it (NAME/tests/fixtures/default-suite, every core). Then:
#
#   . build/gpu-archive-env.sh && ctest --test-dir build -L gpu
#
# Exit status 0 done, 1 a step failed, 2 bad usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
verb=$1
shift
programs=(gpu/kalman-oracle-gpu gpu/gpu_tests gpu/gpu_bench gpu/gpu_twin_tests fixtures/kalman-oracle)

compress_flag() {
  case "$1" in
    *.tar.xz) echo -J ;;
    *.tar.gz) echo -z ;;
    *.tar) echo "" ;;
    *) echo "gpu-build-archive: $1: the archive's name must end in .tar, .tar.xz or .tar.gz" >&2; exit 2 ;;
  esac
}

case "$verb" in
  pack)
    build=$root/build
    while [ $# -gt 0 ]; do
      case "$1" in
        --build) build=$(cd "${2:?}" && pwd); shift 2 ;;
        -*) echo "gpu-build-archive: unknown option $1" >&2; usage ;;
        *) break ;;
      esac
    done
    [ $# -eq 1 ] || usage
    archive=$1
    flag=$(compress_flag "$archive")
    for prog in "${programs[@]}"; do
      [ -x "$build/$prog" ] || { echo "gpu-build-archive: $build/$prog: not built" >&2; exit 1; }
    done
    [ -f "$build/gpu/CTestTestfile.cmake" ] || { echo "gpu-build-archive: $build/gpu/CTestTestfile.cmake: missing" >&2; exit 1; }
    # The paths CMake wrote into the CTest files (gpu/'s own folders: their parents are the roots).
    source_dir=$(sed -n 's/^# Source directory: //p' "$build/gpu/CTestTestfile.cmake")
    build_dir=$(sed -n 's/^# Build directory: //p' "$build/gpu/CTestTestfile.cmake")
    [ "${source_dir##*/}" = gpu ] && [ "${build_dir##*/}" = gpu ] ||
      { echo "gpu-build-archive: $build/gpu/CTestTestfile.cmake names no gpu/ source and build folders" >&2; exit 1; }
    source_dir=${source_dir%/gpu} build_dir=${build_dir%/gpu}
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/build/gpu" "$stage/build/fixtures" "$stage/build/gpu-archive-lib"
    for prog in "${programs[@]}"; do cp "$build/$prog" "$stage/build/$prog"; done
    cp "$build/gpu/CTestTestfile.cmake" "$stage/build/gpu/"
    # The doctest-discovered twin tests' lists, which gpu/'s CTest file includes where they exist.
    find "$build/gpu" -maxdepth 1 -name '*_tests*.cmake' -exec cp {} "$stage/build/gpu/" \;
    printf '# The GPU tests of a carried build (scripts/gpu-build-archive.sh).\nsubdirs("gpu")\n' \
      > "$stage/build/CTestTestfile.cmake"
    # Shared libraries beyond the C and C++ runtimes and the CUDA driver, which every such machine has.
    for prog in "${programs[@]}"; do
      ldd "$build/$prog" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
    done | sort -u | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*) ;;
        *) cp -L "$lib" "$stage/build/gpu-archive-lib/" ;;
      esac
    done
    printf 'source_dir=%s\nbuild_dir=%s\n' "$source_dir" "$build_dir" > "$stage/build/gpu-archive-paths"
    tmp=$archive.partial
    tar -C "$stage" $flag -cf "$tmp" build
    mv "$tmp" "$archive"
    echo "gpu-build-archive: $archive ($(du -h "$archive" | cut -f1); built from $source_dir;" \
      "libraries: $(ls "$stage/build/gpu-archive-lib" | tr '\n' ' '))"
    ;;
  unpack)
    suite=false into=build
    while [ $# -gt 0 ]; do
      case "$1" in
        --suite) suite=true; shift ;;
        --into) into=${2:?}; shift 2 ;;
        -*) echo "gpu-build-archive: unknown option $1" >&2; usage ;;
        *) break ;;
      esac
    done
    [ $# -eq 1 ] || usage
    archive=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
    flag=$(compress_flag "$archive")
    [ -f "$archive" ] || { echo "gpu-build-archive: $archive: no such file" >&2; exit 2; }
    case "$into" in
      ''|*/*|.|..) echo "gpu-build-archive: --into takes a folder name in the checkout, not $into" >&2; exit 2 ;;
    esac
    dest=$root/$into
    # Only an earlier unpacking is replaced: a folder made otherwise (a real build) is left alone.
    if [ -e "$dest" ] && [ ! -f "$dest/gpu-archive-paths" ]; then
      echo "gpu-build-archive: $dest exists and is no unpacked archive: remove it, or name another with --into" >&2
      exit 1
    fi
    rm -rf "$dest"
    tar -C "$root" $flag -xf "$archive" --transform "s#^build#${into}#"
    # shellcheck disable=SC1090
    . "$dest/gpu-archive-paths"
    # The build directory first: it usually lies inside the source directory.
    for f in "$dest/CTestTestfile.cmake" "$dest/gpu/"*.cmake; do
      sed -i -e "s#${build_dir}#${dest}#g" -e "s#${source_dir}#${root}#g" "$f"
    done
    printf 'export LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' "$dest/gpu-archive-lib" \
      > "$dest/gpu-archive-env.sh"
    echo "gpu-build-archive: unpacked into $dest (paths of $source_dir rewritten)"
    if $suite; then
      export LD_LIBRARY_PATH=$dest/gpu-archive-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      out=$dest/tests/fixtures/default-suite
      rm -rf "$out"
      "$dest/fixtures/kalman-oracle" generate --suite default --out "$out" --jobs "$(nproc)" --quiet
      cmp -s "$out/MANIFEST.sha256" "$root/fixtures/suite/default.sha256" ||
        { echo "gpu-build-archive: the default suite generated here differs from fixtures/suite/default.sha256" >&2; exit 1; }
      echo "gpu-build-archive: default suite generated in $out, the checked-in manifest's bytes"
    fi
    ;;
  *) usage ;;
esac
