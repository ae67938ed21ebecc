// The KLA kernels as PyTorch operations (docs/kernels.md, "PyTorch"): forward (with checkpoints for
// the backward) and backward, on CUDA tensors, on the current stream. Built by kalman_oracle_torch.py
// with torch.utils.cpp_extension from this file and gpu/src; registered there as the custom op
// kalman_oracle::kla with autograd.
//
// Inputs (one dtype among float32, bfloat16, float16): v [B, T, M]; Lambda broadcastable to
// [B, T, M]; k, q [B, T, S]; a_bar, p_bar broadcastable to [B, T, M, S]; lambda_0, eta_0
// broadcastable to [B, M, S] or None (the defaults 1 and 0). Broadcasting is by strides (expand):
// nothing is materialised in the forward. Outputs and gradients are float32.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/kla_backward.hpp"
#include "kalman_oracle/gpu/kla_forward.hpp"
#include "torch_views.hpp"

namespace gpu = kalman_oracle::gpu;

namespace {

gpu::input_dtype dtype_of(const at::Tensor& x) { return gpu::torch_ops::dtype_of(x, "kla"); }

gpu::strided_input view(const at::Tensor& x, at::IntArrayRef shape, const char* name) {
  return gpu::torch_ops::view(x, shape, "kla", name);
}

struct sizes {
  int64_t B, T, M, S;
};

sizes check_inputs(const at::Tensor& v, const at::Tensor& Lambda, const at::Tensor& k, const at::Tensor& q,
                   const at::Tensor& a_bar, const at::Tensor& p_bar, const std::optional<at::Tensor>& lambda_0,
                   const std::optional<at::Tensor>& eta_0) {
  TORCH_CHECK(k.dim() == 3, "kla: k must be [B, T, S], got ", gpu::torch_ops::shape_string(k.sizes()));
  TORCH_CHECK(v.dim() == 3 && v.size(0) == k.size(0) && v.size(1) == k.size(1),
              "kla: v must be [B, T, M] with B, T of k, got ", gpu::torch_ops::shape_string(v.sizes()));
  TORCH_CHECK(q.sizes() == k.sizes(), "kla: q must have k's shape ", gpu::torch_ops::shape_string(k.sizes()), ", got ",
              gpu::torch_ops::shape_string(q.sizes()));
  using gpu::torch_ops::input;
  gpu::torch_ops::require_same_device_and_dtype(
      {input("k", k), input("v", v), input("Lambda", Lambda), input("q", q), input("a_bar", a_bar),
       input("p_bar", p_bar), input("lambda_0", lambda_0), input("eta_0", eta_0)},
      "kla");
  return {k.size(0), k.size(1), v.size(2), k.size(2)};
}

gpu::kla_forward_problem problem_of(const sizes& n, const at::Tensor& v, const at::Tensor& Lambda, const at::Tensor& k,
                                    const at::Tensor& q, const at::Tensor& a_bar, const at::Tensor& p_bar,
                                    const std::optional<at::Tensor>& lambda_0, const std::optional<at::Tensor>& eta_0) {
  gpu::kla_forward_problem p;
  p.batch = static_cast<int>(n.B);
  p.tokens = static_cast<int>(n.T);
  p.channels = static_cast<int>(n.M);
  p.state = static_cast<int>(n.S);
  p.dtype = dtype_of(k);
  p.q = view(q, {n.B, n.T, n.S}, "q");
  p.k = view(k, {n.B, n.T, n.S}, "k");
  p.v = view(v, {n.B, n.T, n.M}, "v");
  p.Lambda = view(Lambda, {n.B, n.T, n.M}, "Lambda");
  p.a_bar = view(a_bar, {n.B, n.T, n.M, n.S}, "a_bar");
  p.p_bar = view(p_bar, {n.B, n.T, n.M, n.S}, "p_bar");
  if (lambda_0) p.lambda_0 = view(*lambda_0, {n.B, n.M, n.S}, "lambda_0");
  if (eta_0) p.eta_0 = view(*eta_0, {n.B, n.M, n.S}, "eta_0");
  p.stream = at::cuda::getCurrentCUDAStream().stream();
  return p;
}

/// y, y_var, final_lambda, final_eta, checkpoint_lambda, checkpoint_eta (float32).
std::vector<at::Tensor> forward(const at::Tensor& v, const at::Tensor& Lambda, const at::Tensor& k, const at::Tensor& q,
                                const at::Tensor& a_bar, const at::Tensor& p_bar,
                                const std::optional<at::Tensor>& lambda_0, const std::optional<at::Tensor>& eta_0) {
  const sizes n = check_inputs(v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0);
  const c10::cuda::CUDAGuard guard(k.device());
  gpu::kla_forward_problem p = problem_of(n, v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0);
  const auto f32 = k.options().dtype(at::kFloat);
  at::Tensor y = at::empty({n.B, n.T, n.M}, f32), y_var = at::empty({n.B, n.T, n.M}, f32);
  at::Tensor final_lambda = at::empty({n.B, n.M, n.S}, f32), final_eta = at::empty({n.B, n.M, n.S}, f32);
  const int64_t chunks = (n.T + gpu::kla_chunk_tokens - 1) / gpu::kla_chunk_tokens;
  at::Tensor checkpoint_lambda = at::empty({n.B, chunks, n.M, n.S}, f32),
             checkpoint_eta = at::empty({n.B, chunks, n.M, n.S}, f32);
  p.y = y.data_ptr<float>();
  p.y_var = y_var.data_ptr<float>();
  p.final_lambda = final_lambda.data_ptr<float>();
  p.final_eta = final_eta.data_ptr<float>();
  p.checkpoint_lambda = checkpoint_lambda.data_ptr<float>();
  p.checkpoint_eta = checkpoint_eta.data_ptr<float>();
  gpu::kla_forward_device(p);
  return {y, y_var, final_lambda, final_eta, checkpoint_lambda, checkpoint_eta};
}

const float* cotangent(const std::optional<at::Tensor>& x, at::IntArrayRef shape, std::vector<at::Tensor>& keep) {
  if (!x || !x->defined()) return nullptr;
  keep.push_back(x->to(at::kFloat).expand(shape).contiguous());
  return keep.back().data_ptr<float>();
}

/// dq, dk [B, T, S]; dv, dLambda [B, T, M]; da_bar, dp_bar ([M, S] when both are static, else
/// [B, T, M, S]); dlambda_0, deta_0 [B, M, S] (float32; the caller sums them to the inputs' shapes).
std::vector<at::Tensor> backward(const at::Tensor& v, const at::Tensor& Lambda, const at::Tensor& k,
                                 const at::Tensor& q, const at::Tensor& a_bar, const at::Tensor& p_bar,
                                 const std::optional<at::Tensor>& lambda_0, const std::optional<at::Tensor>& eta_0,
                                 const std::optional<at::Tensor>& dy, const std::optional<at::Tensor>& dy_var,
                                 const std::optional<at::Tensor>& dfinal_lambda,
                                 const std::optional<at::Tensor>& dfinal_eta, const at::Tensor& checkpoint_lambda,
                                 const at::Tensor& checkpoint_eta) {
  const sizes n = check_inputs(v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0);
  const c10::cuda::CUDAGuard guard(k.device());
  // The backward's layouts (kla_backward.hpp): Λ [B, T, M]; ā, p̄ both static [M, S] (expanded
  // from a tensor that has no B or T axis of its own) or both [B, T, M, S]; priors [B, M, S].
  const at::Tensor Lambda_full = Lambda.expand({n.B, n.T, n.M}).contiguous();
  const auto is_static = [&](const at::Tensor& x) {
    const at::Tensor e = x.expand({n.B, n.T, n.M, n.S});
    return e.stride(0) == 0 && e.stride(1) == 0;
  };
  const bool static_decay = is_static(a_bar) && is_static(p_bar);
  const auto decay = [&](const at::Tensor& x) {
    return static_decay ? x.expand({n.B, n.T, n.M, n.S}).select(0, 0).select(0, 0).contiguous()
                        : x.expand({n.B, n.T, n.M, n.S}).contiguous();
  };
  const at::Tensor a_layout = decay(a_bar), p_layout = decay(p_bar);
  std::optional<at::Tensor> lambda_0_full, eta_0_full;
  if (lambda_0) lambda_0_full = lambda_0->expand({n.B, n.M, n.S}).contiguous();
  if (eta_0) eta_0_full = eta_0->expand({n.B, n.M, n.S}).contiguous();
  gpu::kla_backward_problem g;
  g.forward = problem_of(n, v, Lambda_full, k, q, static_decay ? a_layout.view({1, 1, n.M, n.S}) : a_layout,
                         static_decay ? p_layout.view({1, 1, n.M, n.S}) : p_layout, lambda_0_full, eta_0_full);
  std::vector<at::Tensor> keep;
  g.dy = cotangent(dy, {n.B, n.T, n.M}, keep);
  g.dy_var = cotangent(dy_var, {n.B, n.T, n.M}, keep);
  g.dfinal_lambda = cotangent(dfinal_lambda, {n.B, n.M, n.S}, keep);
  g.dfinal_eta = cotangent(dfinal_eta, {n.B, n.M, n.S}, keep);
  TORCH_CHECK(checkpoint_lambda.is_contiguous() && checkpoint_eta.is_contiguous(),
              "kla: checkpoints must be contiguous");
  g.checkpoint_lambda = checkpoint_lambda.data_ptr<float>();
  g.checkpoint_eta = checkpoint_eta.data_ptr<float>();
  const auto f32 = k.options().dtype(at::kFloat);
  at::Tensor dq = at::empty({n.B, n.T, n.S}, f32), dk = at::empty({n.B, n.T, n.S}, f32);
  at::Tensor dv = at::empty({n.B, n.T, n.M}, f32), dLambda = at::empty({n.B, n.T, n.M}, f32);
  at::Tensor da = static_decay ? at::empty({n.M, n.S}, f32) : at::empty({n.B, n.T, n.M, n.S}, f32);
  at::Tensor dp = at::empty_like(da);
  at::Tensor dlambda_0 = at::empty({n.B, n.M, n.S}, f32), deta_0 = at::empty({n.B, n.M, n.S}, f32);
  g.dq = dq.data_ptr<float>();
  g.dk = dk.data_ptr<float>();
  g.dv = dv.data_ptr<float>();
  g.dLambda = dLambda.data_ptr<float>();
  g.da_bar = da.data_ptr<float>();
  g.dp_bar = dp.data_ptr<float>();
  g.dlambda_0 = dlambda_0.data_ptr<float>();
  g.deta_0 = deta_0.data_ptr<float>();
  at::Tensor scratch =
      at::empty({static_cast<int64_t>(gpu::kla_backward_scratch_bytes(g))}, k.options().dtype(at::kByte));
  gpu::kla_backward_device(g, scratch.data_ptr());
  return {dq, dk, dv, dLambda, da, dp, dlambda_0, deta_0};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "KLA forward: y, y_var, final_lambda, final_eta and the checkpoints (float32)");
  m.def("backward", &backward, "KLA backward: every input's gradient (float32, before summing to the inputs' shapes)");
}
