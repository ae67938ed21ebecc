#!/usr/bin/env bash
# The PyTorch op on a GPU machine (docs/kernels.md, "PyTorch"):
#   run_gpu.sh KALMAN_ORACLE KALMAN_ORACLE_GPU SUITE...
# builds the extensions (first use), runs test_kla_op.py, test_kdn_gain_op.py and
# test_delta_rule_op.py, then for each
# suite: conform with each op as the command (KLA; the fixed-gain family under bf16-tc, and its
# autograd backward under --gradients-only, binary32 and with backward_operands "tf32" under tf32-tc;
# the whole KDN, gain op and two-key memory op, the same way), and a bit-for-bit comparison of the
# ops' candidates with kalman-oracle-gpu's (the same kernels called from C++, the fixed-gain
# gradients in both arithmetics; for the KDN the forward only: autograd sums the isotropic form's
# shares of dk and dβ in its own order). Exit status 1 on any failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tool=$1 gpu_tool=$2
shift 2
python=${PYTHON:-python}
# Runners at a time in each conform (each starts a Python with torch: about 5 s; the suite took
# over 430 s one at a time on the H200, 2026-12-04).
jobs=${KALMAN_ORACLE_TORCH_JOBS:-4}
command -v "$python" >/dev/null || python=python3
export KALMAN_ORACLE_PYTHON=$here/../../python
if ! why=$("$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "torch finds no CUDA device")' 2>&1); then
  echo "SKIP: the PyTorch op needs torch with a CUDA device: ${why##*$'\n'}"
  exit 0
fi
status=0
# Whether the first candidate holds every tensor of the second, with the same bits.
same_bits() {
  "$python" - "$1" "$2" <<'PY'
import sys, os
sys.path.insert(0, os.path.join(os.environ.get("KALMAN_ORACLE_PYTHON", "python")))
from kalman_oracle import safetensors_file
a, _ = safetensors_file.read(sys.argv[1])
b, _ = safetensors_file.read(sys.argv[2])
differ = [n for n in b if n not in a or a[n][2].tobytes() != b[n][2].tobytes()]
print(("same bits: " if not differ else "DIFFER: ") + os.path.basename(sys.argv[1]).split("_", 1)[1] + (" " + str(differ) if differ else ""))
sys.exit(1 if differ else 0)
PY
}
echo "== test_kla_op.py"
"$python" "$here/test_kla_op.py" || status=1
echo "== test_kdn_gain_op.py"
"$python" "$here/test_kdn_gain_op.py" || status=1
echo "== test_delta_rule_op.py"
"$python" "$here/test_delta_rule_op.py" || status=1
fixed_gain=gla,delta_net,gated_delta_net,kda
for suite in "$@"; do
  echo "== conform $suite (the PyTorch op)"
  "$tool" conform --jobs "$jobs" --models kla --suite "$suite" -- "$python" "$here/kla_conform_runner.py" {fixture} {output} 2>/dev/null ||
    status=1
  echo "== conform $suite (the PyTorch delta-rule op, bf16-tc)"
  "$tool" conform --jobs "$jobs" --strict --arithmetic bf16-tc --outputs o,final_state --models $fixed_gain --suite "$suite" -- \
    "$python" "$here/delta_rule_conform_runner.py" {fixture} {output} 2>/dev/null || status=1
  echo "== conform $suite (the PyTorch delta-rule op's autograd: the backward, binary32)"
  "$tool" conform --jobs "$jobs" --strict --gradients-only --models $fixed_gain --suite "$suite" -- \
    "$python" "$here/delta_rule_conform_runner.py" --gradients {fixture} {output} 2>/dev/null || status=1
  echo "== conform $suite (a whole KDN through the PyTorch ops: gain, two-key memory in bf16-tc)"
  "$tool" conform --jobs "$jobs" --strict --arithmetic bf16-tc --outputs o,final_state,readout_variance,final_covariance \
    --models kdn_diagonal,kdn_isotropic --suite "$suite" -- \
    "$python" "$here/kdn_conform_runner.py" {fixture} {output} 2>/dev/null || status=1
  echo "== conform $suite (the whole KDN's autograd: the backward, binary32)"
  "$tool" conform --jobs "$jobs" --strict --gradients-only --models kdn_diagonal,kdn_isotropic --suite "$suite" -- \
    "$python" "$here/kdn_conform_runner.py" --gradients {fixture} {output} 2>/dev/null || status=1
  # backward_operands "tf32": the memory's matrix products on the tensor cores. Not --strict: the
  # kernel's SUSPECT and UNVERIFIED fixtures are the expectation files' (gpu/tests/backward_tf32_*.expect,
  # held by gpu.backward_tf32.*); here no FAIL, and the fixed-gain gradients the kernel's bits (below).
  echo "== conform $suite (the PyTorch ops' autograd, backward_operands tf32: tf32-tc)"
  "$tool" conform --jobs "$jobs" --gradients-only --arithmetic tf32-tc --models $fixed_gain --suite "$suite" -- \
    "$python" "$here/delta_rule_conform_runner.py" --gradients --backward-operands tf32 {fixture} {output} 2>/dev/null ||
    status=1
  "$tool" conform --jobs "$jobs" --gradients-only --arithmetic tf32-tc --models kdn_diagonal,kdn_isotropic \
    --suite "$suite" -- "$python" "$here/kdn_conform_runner.py" --gradients --backward-operands tf32 {fixture} \
    {output} 2>/dev/null || status=1
  echo "== the ops' candidates against kalman-oracle-gpu's, bit for bit"
  work=$(mktemp -d)
  for fixture in "$suite"/*.safetensors; do
    name=$(basename "$fixture")
    case $name in
      kla_*) runner=kla_conform_runner.py ;;
      gla_* | delta_net_* | gdn_* | gated_delta_net_* | kda_*) runner=delta_rule_conform_runner.py ;;
      kdn_*) runner=kdn_conform_runner.py ;;
      *) continue ;;
    esac
    "$python" "$here/$runner" "$fixture" "$work/torch_$name"
    if [ "$runner" = kdn_conform_runner.py ]; then
      # kalman-oracle-gpu writes the gain path's internals too: each of the op's outputs must be there.
      "$gpu_tool" run --device cuda --with-memory "$fixture" "$work/cuda_$name"
      same_bits "$work/cuda_$name" "$work/torch_$name" || status=1
    else
      "$gpu_tool" run --device cuda "$fixture" "$work/cuda_$name"
      same_bits "$work/torch_$name" "$work/cuda_$name" || status=1
    fi
    if [ "$runner" = delta_rule_conform_runner.py ]; then  # the backward's gradients too
      "$python" "$here/$runner" --gradients "$fixture" "$work/torch_grad_$name"
      "$gpu_tool" run --device cuda --gradients "$fixture" "$work/cuda_grad_$name"
      same_bits "$work/torch_grad_$name" "$work/cuda_grad_$name" || status=1
      "$python" "$here/$runner" --gradients --backward-operands tf32 "$fixture" "$work/torch_tf32_$name"
      "$gpu_tool" run --device cuda --gradients --operands tf32 "$fixture" "$work/cuda_tf32_$name"
      same_bits "$work/torch_tf32_$name" "$work/cuda_tf32_$name" || status=1
    fi
  done
  rm -rf "$work"
done
exit $status
