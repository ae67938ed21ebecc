// The KDN gain kernels as PyTorch operations (docs/kernels.md, "PyTorch"): forward and backward, on
// CUDA tensors, on the current stream. Built by kalman_oracle_torch.py with
// torch.utils.cpp_extension from this file and gpu/src; registered there as the custom op
// kalman_oracle::kdn_gain with autograd.
//
// Inputs (one dtype among float32, bfloat16, float16), L = K (diagonal) or 1 (isotropic):
// k, q [B, T, H, K]; g broadcastable to [B, T, HV, K] (log gates); omega to [B, T, HV, L] (diagonal)
// or [B, T, HV]; r to [B, T, HV]; mu to [HV] or None (μ = K); initial_covariance to [N, HV, L] or
// None (1); cu_seqlens None (N = B) or fla's N + 1 token offsets of a packed row (B = 1, int32 or int64,
// on any device: read on the host, torch_views.hpp), sequence n from initial_covariance[n] to
// final_covariance[n]. HV is g's third axis, a multiple of H (grouped value heads). Broadcasting is by
// strides. Outputs and gradients are float32; dmu of a packed batch is its sequences' in order
// (kdn_gain_backward.hpp).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/kdn_gain_backward.hpp"
#include "torch_views.hpp"

namespace gpu = kalman_oracle::gpu;

namespace {

struct sizes {
  int64_t B, T, H, HV, K, L, N;  // N: sequences (cu_seqlens' count, else B)
  bool diagonal;
};

/// The sizes, the inputs checked; with cu_seqlens, `offsets` holds them on the host for as long as the
/// problem is used.
sizes check_inputs(const std::string& form, const at::Tensor& k, const at::Tensor& q, const at::Tensor& g,
                   const at::Tensor& omega, const at::Tensor& r, const std::optional<at::Tensor>& mu,
                   const std::optional<at::Tensor>& initial_covariance, const std::optional<at::Tensor>& cu_seqlens,
                   std::vector<long long>& offsets) {
  TORCH_CHECK(form == "diagonal" || form == "isotropic", "kdn_gain: form must be diagonal or isotropic, got ", form);
  TORCH_CHECK(k.dim() == 4, "kdn_gain: k must be [B, T, H, K], got ", gpu::torch_ops::shape_string(k.sizes()));
  TORCH_CHECK(q.sizes() == k.sizes(), "kdn_gain: q must have k's shape ", gpu::torch_ops::shape_string(k.sizes()),
              ", got ", gpu::torch_ops::shape_string(q.sizes()));
  TORCH_CHECK(g.dim() == 4 && g.size(3) == k.size(3), "kdn_gain: g must be [B, T, HV, K] (K of k), got ",
              gpu::torch_ops::shape_string(g.sizes()));
  const int64_t HV = g.size(2), H = k.size(2);
  TORCH_CHECK(HV % H == 0, "kdn_gain: g's HV = ", std::to_string(HV),
              " must be a multiple of k's H = ", std::to_string(H));
  using gpu::torch_ops::input;
  gpu::torch_ops::require_same_device_and_dtype(
      {input("k", k), input("q", q), input("g", g), input("omega", omega), input("r", r), input("mu", mu),
       input("initial_covariance", initial_covariance)},
      "kdn_gain");
  const bool diagonal = form == "diagonal";
  int64_t N = k.size(0);
  if (cu_seqlens) {
    offsets = gpu::torch_ops::sequence_offsets(*cu_seqlens, k.size(0), "kdn_gain");
    N = static_cast<int64_t>(offsets.size()) - 1;
  }
  return {k.size(0), k.size(1), H, HV, k.size(3), diagonal ? k.size(3) : 1, N, diagonal};
}

gpu::kdn_gain_problem problem_of(const sizes& n, const at::Tensor& k, const at::Tensor& q, const at::Tensor& g,
                                 const at::Tensor& omega, const at::Tensor& r, const std::optional<at::Tensor>& mu,
                                 const std::optional<at::Tensor>& initial_covariance, double scale,
                                 const std::vector<long long>& offsets) {
  const auto view = [](const at::Tensor& x, at::IntArrayRef shape, const char* name) {
    return gpu::torch_ops::view(x, shape, "kdn_gain", name);
  };
  gpu::kdn_gain_problem p;
  p.form = n.diagonal ? gpu::kdn_form::diagonal : gpu::kdn_form::isotropic;
  p.batch = static_cast<int>(n.B);
  p.tokens = static_cast<int>(n.T);
  p.heads = static_cast<int>(n.HV);
  p.key_dim = static_cast<int>(n.K);
  p.key_head_group = static_cast<int>(n.HV / n.H);
  p.dtype = gpu::torch_ops::dtype_of(k, "kdn_gain");
  p.tau = static_cast<float>(scale);
  if (!offsets.empty()) {
    p.cu_seqlens = offsets.data();
    p.sequences = static_cast<int>(n.N);
  }
  p.k = view(k, {n.B, n.T, n.H, n.K}, "k");
  p.q = view(q, {n.B, n.T, n.H, n.K}, "q");
  p.g = view(g, {n.B, n.T, n.HV, n.K}, "g");
  p.omega = n.diagonal ? view(omega, {n.B, n.T, n.HV, n.K}, "omega") : view(omega, {n.B, n.T, n.HV}, "omega");
  p.r = view(r, {n.B, n.T, n.HV}, "r");
  if (mu) p.mu = view(*mu, {n.HV}, "mu");
  if (initial_covariance)
    p.initial_covariance = n.diagonal ? view(*initial_covariance, {n.N, n.HV, n.K}, "initial_covariance")
                                      : view(*initial_covariance, {n.N, n.HV}, "initial_covariance");
  p.stream = at::cuda::getCurrentCUDAStream().stream();
  return p;
}

/// Checks the problem by the kernels' rules (before the scratch's size, which reads cu_seqlens), takes the
/// scratch from torch's caching allocator and runs the kernels; a rule broken (sizes, offsets) reaches
/// Python as a RuntimeError naming it, as the delta-rule op's do.
template <class Problem>
void run_checked(const Problem& p, void (*check)(const Problem&), long long (*scratch_bytes)(const Problem&),
                 void (*run)(const Problem&, void*), const at::TensorOptions& options) {
  try {
    check(p);
    at::Tensor scratch = at::empty({std::max<int64_t>(scratch_bytes(p), 1)}, options.dtype(at::kByte));
    run(p, scratch.data_ptr());
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
}

/// [B, T, HV, L] (or [B, T, HV] isotropic) and [N, HV, L] (or [N, HV]).
std::vector<int64_t> per_token_shape(const sizes& n) {
  return n.diagonal ? std::vector<int64_t>{n.B, n.T, n.HV, n.K} : std::vector<int64_t>{n.B, n.T, n.HV};
}
std::vector<int64_t> final_shape(const sizes& n) {
  return n.diagonal ? std::vector<int64_t>{n.N, n.HV, n.K} : std::vector<int64_t>{n.N, n.HV};
}

/// predicted_covariance, gain (κ or β), readout_variance, final_covariance (float32).
std::vector<at::Tensor> forward(const std::string& form, const at::Tensor& k, const at::Tensor& q, const at::Tensor& g,
                                const at::Tensor& omega, const at::Tensor& r, const std::optional<at::Tensor>& mu,
                                const std::optional<at::Tensor>& initial_covariance, double scale,
                                const std::optional<at::Tensor>& cu_seqlens) {
  std::vector<long long> offsets;
  const sizes n = check_inputs(form, k, q, g, omega, r, mu, initial_covariance, cu_seqlens, offsets);
  const c10::cuda::CUDAGuard guard(k.device());
  const auto f32 = k.options().dtype(at::kFloat);
  at::Tensor predicted = at::empty(per_token_shape(n), f32), gain = at::empty(per_token_shape(n), f32);
  at::Tensor readout = at::empty({n.B, n.T, n.HV}, f32), final_covariance = at::empty(final_shape(n), f32);
  gpu::kdn_gain_problem p = problem_of(n, k, q, g, omega, r, mu, initial_covariance, scale, offsets);
  p.predicted_covariance = predicted.data_ptr<float>();
  p.gain = gain.data_ptr<float>();
  p.readout_variance = readout.data_ptr<float>();
  p.final_covariance = final_covariance.data_ptr<float>();
  run_checked(p, gpu::kdn_gain_check, gpu::kdn_gain_scratch_bytes, gpu::kdn_gain_device, k.options());
  return {predicted, gain, readout, final_covariance};
}

const float* cotangent(const std::optional<at::Tensor>& x, const std::vector<int64_t>& shape,
                       std::vector<at::Tensor>& keep) {
  if (!x || !x->defined()) return nullptr;
  keep.push_back(x->to(at::kFloat).expand(shape).contiguous());
  return keep.back().data_ptr<float>();
}

/// dk, dq [B, T, H, K]; dg [B, T, HV, K]; domega [B, T, HV, L] (or [B, T, HV]); dr [B, T, HV];
/// dmu [HV]; dinitial_covariance [N, HV, L] (or [N, HV]) (float32; the caller sums them to the
/// inputs' shapes). `predicted` is the forward's p̂ (so the forward is not run again).
std::vector<at::Tensor> backward(const std::string& form, const at::Tensor& k, const at::Tensor& q, const at::Tensor& g,
                                 const at::Tensor& omega, const at::Tensor& r, const std::optional<at::Tensor>& mu,
                                 const std::optional<at::Tensor>& initial_covariance, double scale,
                                 const std::optional<at::Tensor>& cu_seqlens, const at::Tensor& predicted,
                                 const std::optional<at::Tensor>& d_predicted, const std::optional<at::Tensor>& d_gain,
                                 const std::optional<at::Tensor>& d_readout, const std::optional<at::Tensor>& d_final) {
  std::vector<long long> offsets;
  const sizes n = check_inputs(form, k, q, g, omega, r, mu, initial_covariance, cu_seqlens, offsets);
  const c10::cuda::CUDAGuard guard(k.device());
  TORCH_CHECK(predicted.scalar_type() == at::kFloat && predicted.is_contiguous() &&
                  predicted.sizes() == at::IntArrayRef(per_token_shape(n)),
              "kdn_gain: the saved prediction must be the forward's float32 output");
  gpu::kdn_gain_backward_problem bp;
  bp.forward = problem_of(n, k, q, g, omega, r, mu, initial_covariance, scale, offsets);
  bp.predicted_covariance = predicted.data_ptr<float>();
  std::vector<at::Tensor> keep;
  bp.d_predicted_covariance = cotangent(d_predicted, per_token_shape(n), keep);
  bp.d_gain = cotangent(d_gain, per_token_shape(n), keep);
  bp.d_readout_variance = cotangent(d_readout, {n.B, n.T, n.HV}, keep);
  bp.d_final_covariance = cotangent(d_final, final_shape(n), keep);
  const auto f32 = k.options().dtype(at::kFloat);
  at::Tensor dk = at::empty({n.B, n.T, n.H, n.K}, f32), dq = at::empty({n.B, n.T, n.H, n.K}, f32);
  at::Tensor dg = at::empty({n.B, n.T, n.HV, n.K}, f32), domega = at::empty(per_token_shape(n), f32);
  at::Tensor dr = at::empty({n.B, n.T, n.HV}, f32), dmu = at::empty({n.HV}, f32);
  at::Tensor dprior = at::empty(final_shape(n), f32);
  bp.dk = dk.data_ptr<float>();
  bp.dq = dq.data_ptr<float>();
  bp.dg = dg.data_ptr<float>();
  bp.domega = domega.data_ptr<float>();
  bp.dr = dr.data_ptr<float>();
  bp.dmu = dmu.data_ptr<float>();
  bp.dinitial_covariance = dprior.data_ptr<float>();
  run_checked(bp, gpu::kdn_gain_backward_check, gpu::kdn_gain_backward_scratch_bytes, gpu::kdn_gain_backward_device,
              k.options());
  return {dk, dq, dg, domega, dr, dmu, dprior};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "KDN gains: predicted_covariance, gain, readout_variance, final_covariance (float32)");
  m.def("backward", &backward, "KDN gains backward: dk, dq, dg, domega, dr, dmu, dinitial_covariance (float32)");
}
