"""KalmanOracle's KLA kernels as a PyTorch custom op with autograd (docs/kernels.md, "PyTorch").

    from kalman_oracle_torch import kla
    y, y_var, final_lambda, final_eta = kla(v, Lambda, k, q, a_bar, p_bar, lambda_0=None, eta_0=None)

CUDA tensors, one dtype among float32, bfloat16 and float16 (any numpy broadcast of Lambda, a_bar,
p_bar and the priors); outputs float32; gradients for every input (summed over broadcast axes, in the
input's dtype). The op is `torch.ops.kalman_oracle.kla` (torch.library.custom_op), so torch.compile
sees it as one opaque call. The extension is compiled on first use from kla_op.cpp and gpu/src with
torch.utils.cpp_extension (nvcc and ninja needed; $KALMAN_ORACLE_TORCH_BUILD sets the build
directory).
"""
import os
from typing import Optional, Tuple

import torch
from torch import Tensor

_HERE = os.path.dirname(os.path.abspath(__file__))
_GPU = os.path.dirname(_HERE)
_ROOT = os.path.dirname(_GPU)
_extension = None


def extension():
    """The compiled extension (built once per build directory)."""
    global _extension
    if _extension is None:
        from torch.utils import cpp_extension

        build = os.environ.get("KALMAN_ORACLE_TORCH_BUILD")
        if build:
            os.makedirs(build, exist_ok=True)
        _extension = cpp_extension.load(
            name="kalman_oracle_gpu_torch",
            sources=[os.path.join(_HERE, "kla_op.cpp")] +
            [os.path.join(_GPU, "src", f) for f in ("kla_forward.cu", "kla_backward.cu", "device.cu")],
            extra_include_paths=[os.path.join(_GPU, "include"), os.path.join(_ROOT, "reference", "include")],
            extra_cflags=["-O2", "-std=c++17"],
            # The kernels spell every rounding (float_ops.cuh); sm_90 as the CMake build.
            extra_cuda_cflags=["-O3", "-std=c++17", "-gencode=arch=compute_90,code=sm_90"],
            build_directory=build or None,
            verbose=False)
    return _extension


@torch.library.custom_op("kalman_oracle::kla", mutates_args=())
def _kla(v: Tensor, Lambda: Tensor, k: Tensor, q: Tensor, a_bar: Tensor, p_bar: Tensor,
         lambda_0: Optional[Tensor], eta_0: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    y, y_var, final_lambda, final_eta, checkpoint_lambda, checkpoint_eta = extension().forward(
        v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0)
    return y, y_var, final_lambda, final_eta, checkpoint_lambda, checkpoint_eta


@_kla.register_fake
def _(v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0):
    B, T, S = k.shape
    M = v.shape[2]
    chunks = (T + 15) // 16
    f32 = dict(dtype=torch.float32, device=k.device)
    return (v.new_empty((B, T, M), **f32), v.new_empty((B, T, M), **f32), v.new_empty((B, M, S), **f32),
            v.new_empty((B, M, S), **f32), v.new_empty((B, chunks, M, S), **f32),
            v.new_empty((B, chunks, M, S), **f32))


def _setup_context(ctx, inputs, output):
    v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0 = inputs
    ctx.save_for_backward(v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0, output[4], output[5])
    ctx.mark_non_differentiable(output[4], output[5])


def _backward(ctx, dy, dy_var, dfinal_lambda, dfinal_eta, _dcheckpoint_lambda, _dcheckpoint_eta):
    v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0, checkpoint_lambda, checkpoint_eta = ctx.saved_tensors
    dq, dk, dv, dLambda, da, dp, dlambda_0, deta_0 = extension().backward(
        v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0, dy, dy_var, dfinal_lambda, dfinal_eta, checkpoint_lambda,
        checkpoint_eta)

    def to_input(grad, x):
        # Summed over the axes the input was broadcast along (a static [M, S] gradient of a
        # [1, 1, M, S] input gains its leading axes first), in the input's dtype.
        if x is None:
            return None
        while grad.dim() < x.dim():
            grad = grad.unsqueeze(0)
        return grad.sum_to_size(x.shape).to(x.dtype)

    return (to_input(dv, v), to_input(dLambda, Lambda), to_input(dk, k), to_input(dq, q), to_input(da, a_bar),
            to_input(dp, p_bar), to_input(dlambda_0, lambda_0), to_input(deta_0, eta_0))


_kla.register_autograd(_backward, setup_context=_setup_context)


def kla(v, Lambda, k, q, a_bar, p_bar, lambda_0=None, eta_0=None):
    """y, y_var, final_lambda, final_eta of KLA (docs/math.md §6), differentiable in every input."""
    y, y_var, final_lambda, final_eta, _, _ = torch.ops.kalman_oracle.kla(v, Lambda, k, q, a_bar, p_bar, lambda_0,
                                                                          eta_0)
    return y, y_var, final_lambda, final_eta
