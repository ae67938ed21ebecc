#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the tool's main command. Until the
# fixture generator lands (issue 4) that is `kalman-oracle demo`: every scan schedule on a KLA
# precision recursion, checked against the sequential fold and against its error bound.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target kalman-oracle
./build/fixtures/kalman-oracle demo "$@"
