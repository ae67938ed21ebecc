#!/usr/bin/env bash
# Every test: installs what is missing, builds the default preset and runs all of CTest, then
# builds the sanitizer preset (ASan + UBSan) and runs it too, except the tests labelled `long`
# (they run in the first pass; under the sanitizers they would take most of the CI's time).
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

cmake --preset default
cmake --build --preset default -j "$jobs"
ctest --preset default -j "$jobs"

if [ "$sanitize" -eq 1 ]; then
  cmake --preset debug-sanitize
  cmake --build --preset debug-sanitize -j "$jobs"
  ctest --preset debug-sanitize -j "$jobs" -LE long
fi
