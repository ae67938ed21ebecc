// gpu/tools/run_delta_rule.hpp.
#include "run_delta_rule.hpp"

#include <cmath>
#include <vector>

#include "fixture_inputs.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_chunked_twin.hpp"

namespace kalman_oracle::gpu::tools {

safetensors::file run_delta_rule(const safetensors::file& f, const std::string& source, executor on) {
  const std::string model = fixture_model(f, source);
  // B, T, H, K from k; HV, V from v (models/fixed_gain.hpp's rules; the fixture was generated under them).
  const safetensors::tensor_entry& k = f.at("k", source);
  const safetensors::tensor_entry& v = f.at("v", source);
  if (k.shape.size() != 4 || v.shape.size() != 4)
    throw input_error(source + ": k and v must have rank 4 ([B, T, H, K] and [B, T, HV, V])");
  const long long B = static_cast<long long>(k.shape[0]), T = static_cast<long long>(k.shape[1]),
                  H = static_cast<long long>(k.shape[2]), K = static_cast<long long>(k.shape[3]),
                  HV = static_cast<long long>(v.shape[2]), V = static_cast<long long>(v.shape[3]);
  if (H < 1 || HV % H != 0) throw input_error(source + ": v's heads must be a multiple of k's (grouped value heads)");

  delta_rule_problem p;
  p.rule = model == "gla" ? delta_rule_kind::gla : delta_rule_kind::beta_form;
  p.gate = model == "delta_net"         ? delta_rule_gate::none
           : model == "gated_delta_net" ? delta_rule_gate::per_head
                                        : delta_rule_gate::per_channel;
  p.heads = static_cast<int>(HV);
  p.key_dim = static_cast<int>(K);
  p.value_dim = static_cast<int>(V);
  p.key_head_group = static_cast<int>(HV / H);
  p.dtype = common_input_dtype(f, {"q", "k", "v", "beta", "g", "initial_state"}, source);
  // The reference's query scale in binary32 (models/query_scale.hpp): K ** -0.5 in binary64, rounded.
  p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
  const strided_input k_all = broadcast_to(k, {B, T, H, K}, source),
                      q_all = broadcast_to(f.at("q", source), {B, T, H, K}, source),
                      v_all = broadcast_to(v, {B, T, HV, V}, source);
  strided_input beta_all, g_all, prior_all;
  if (p.rule == delta_rule_kind::beta_form) beta_all = broadcast_to(f.at("beta", source), {B, T, HV}, source);
  if (p.gate == delta_rule_gate::per_head) g_all = broadcast_to(f.at("g", source), {B, T, HV}, source);
  if (p.gate == delta_rule_gate::per_channel) g_all = broadcast_to(f.at("g", source), {B, T, HV, K}, source);

  const auto [starts, ends] = sequences(f, B, T, source);
  const bool varlen = f.find("cu_seqlens") != nullptr;
  const long long N = varlen ? static_cast<long long>(starts.size()) : B;
  if (const auto* x = f.find("initial_state")) prior_all = broadcast_to(*x, {N, HV, K, V}, source);

  std::vector<float> o(B * T * HV * V), final_state(N * HV * K * V);
  for (long long n = 0; n < static_cast<long long>(starts.size()); ++n) {
    const long long t0 = starts[n];
    p.batch = static_cast<int>(varlen ? 1 : B);
    p.tokens = static_cast<int>(ends[n] - t0);
    p.k = advanced(k_all, t0 * k_all.stride[1], p.dtype);
    p.q = advanced(q_all, t0 * q_all.stride[1], p.dtype);
    p.v = advanced(v_all, t0 * v_all.stride[1], p.dtype);
    p.beta = advanced(beta_all, t0 * beta_all.stride[1], p.dtype);
    p.g = advanced(g_all, t0 * g_all.stride[1], p.dtype);
    p.initial_state = advanced(prior_all, (varlen ? n : 0) * prior_all.stride[0], p.dtype);
    p.o = o.data() + t0 * HV * V;
    p.final_state = final_state.data() + (varlen ? n : 0) * HV * K * V;
    if (on == executor::twin) {
      delta_rule_twin(p);
    } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
      delta_rule_host(p);
#else
      throw input_error(
          "--device cuda: this build has no CUDA kernels (no CUDA compiler was found); use --device twin");
#endif
    }
  }

  const auto u = [](long long x) { return static_cast<std::size_t>(x); };
  safetensors::file out;
  out.tensors.push_back(safetensors::make_f32("o", {u(B), u(T), u(HV), u(V)}, o));
  out.tensors.push_back(safetensors::make_f32("final_state", {u(N), u(HV), u(K), u(V)}, final_state));
  return out;
}

}  // namespace kalman_oracle::gpu::tools
