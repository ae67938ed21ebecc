"""KalmanOracle's GPU kernels as PyTorch custom ops (docs/kernels.md, "PyTorch").

    from kalman_oracle_torch import kla
    y, y_var, final_lambda, final_eta = kla(v, Lambda, k, q, a_bar, p_bar, lambda_0=None, eta_0=None)

CUDA tensors, one dtype among float32, bfloat16 and float16 (any numpy broadcast of Lambda, a_bar,
p_bar and the priors); outputs float32; gradients for every input (summed over broadcast axes, in the
input's dtype). The op is `torch.ops.kalman_oracle.kla` (torch.library.custom_op), so torch.compile
sees it as one opaque call.

    from kalman_oracle_torch import chunk_delta_rule, chunk_gated_delta_rule, chunk_kda, chunk_gla
    o, final_state = chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                               cu_seqlens=None, backward_operands="f32")

the chunked delta-rule memory's forward, with fla's names and layouts (q, k [B, T, H, K]; v [B, T, HV, V];
g log gates [B, T, HV] for GDN, [B, T, HV, K] for KDA and GLA; beta [B, T, HV]; initial_state
[N, HV, K, V]; scale K ** -0.5 by default; cu_seqlens None, N = B, or fla's variable-length batch: B = 1
and N + 1 int32 or int64 token offsets 0 … T, sequence n being tokens cu_seqlens[n] … cu_seqlens[n + 1] − 1,
empty and one-token sequences allowed, read on the host: a CUDA cu_seqlens is copied there, which waits
for the stream), differentiable in every tensor input
(`torch.ops.kalman_oracle.delta_rule`); o and the final state float32 (final_state None unless asked
for, as fla). The forward computes in the bf16-tc tier (bfloat16 matrix-product operands, binary32
accumulation); the backward in binary32 on the CUDA cores (backward_operands "f32": check its gradients
with --arithmetic f32), or with backward_operands "tf32" the memory's matrix products on the tensor cores
with TF32 operands (27% faster for DeltaNet, 20% for the gated rules on an H100: docs/kernels.md; check
with --arithmetic tf32-tc).

    from kalman_oracle_torch import kdn_gain
    predicted, gain, readout_variance, final_covariance = kdn_gain("diagonal", k, q, g, omega, r, mu=None,
                                                                   initial_covariance=None, scale=None,
                                                                   cu_seqlens=None)

the KDN gain path (docs/math.md §4, §5): q, k [B, T, H, K]; g log gates [B, T, HV, K]; omega
[B, T, HV, K] (diagonal) or [B, T, HV] (isotropic); r [B, T, HV]; mu [HV] (default K); the prior
covariance [N, HV, K] or [N, HV] (default 1), any of g, omega, r, mu and the prior broadcast; cu_seqlens
as the delta-rule op's (N = B without it); outputs float32 (the gain κ [B, T, HV, K] or β [B, T, HV], the
final covariance [N, HV, K] or [N, HV]); differentiable in every tensor input but cu_seqlens
(`torch.ops.kalman_oracle.kdn_gain`; dmu of a packed batch is its sequences' summed in order).

    from kalman_oracle_torch import kdn
    o, final_state, readout_variance, final_covariance = kdn("diagonal", q, k, v, g, omega, r, mu=None,
                                                             initial_covariance=None, initial_state=None,
                                                             cu_seqlens=None)

a whole KDN: the gain op, then the memory by the delta-rule op's two-key rule (model "two_key", the gain
κ [B, T, HV, K] given), one sequence a batch row or the packed sequences of cu_seqlens in one call of
each, differentiable in every tensor input but cu_seqlens.

Each extension is compiled on first use from its op's .cpp and gpu/src with torch.utils.cpp_extension
(nvcc and ninja needed; $KALMAN_ORACLE_TORCH_BUILD, when set, is the parent of one build directory
per extension).
"""
import os
from typing import Optional, Tuple

import torch
from torch import Tensor

_HERE = os.path.dirname(os.path.abspath(__file__))
_GPU = os.path.dirname(_HERE)
_ROOT = os.path.dirname(_GPU)
_extensions = {}


def _load(name, op_source, kernel_sources):
    """The compiled extension `name` (built once per build directory)."""
    if name not in _extensions:
        from torch.utils import cpp_extension

        build = os.environ.get("KALMAN_ORACLE_TORCH_BUILD")
        if build:
            build = os.path.join(build, name)
            os.makedirs(build, exist_ok=True)
        _extensions[name] = cpp_extension.load(
            name=name,
            sources=[os.path.join(_HERE, op_source)] + [os.path.join(_GPU, "src", f) for f in kernel_sources],
            extra_include_paths=[os.path.join(_GPU, "include"), os.path.join(_ROOT, "reference", "include")],
            extra_cflags=["-O2", "-std=c++17"],
            # The kernels spell every rounding (float_ops.cuh); sm_90 as the CMake build.
            extra_cuda_cflags=["-O3", "-std=c++17", "-gencode=arch=compute_90,code=sm_90"],
            build_directory=build or None,
            verbose=False)
    return _extensions[name]


def extension():
    """The KLA extension."""
    return _load("kalman_oracle_gpu_torch", "kla_op.cpp", ("kla_forward.cu", "kla_backward.cu", "device.cu"))


def kdn_gain_extension():
    """The KDN gain extension."""
    return _load("kalman_oracle_gpu_torch_kdn_gain", "kdn_gain_op.cpp", ("kdn_gain.cu", "kdn_gain_backward.cu",
                                                                         "device.cu"))


def _sum_to_input(grad, x):
    """A float32 gradient summed over the axes that the input x was broadcast along (gaining leading
    axes first where the gradient has fewer), in x's dtype; None where x is None."""
    if x is None:
        return None
    while grad.dim() < x.dim():
        grad = grad.unsqueeze(0)
    return grad.sum_to_size(x.shape).to(x.dtype)


def delta_rule_extension():
    """The chunked delta-rule extension."""
    return _load("kalman_oracle_gpu_torch_delta_rule", "delta_rule_op.cpp",
                 ("delta_rule_chunked.cu", "delta_rule_backward.cu", "device.cu"))


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

    # (A static [M, S] gradient of a [1, 1, M, S] input gains its leading axes first.)
    to_input = _sum_to_input
    return (to_input(dv, v), to_input(dLambda, Lambda), to_input(dk, k), to_input(dq, q), to_input(da, a_bar),
            to_input(dp, p_bar), to_input(dlambda_0, lambda_0), to_input(deta_0, eta_0))


_kla.register_autograd(_backward, setup_context=_setup_context)


def kla(v, Lambda, k, q, a_bar, p_bar, lambda_0=None, eta_0=None):
    """y, y_var, final_lambda, final_eta of KLA (docs/math.md §6), differentiable in every input."""
    y, y_var, final_lambda, final_eta, _, _ = torch.ops.kalman_oracle.kla(v, Lambda, k, q, a_bar, p_bar, lambda_0,
                                                                          eta_0)
    return y, y_var, final_lambda, final_eta


@torch.library.custom_op("kalman_oracle::kdn_gain", mutates_args=())
def _kdn_gain(form: str, k: Tensor, q: Tensor, g: Tensor, omega: Tensor, r: Tensor, mu: Optional[Tensor],
              initial_covariance: Optional[Tensor], scale: float,
              cu_seqlens: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    predicted, gain, readout, final_covariance = kdn_gain_extension().forward(form, k, q, g, omega, r, mu,
                                                                              initial_covariance, scale, cu_seqlens)
    return predicted, gain, readout, final_covariance


@_kdn_gain.register_fake
def _(form, k, q, g, omega, r, mu, initial_covariance, scale, cu_seqlens):
    B, T, _, K = k.shape
    HV = g.shape[2]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    per_token = (B, T, HV, K) if form == "diagonal" else (B, T, HV)
    finals = (N, HV, K) if form == "diagonal" else (N, HV)
    f32 = dict(dtype=torch.float32, device=k.device)
    return (k.new_empty(per_token, **f32), k.new_empty(per_token, **f32), k.new_empty((B, T, HV), **f32),
            k.new_empty(finals, **f32))


def _kdn_gain_setup_context(ctx, inputs, output):
    form, k, q, g, omega, r, mu, initial_covariance, scale, cu_seqlens = inputs
    ctx.form, ctx.scale = form, scale
    ctx.save_for_backward(k, q, g, omega, r, mu, initial_covariance, cu_seqlens, output[0])


def _kdn_gain_backward(ctx, d_predicted, d_gain, d_readout, d_final):
    k, q, g, omega, r, mu, initial_covariance, cu_seqlens, predicted = ctx.saved_tensors
    dk, dq, dg, domega, dr, dmu, dprior = kdn_gain_extension().backward(
        ctx.form, k, q, g, omega, r, mu, initial_covariance, ctx.scale, cu_seqlens, predicted, d_predicted, d_gain,
        d_readout, d_final)
    to_input = _sum_to_input
    return (None, to_input(dk, k), to_input(dq, q), to_input(dg, g), to_input(domega, omega), to_input(dr, r),
            to_input(dmu, mu), to_input(dprior, initial_covariance), None, None)


_kdn_gain.register_autograd(_kdn_gain_backward, setup_context=_kdn_gain_setup_context)


def kdn_gain(form, k, q, g, omega, r, mu=None, initial_covariance=None, scale=None, cu_seqlens=None):
    """predicted_covariance, gain (κ, or β for the isotropic form), readout_variance, final_covariance
    of the KDN gain path (form "diagonal" or "isotropic"), one sequence a batch row or (cu_seqlens, B = 1)
    the sequences packed in one row, each from its initial_covariance[n]; differentiable in every tensor
    input but cu_seqlens."""
    if scale is None:
        scale = k.shape[-1] ** -0.5
    return torch.ops.kalman_oracle.kdn_gain(form, k, q, g, omega, r, mu, initial_covariance, float(scale),
                                            cu_seqlens)


@torch.library.custom_op("kalman_oracle::delta_rule", mutates_args=())
def _delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor], kappa: Optional[Tensor],
                initial_state: Optional[Tensor], scale: float, model: str, cu_seqlens: Optional[Tensor],
                backward_operands: str) -> Tuple[Tensor, Tensor]:
    o, final_state = delta_rule_extension().forward(q, k, v, g, beta, kappa, initial_state, scale, model, cu_seqlens)
    return o, final_state


@_delta_rule.register_fake
def _(q, k, v, g, beta, kappa, initial_state, scale, model, cu_seqlens, backward_operands):
    B, T, _, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    f32 = dict(dtype=torch.float32, device=k.device)
    return v.new_empty((B, T, HV, V), **f32), v.new_empty((N, HV, K, V), **f32)


def _delta_rule_setup_context(ctx, inputs, output):
    q, k, v, g, beta, kappa, initial_state, scale, model, cu_seqlens, backward_operands = inputs
    ctx.scale, ctx.model, ctx.backward_operands = scale, model, backward_operands
    ctx.save_for_backward(q, k, v, g, beta, kappa, initial_state, cu_seqlens)


def _delta_rule_backward(ctx, d_o, d_final_state):
    q, k, v, g, beta, kappa, initial_state, cu_seqlens = ctx.saved_tensors
    dq, dk, dv, dg, dbeta, dkappa, dinitial = delta_rule_extension().backward(
        q, k, v, g, beta, kappa, initial_state, ctx.scale, ctx.model, cu_seqlens, d_o, d_final_state,
        ctx.backward_operands)
    to_input = _sum_to_input
    return (to_input(dq, q), to_input(dk, k), to_input(dv, v), to_input(dg, g), to_input(dbeta, beta),
            to_input(dkappa, kappa), to_input(dinitial, initial_state), None, None, None, None)


_delta_rule.register_autograd(_delta_rule_backward, setup_context=_delta_rule_setup_context)


def delta_rule(model, q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
               kappa=None, cu_seqlens=None, backward_operands="f32"):
    """o and the final state (None unless output_final_state) of a fixed-gain model (gla, delta_net,
    gated_delta_net, kda) or of the two-key memory (two_key: the gain kappa [B, T, HV, K] given, g per
    channel) by the chunked delta-rule kernels, one sequence a batch row or (cu_seqlens, B = 1) the
    sequences packed in one row, each from its initial_state[n] to its final_state[n]; differentiable in
    every tensor input but cu_seqlens (the backward in binary32, or with backward_operands "tf32" its
    matrix products on the tensor cores with TF32 operands: docs/kernels.md)."""
    if backward_operands not in ("f32", "tf32"):
        raise ValueError(f"backward_operands: '{backward_operands}'; rule: f32 (binary32) or tf32 (TF32 operands "
                         "on the tensor cores)")
    if scale is None:
        scale = k.shape[-1] ** -0.5
    o, final_state = torch.ops.kalman_oracle.delta_rule(q, k, v, g, beta, kappa, initial_state, float(scale), model,
                                                        cu_seqlens, backward_operands)
    return o, (final_state if output_final_state else None)


def kdn(form, q, k, v, g, omega, r, mu=None, initial_covariance=None, initial_state=None, scale=None,
        cu_seqlens=None, backward_operands="f32"):
    """o, final_state, readout_variance, final_covariance of a whole KDN (form "diagonal" or "isotropic";
    docs/math.md §4, §5, §7): the gain op, then the memory S_t = (I − κ_t k_tᵀ) D_t S_{t−1} + κ_t v_tᵀ by
    the two-key op, κ_t the diagonal gain or κ_t = fl(β_t k_t) (as the reference's parallel form and
    `kalman-oracle-gpu run` compute them), differentiable in every tensor input. Inputs as kdn_gain's,
    and v [B, T, HV, V], initial_state [N, HV, K, V] or None (zero); cu_seqlens (B = 1) packs N sequences
    in one row, each op called once. The memory reads one dtype and κ is
    float32, so q, k, v, g and the initial state go to it widened to float32 (exactly). backward_operands:
    the memory's backward (delta_rule's); the gain path's backward is binary32 either way."""
    B, T, H, K = k.shape
    HV = v.shape[2]
    if scale is None:
        scale = K ** -0.5
    _, gain, readout_variance, final_covariance = kdn_gain(form, k, q, g, omega, r, mu, initial_covariance, scale,
                                                           cu_seqlens)
    k32 = k.float()
    if form == "diagonal":
        kappa = gain
    else:
        # κ_t = β_t k_t per value head (grouped value heads share their key head's k).
        kappa = gain.unsqueeze(-1) * k32.expand(B, T, H, K).repeat_interleave(HV // H, dim=2)
    g32 = g.float().expand(B, T, HV, K)
    o, final_state = delta_rule("two_key", q.float(), k32, v.float(), g32, None, scale,
                                None if initial_state is None else initial_state.float(), True, kappa=kappa,
                                cu_seqlens=cu_seqlens, backward_operands=backward_operands)
    return o, final_state, readout_variance, final_covariance


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                     backward_operands="f32"):
    """DeltaNet (fla's chunk_delta_rule's arguments and layouts)."""
    return delta_rule("delta_net", q, k, v, None, beta, scale, initial_state, output_final_state,
                      cu_seqlens=cu_seqlens, backward_operands=backward_operands)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           cu_seqlens=None, backward_operands="f32"):
    """Gated DeltaNet, g [B, T, HV] log gates (fla's chunk_gated_delta_rule)."""
    return delta_rule("gated_delta_net", q, k, v, g, beta, scale, initial_state, output_final_state,
                      cu_seqlens=cu_seqlens, backward_operands=backward_operands)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              backward_operands="f32"):
    """KDA, g [B, T, HV, K] log gates (fla's chunk_kda, without its in-kernel gate activation)."""
    return delta_rule("kda", q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens=cu_seqlens,
                      backward_operands=backward_operands)


def chunk_gla(q, k, v, g, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              backward_operands="f32"):
    """GLA, g [B, T, HV, K] log gates (fla's chunk_gla). The arguments after g are keyword-only: fla's
    fifth positional argument is g_cumsum, which this op does not take, so a positional call ported
    from fla is refused instead of reading g_cumsum as the scale."""
    return delta_rule("gla", q, k, v, g, None, scale, initial_state, output_final_state, cu_seqlens=cu_seqlens,
                      backward_operands=backward_operands)
