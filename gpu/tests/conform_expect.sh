#!/usr/bin/env bash
# `conform --json` over a suite, its verdicts held to an expectation file (conform_expect.py):
#   conform_expect.sh EXPECT KALMAN_ORACLE SUITE "CONFORM_ARGS" COMMAND...
# (CONFORM_ARGS one string, split on spaces or semicolons: CMake's list). When COMMAND runs the kernel
# (--device cuda) and there is no CUDA device, prints "SKIP: <why>" and exits 0.
set -euo pipefail
expect=$1 tool=$2 suite=$3 args=$4
shift 4
if [[ " $* " == *" --device cuda "* ]] && ! why=$("$1" device 2>&1); then
  echo "SKIP: $why"
  exit 0
fi
IFS=' ;' read -r -a conform_args <<< "$args"
here=$(cd "$(dirname "$0")" && pwd)
# conform exits 1 where a fixture fails: the expectation file decides, so its status is not the test's.
{ "$tool" conform --json "${conform_args[@]}" --suite "$suite" -- "$@" || true; } |
  python3 "$here/conform_expect.py" "$expect"
