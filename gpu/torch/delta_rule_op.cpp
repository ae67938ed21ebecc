// The chunked delta-rule memory as a PyTorch operation (docs/kernels.md, "PyTorch"): the fixed-gain
// family (GLA, DeltaNet, GDN, KDA) and the KDNs' two-key memory in fla's layouts, on CUDA tensors, on
// the current stream, forward (tensor cores) and backward (binary32, or with backward_operands "tf32" the
// memory's matrix products on the tensor cores with TF32 operands: delta_rule_backward.hpp). Built by
// kalman_oracle_torch.py with
// torch.utils.cpp_extension from this file and gpu/src; registered there as the custom op
// kalman_oracle::delta_rule with autograd.
//
// Inputs (one dtype among float32, bfloat16, float16): q, k [B, T, H, K]; v [B, T, HV, V] (HV a
// multiple of H: grouped value heads); g [B, T, HV] (GDN) or [B, T, HV, K] (GLA, KDA), log gates;
// β [B, T, HV] (the delta rules); κ [B, T, HV, K] (model two_key: S_t = (I − κ_t k_tᵀ) D_t S_{t−1} +
// κ_t v_tᵀ, the KDNs' memory, docs/math.md §7, with per-channel log gates g [B, T, HV, K]);
// initial_state [N, HV, K, V] or None (zero); cu_seqlens (fla's: N + 1 token offsets 0 … T of a
// variable-length batch, int32 or int64, on any device; B = 1) or None (N = B, one sequence a row).
// Every input may be a numpy broadcast of its shape (read by strides). Outputs float32: o [B, T, HV, V]
// and the final state [N, HV, K, V]. The kernels' grids follow the sequences' lengths, so cu_seqlens
// is read on the host: a CUDA cu_seqlens costs one device-to-host copy (and the stream's sync) a call.
// The kernels compute in the bf16-tc tier (bfloat16 matrix-product operands, binary32 accumulation):
// check them with `conform --arithmetic bf16-tc`.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "torch_views.hpp"

namespace gpu = kalman_oracle::gpu;

namespace {

constexpr const char* op = "delta_rule";

/// The kernels' problem for `model` (gla, delta_net, gated_delta_net, kda, two_key), its inputs checked
/// (before any CUDA call: a tensor on the wrong device is refused by name); outputs and stream unset.
/// With cu_seqlens, `offsets` holds them on the host for as long as the problem is used.
gpu::delta_rule_problem problem_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::optional<at::Tensor>& g, const std::optional<at::Tensor>& beta,
                                   const std::optional<at::Tensor>& kappa,
                                   const std::optional<at::Tensor>& initial_state, double scale,
                                   const std::string& model, const std::optional<at::Tensor>& cu_seqlens,
                                   std::vector<long long>& offsets) {
  TORCH_CHECK(
      model == "gla" || model == "delta_net" || model == "gated_delta_net" || model == "kda" || model == "two_key", op,
      ": model must be gla, delta_net, gated_delta_net, kda or two_key, got ", model);
  TORCH_CHECK(k.dim() == 4, op, ": k must be [B, T, H, K], got ", gpu::torch_ops::shape_string(k.sizes()));
  TORCH_CHECK(q.sizes() == k.sizes(), op, ": q must have k's shape ", gpu::torch_ops::shape_string(k.sizes()), ", got ",
              gpu::torch_ops::shape_string(q.sizes()));
  TORCH_CHECK(v.dim() == 4 && v.size(0) == k.size(0) && v.size(1) == k.size(1), op,
              ": v must be [B, T, HV, V] with B, T of k, got ", gpu::torch_ops::shape_string(v.sizes()));
  const int64_t B = k.size(0), T = k.size(1), H = k.size(2), K = k.size(3), HV = v.size(2), V = v.size(3);
  TORCH_CHECK(H >= 1 && HV % H == 0, op, ": v's heads (", std::to_string(HV), ") must be a multiple of k's (",
              std::to_string(H), ")");
  const bool gated = model != "delta_net", per_head = model == "gated_delta_net", two_key = model == "two_key",
             with_beta = model != "gla" && !two_key;
  TORCH_CHECK(g.has_value() == gated, op, ": ", model, gated ? " needs" : " takes no", " log gates g");
  TORCH_CHECK(beta.has_value() == with_beta, op, ": ", model, with_beta ? " needs" : " takes no", " beta");
  TORCH_CHECK(kappa.has_value() == two_key, op, ": ", model, two_key ? " needs" : " takes no", " kappa");
  using gpu::torch_ops::input;
  gpu::torch_ops::require_same_device_and_dtype(
      {input("k", k), input("q", q), input("v", v), input("g", g), input("beta", beta), input("kappa", kappa),
       input("initial_state", initial_state)},
      op);
  TORCH_CHECK(scale > 0, op, ": scale must be > 0, got ", std::to_string(scale));

  gpu::delta_rule_problem p;
  int64_t N = B;  // sequences
  if (cu_seqlens) {
    offsets = gpu::torch_ops::sequence_offsets(*cu_seqlens, B, op);
    N = static_cast<int64_t>(offsets.size()) - 1;
    p.cu_seqlens = offsets.data();
    p.sequences = static_cast<int>(N);
  }
  p.rule = two_key     ? gpu::delta_rule_kind::two_key
           : with_beta ? gpu::delta_rule_kind::beta_form
                       : gpu::delta_rule_kind::gla;
  p.gate = !gated     ? gpu::delta_rule_gate::none
           : per_head ? gpu::delta_rule_gate::per_head
                      : gpu::delta_rule_gate::per_channel;
  p.batch = static_cast<int>(B);
  p.tokens = static_cast<int>(T);
  p.heads = static_cast<int>(HV);
  p.key_dim = static_cast<int>(K);
  p.value_dim = static_cast<int>(V);
  p.key_head_group = static_cast<int>(HV / H);
  p.dtype = gpu::torch_ops::dtype_of(k, op);
  p.tau = static_cast<float>(scale);
  p.q = gpu::torch_ops::view(q, {B, T, H, K}, op, "q");
  p.k = gpu::torch_ops::view(k, {B, T, H, K}, op, "k");
  p.v = gpu::torch_ops::view(v, {B, T, HV, V}, op, "v");
  if (g)
    p.g = per_head ? gpu::torch_ops::view(*g, {B, T, HV}, op, "g") : gpu::torch_ops::view(*g, {B, T, HV, K}, op, "g");
  if (beta) p.beta = gpu::torch_ops::view(*beta, {B, T, HV}, op, "beta");
  if (kappa) p.kappa = gpu::torch_ops::view(*kappa, {B, T, HV, K}, op, "kappa");
  if (initial_state) p.initial_state = gpu::torch_ops::view(*initial_state, {N, HV, K, V}, op, "initial_state");
  return p;
}

/// The problem's sequences: N of cu_seqlens, else B.
int64_t sequences_of(const gpu::delta_rule_problem& p) { return p.cu_seqlens != nullptr ? p.sequences : p.batch; }

/// o, final_state (float32) of `model` (gla, delta_net, gated_delta_net, kda, two_key) with query scale
/// `scale`.
std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::optional<at::Tensor>& g, const std::optional<at::Tensor>& beta,
                                const std::optional<at::Tensor>& kappa, const std::optional<at::Tensor>& initial_state,
                                double scale, const std::string& model, const std::optional<at::Tensor>& cu_seqlens) {
  std::vector<long long> offsets;
  gpu::delta_rule_problem p = problem_of(q, k, v, g, beta, kappa, initial_state, scale, model, cu_seqlens, offsets);
  const c10::cuda::CUDAGuard guard(k.device());
  p.stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t B = p.batch, T = p.tokens, HV = p.heads, K = p.key_dim, V = p.value_dim, N = sequences_of(p);
  const auto f32 = k.options().dtype(at::kFloat);
  at::Tensor o = at::empty({B, T, HV, V}, f32), final_state = at::empty({N, HV, K, V}, f32);
  p.o = o.data_ptr<float>();
  p.final_state = final_state.data_ptr<float>();
  try {
    // The workspace from torch's caching allocator (256-byte aligned), on the op's stream.
    at::Tensor workspace =
        at::empty({static_cast<int64_t>(gpu::delta_rule_workspace_bytes(p))}, k.options().dtype(at::kByte));
    p.workspace = workspace.data_ptr();
    gpu::delta_rule_device(p);
  } catch (const std::invalid_argument& e) {  // the kernels' size rules
    TORCH_CHECK(false, e.what());
  }
  return {o, final_state};
}

/// A float32 cotangent as the kernels read it (contiguous, on the inputs' device), or null.
const float* cotangent(const std::optional<at::Tensor>& d, at::IntArrayRef shape, const char* name,
                       std::vector<at::Tensor>& keep) {
  if (!d) return nullptr;
  TORCH_CHECK(d->sizes() == shape, op, ": the cotangent of ", name, " must be ", gpu::torch_ops::shape_string(shape),
              ", got ", gpu::torch_ops::shape_string(d->sizes()));
  keep.push_back(d->to(at::kFloat).contiguous());
  return keep.back().data_ptr<float>();
}

/// dq, dk, dv, dg, dbeta, dkappa, dinitial_state (float32, full shapes; an input's own absent: an
/// undefined tensor) from the cotangents of o and the final state (either None: zero); `operands` "f32"
/// (binary32 on the CUDA cores; check with --arithmetic f32) or "tf32" (the memory's matrix products on
/// the tensor cores, TF32 operands; check with --arithmetic tf32-tc).
std::vector<at::Tensor> backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::optional<at::Tensor>& g, const std::optional<at::Tensor>& beta,
                                 const std::optional<at::Tensor>& kappa, const std::optional<at::Tensor>& initial_state,
                                 double scale, const std::string& model, const std::optional<at::Tensor>& cu_seqlens,
                                 const std::optional<at::Tensor>& d_o, const std::optional<at::Tensor>& d_final_state,
                                 const std::string& operands) {
  TORCH_CHECK(operands == "f32" || operands == "tf32", "backward_operands: '", operands,
              "'; rule: f32 (binary32) or tf32 (TF32 operands on the tensor cores)");
  gpu::delta_rule_backward_problem bp;
  bp.operands = operands == "tf32" ? gpu::delta_rule_backward_operands::tf32 : gpu::delta_rule_backward_operands::f32;
  std::vector<long long> offsets;
  bp.forward = problem_of(q, k, v, g, beta, kappa, initial_state, scale, model, cu_seqlens, offsets);
  const c10::cuda::CUDAGuard guard(k.device());
  bp.forward.stream = at::cuda::getCurrentCUDAStream().stream();
  const gpu::delta_rule_problem& p = bp.forward;
  const int64_t B = p.batch, T = p.tokens, HV = p.heads, H = HV / p.key_head_group, K = p.key_dim, V = p.value_dim,
                N = sequences_of(p);
  std::vector<at::Tensor> keep;
  bp.d_o = cotangent(d_o, {B, T, HV, V}, "o", keep);
  bp.d_final_state = cotangent(d_final_state, {N, HV, K, V}, "final_state", keep);
  const auto f32 = k.options().dtype(at::kFloat);
  at::Tensor dq = at::empty({B, T, H, K}, f32), dk = at::empty({B, T, H, K}, f32), dv = at::empty({B, T, HV, V}, f32),
             dg, dbeta, dkappa, dinitial;
  bp.dq = dq.data_ptr<float>(), bp.dk = dk.data_ptr<float>(), bp.dv = dv.data_ptr<float>();
  if (g) {
    dg = p.gate == gpu::delta_rule_gate::per_head ? at::empty({B, T, HV}, f32) : at::empty({B, T, HV, K}, f32);
    bp.dg = dg.data_ptr<float>();
  }
  if (beta) {
    dbeta = at::empty({B, T, HV}, f32);
    bp.dbeta = dbeta.data_ptr<float>();
  }
  if (kappa) {
    dkappa = at::empty({B, T, HV, K}, f32);
    bp.dkappa = dkappa.data_ptr<float>();
  }
  if (initial_state) {
    dinitial = at::empty({N, HV, K, V}, f32);
    bp.d_initial_state = dinitial.data_ptr<float>();
  }
  try {
    at::Tensor workspace =
        at::empty({static_cast<int64_t>(gpu::delta_rule_backward_workspace_bytes(bp))}, k.options().dtype(at::kByte));
    bp.workspace = workspace.data_ptr();
    gpu::delta_rule_backward_device(bp);
  } catch (const std::invalid_argument& e) {  // the kernels' size rules
    TORCH_CHECK(false, e.what());
  }
  return {dq, dk, dv, dg, dbeta, dkappa, dinitial};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "The chunked delta-rule memory's forward: o, final_state (float32)");
  m.def("backward", &backward,
        "The chunked delta-rule memory's backward (operands f32: binary32; tf32: the memory's products on the "
        "tensor cores): dq, dk, dv, dg, dbeta, dkappa, dinitial_state (float32)");
}
