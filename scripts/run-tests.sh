#!/usr/bin/env bash
# Every test: installs what is missing, builds the default preset and runs all of CTest, then builds
# the sanitizer preset (ASan + UBSan) and runs what sanitizers can find bugs in: the unit tests, the
# properties (not the meta-tests: they test the properties' power, which the first pass shows), the
# fuzz corpus, the GPU kernels' CPU twins and the conformance tests labelled `sanitize` (the generator, `run`, `check`,
# `conform`, the reader's error paths). docs/testing.md, "CI time", has the measured times.
# Pass --no-sanitize to skip the second pass.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    *) echo "run-tests: unknown option $arg (known: --no-sanitize)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh
jobs=$(nproc)
stamp() { echo "run-tests: $(date -u +%H:%M:%S) $*"; }

stamp "release build"
cmake --preset default
cmake --build --preset default -j "$jobs"
stamp "release tests"
ctest --preset default -j "$jobs"

if [ "$sanitize" -eq 1 ]; then
  stamp "sanitizer build"
  cmake --preset debug-sanitize
  cmake --build --preset debug-sanitize -j "$jobs" --target unit_tests property_tests kalman-oracle planted_candidate gpu_twin_tests kalman-oracle-gpu
  stamp "sanitizer tests"
  ctest --preset debug-sanitize -j "$jobs" -L 'unit|property|fuzz|sanitize|twin' -LE 'meta|long'
fi
stamp "done"
