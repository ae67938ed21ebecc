#!/usr/bin/env bash
# A kernel against every fixture of its model, through `conform` (label gpu):
#   gpu_conform.sh KALMAN_ORACLE_GPU KALMAN_ORACLE SUITE MODELS [CONFORM_ARGS...]
# (MODELS comma-separated; CONFORM_ARGS e.g. --outputs for a partial kernel). Prints "SKIP: <why>" and exits 0 where there is no CUDA device (CTest reports it skipped).
set -euo pipefail
gpu_tool=$1 tool=$2 suite=$3 model=$4
shift 4
if ! why=$("$gpu_tool" device 2>&1); then
  echo "SKIP: $why"
  exit 0
fi
echo "device: $why"
exec "$tool" conform --models "$model" "$@" --suite "$suite" -- \
  "$gpu_tool" run --device cuda {fixture} {output}
