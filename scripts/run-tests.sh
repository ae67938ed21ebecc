#!/usr/bin/env bash
# Every test: installs what is missing, builds the default preset and runs all of CTest, then builds
# the sanitizer preset (ASan + UBSan) and runs the GPU kernels' CPU twins under it (the kernels'
# index arithmetic: `gpu_twin_tests` and `kalman-oracle-gpu run|validate --device twin`, driven by
# the Release build's `kalman-oracle`). docs/testing.md, "CI time" and "Sanitizers", has the
# measured times and why the CI pass is the twins only.
#   --full-sanitize  the whole sanitizer pass instead: the unit tests, the properties, the tool, the
#                    planted candidate and the twins under ASan + UBSan, and every test labelled
#                    unit, property, fuzz, sanitize or twin but the meta and long ones (about
#                    15 minutes more on 2 cores; run it before a release and after a change to the
#                    reader, the tool or the reference's index arithmetic)
#   --no-sanitize    no sanitizer pass
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=twins
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=none ;;
    --full-sanitize) sanitize=full ;;
    *) echo "run-tests: unknown option $arg (known: --full-sanitize, --no-sanitize)" >&2; exit 2 ;;
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

case "$sanitize" in
  twins)
    stamp "sanitizer build (the twins)"
    cmake --preset debug-sanitize -DKALMAN_ORACLE_CONFORM_TOOL="$PWD/build/fixtures/kalman-oracle"
    cmake --build --preset debug-sanitize -j "$jobs" --target gpu_twin_tests kalman-oracle-gpu
    stamp "sanitizer tests (the twins)"
    ctest --preset debug-sanitize -j "$jobs" -L twin -LE 'meta|long'
    ;;
  full)
    stamp "sanitizer build"
    cmake --preset debug-sanitize -DKALMAN_ORACLE_CONFORM_TOOL=
    cmake --build --preset debug-sanitize -j "$jobs" --target unit_tests property_tests kalman-oracle planted_candidate gpu_twin_tests kalman-oracle-gpu
    stamp "sanitizer tests"
    ctest --preset debug-sanitize -j "$jobs" -L 'unit|property|fuzz|sanitize|twin' -LE 'meta|long'
    ;;
esac
stamp "done"
