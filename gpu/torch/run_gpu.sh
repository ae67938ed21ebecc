#!/usr/bin/env bash
# The PyTorch op on a GPU machine (docs/kernels.md, "PyTorch"):
#   run_gpu.sh KALMAN_ORACLE KALMAN_ORACLE_GPU SUITE...
# builds the extension (first use), runs test_kla_op.py, then for each suite: conform with the op
# as the command, and a bit-for-bit comparison of the op's candidates with kalman-oracle-gpu's
# (the same kernels called from C++). Exit status 1 on any failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tool=$1 gpu_tool=$2
shift 2
python=${PYTHON:-python}
command -v "$python" >/dev/null || python=python3
export KALMAN_ORACLE_PYTHON=$here/../../python
if ! why=$("$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "torch finds no CUDA device")' 2>&1); then
  echo "SKIP: the PyTorch op needs torch with a CUDA device: ${why##*$'\n'}"
  exit 0
fi
status=0
echo "== test_kla_op.py"
"$python" "$here/test_kla_op.py" || status=1
for suite in "$@"; do
  echo "== conform $suite (the PyTorch op)"
  "$tool" conform --models kla --suite "$suite" -- "$python" "$here/kla_conform_runner.py" {fixture} {output} 2>/dev/null ||
    status=1
  echo "== the op's candidates against kalman-oracle-gpu's, bit for bit"
  work=$(mktemp -d)
  for fixture in "$suite"/kla_*.safetensors; do
    name=$(basename "$fixture")
    "$python" "$here/kla_conform_runner.py" "$fixture" "$work/torch_$name"
    "$gpu_tool" run --device cuda "$fixture" "$work/cuda_$name"
    "$python" - "$work/torch_$name" "$work/cuda_$name" <<'PY' || status=1
import sys, os
sys.path.insert(0, os.path.join(os.environ.get("KALMAN_ORACLE_PYTHON", "python")))
from kalman_oracle import safetensors_file
a, _ = safetensors_file.read(sys.argv[1])
b, _ = safetensors_file.read(sys.argv[2])
differ = [n for n in b if n not in a or a[n][2].tobytes() != b[n][2].tobytes()]
print(("same bits: " if not differ else "DIFFER: ") + os.path.basename(sys.argv[1])[6:] + (" " + str(differ) if differ else ""))
sys.exit(1 if differ else 0)
PY
  done
  rm -rf "$work"
done
exit $status
