// gpu/tools/run_delta_rule.hpp.
#include "run_delta_rule.hpp"

#include <cmath>
#include <vector>

#include "fixture_inputs.hpp"
#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_backward_twin.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_chunked_twin.hpp"

namespace kalman_oracle::gpu::tools {

namespace {

/// p (its rule, gate, sizes, dtype and τ set) over all of a run's inputs: B rows of T tokens, or with
/// varlen one row holding the sequences [starts[n], ends[n]) back to back, their offsets put in
/// `cu_seqlens` (which must outlive the problem); outputs unset.
delta_rule_problem whole_problem(delta_rule_problem p, const delta_rule_views& all,
                                 const std::vector<long long>& starts, const std::vector<long long>& ends, bool varlen,
                                 long long B, long long T, std::vector<long long>& cu_seqlens) {
  if (varlen) {
    cu_seqlens = starts;
    cu_seqlens.push_back(ends.empty() ? 0 : ends.back());
    p.cu_seqlens = cu_seqlens.data();
    p.sequences = static_cast<int>(starts.size());
  }
  p.batch = static_cast<int>(B);
  p.tokens = static_cast<int>(T);
  p.q = all.q, p.k = all.k, p.v = all.v, p.beta = all.beta, p.kappa = all.kappa, p.g = all.g;
  p.initial_state = all.initial_state;
  p.o = p.final_state = nullptr;
  return p;
}

#if !defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
[[noreturn]] void no_cuda() {
  throw input_error("--device cuda: this build has no CUDA kernels (no CUDA compiler was found); use --device twin");
}
#endif

}  // namespace

void run_delta_rule_sequences(delta_rule_problem p, const delta_rule_views& all, const std::vector<long long>& starts,
                              const std::vector<long long>& ends, bool varlen, long long B, long long T,
                              std::vector<float>& o, std::vector<float>& final_state, executor on) {
  const long long HV = p.heads, K = p.key_dim, V = p.value_dim;
  const long long N = varlen ? static_cast<long long>(starts.size()) : B;
  o.assign(B * T * HV * V, 0.0f);
  final_state.assign(N * HV * K * V, 0.0f);
  // One call: a varlen batch through cu_seqlens (the kernel's chunk map), its offsets the fixture's.
  std::vector<long long> cu_seqlens;
  p = whole_problem(p, all, starts, ends, varlen, B, T, cu_seqlens);
  p.o = o.data();
  p.final_state = final_state.data();
  if (on == executor::twin) {
    delta_rule_twin(p);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    delta_rule_host(p);
#else
    no_cuda();
#endif
  }
}

void run_delta_rule_backward_sequences(delta_rule_problem p, const delta_rule_views& all,
                                       const std::vector<long long>& starts, const std::vector<long long>& ends,
                                       bool varlen, long long B, long long T, const float* d_o,
                                       const float* d_final_state, delta_rule_gradients& g, executor on,
                                       delta_rule_backward_operands operands) {
  const long long HV = p.heads, H = HV / p.key_head_group, K = p.key_dim, V = p.value_dim;
  const long long N = varlen ? static_cast<long long>(starts.size()) : B;
  const long long G = p.gate == delta_rule_gate::per_channel ? K : 1;
  g.dq.assign(B * T * H * K, 0.0f), g.dk = g.dq, g.dv.assign(B * T * HV * V, 0.0f);
  g.dbeta.assign(p.rule == delta_rule_kind::beta_form ? B * T * HV : 0, 0.0f);
  g.dkappa.assign(p.rule == delta_rule_kind::two_key ? B * T * HV * K : 0, 0.0f);
  g.dg.assign(p.gate != delta_rule_gate::none ? B * T * HV * G : 0, 0.0f);
  g.dinitial_state.assign(N * HV * K * V, 0.0f);
  const auto data = [](std::vector<float>& x) { return x.empty() ? nullptr : x.data(); };
  // One call, as the forward.
  std::vector<long long> cu_seqlens;
  delta_rule_backward_problem bp;
  bp.forward = whole_problem(p, all, starts, ends, varlen, B, T, cu_seqlens);
  bp.d_o = d_o, bp.d_final_state = d_final_state, bp.operands = operands;
  bp.dq = data(g.dq), bp.dk = data(g.dk), bp.dv = data(g.dv), bp.dbeta = data(g.dbeta), bp.dkappa = data(g.dkappa);
  bp.dg = data(g.dg), bp.d_initial_state = data(g.dinitial_state);
  if (on == executor::twin) {
    delta_rule_backward_twin(bp);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    delta_rule_backward_host(bp);
#else
    no_cuda();
#endif
  }
}

safetensors::file run_delta_rule(const safetensors::file& f, const std::string& source, executor on, bool gradients,
                                 delta_rule_backward_operands operands) {
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

  const auto u = [](long long x) { return static_cast<std::size_t>(x); };
  safetensors::file out;
  if (gradients) {
    // The fixture's cotangents (binary32; an absent one is zero) and the gradients it certifies.
    std::vector<float> d_o, d_final;
    const float* do_data = fixture_cotangent(f, "do", d_o);
    const float* dfinal_data = fixture_cotangent(f, "dfinal_state", d_final);
    if (do_data == nullptr && dfinal_data == nullptr)
      throw input_error(source +
                        ": --gradients: the fixture has no cotangents (do, dfinal_state); rule: a fixture "
                        "generated with gradients");
    delta_rule_gradients g;
    run_delta_rule_backward_sequences(p, {q_all, k_all, v_all, beta_all, {}, g_all, prior_all}, starts, ends, varlen, B,
                                      T, do_data, dfinal_data, g, on, operands);
    add_fixture_gradients(out, f, source,
                          {{"dq", &g.dq},
                           {"dk", &g.dk},
                           {"dv", &g.dv},
                           {"dbeta", &g.dbeta},
                           {"dg", &g.dg},
                           {"dinitial_state", &g.dinitial_state}});
    return out;
  }
  std::vector<float> o, final_state;
  run_delta_rule_sequences(p, {q_all, k_all, v_all, beta_all, {}, g_all, prior_all}, starts, ends, varlen, B, T, o,
                           final_state, on);

  out.tensors.push_back(safetensors::make_f32("o", {u(B), u(T), u(HV), u(V)}, o));
  out.tensors.push_back(safetensors::make_f32("final_state", {u(N), u(HV), u(K), u(V)}, final_state));
  return out;
}

}  // namespace kalman_oracle::gpu::tools
