// gpu/tools/run_kdn_gain.hpp.
#include "run_kdn_gain.hpp"

#include <cmath>
#include <vector>

#include "fixture_inputs.hpp"
#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/kdn_gain_backward.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_backward_twin.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_twin.hpp"
#include "run_delta_rule.hpp"

namespace kalman_oracle::gpu::tools {

namespace {

/// What kdn_gradients needs of run_kdn_gain's set-up: the memory's problem and inputs (κ among them),
/// the sequences, and the gain path's problem (a varlen fixture's sequences through cu_seqlens); β
/// [B, T, HV] for the isotropic form.
struct kdn_run {
  const delta_rule_problem& memory;
  const delta_rule_views& memory_inputs;
  const std::vector<long long>& starts;
  const std::vector<long long>& ends;
  bool varlen;
  long long B, T;
  bool diagonal;
  const kdn_gain_problem& gains;
  const std::vector<float>* beta;
};

/// The whole KDN's gradients (run_kdn_gain.hpp): the memory's backward, the isotropic form's κ = β k
/// undone (dβ_t = Σ_i dκ_ti k_ti, dk_t += β_t dκ_t), the gain path's backward with that gain
/// cotangent, each shared input's two shares added (memory's first).
safetensors::file kdn_gradients(const safetensors::file& f, const std::string& source, executor on, const kdn_run& r,
                                delta_rule_backward_operands operands) {
  const delta_rule_problem& m = r.memory;
  const long long B = r.B, T = r.T, HV = m.heads, group = m.key_head_group, H = HV / group, K = m.key_dim,
                  L = r.diagonal ? K : 1;
  const long long N = r.varlen ? static_cast<long long>(r.starts.size()) : B;
  std::vector<float> d_o, d_final, d_readout, d_final_covariance;
  const float* do_data = fixture_cotangent(f, "do", d_o);
  const float* dfinal_data = fixture_cotangent(f, "dfinal_state", d_final);
  const float* dreadout_data = fixture_cotangent(f, "dreadout_variance", d_readout);
  const float* dcov_data = fixture_cotangent(f, "dfinal_covariance", d_final_covariance);
  if (!do_data && !dfinal_data && !dreadout_data && !dcov_data)
    throw input_error(source +
                      ": --gradients: the fixture has no cotangents; rule: a fixture generated with gradients");

  delta_rule_gradients mem;
  run_delta_rule_backward_sequences(m, r.memory_inputs, r.starts, r.ends, r.varlen, B, T, do_data, dfinal_data, mem, on,
                                    operands);
  // The gain's cotangent, and the isotropic form's share of dk through κ = β k (per value head).
  std::vector<float> d_gain(B * T * HV * L), dk_from_kappa;
  if (r.diagonal) {
    d_gain = mem.dkappa;
  } else {
    dk_from_kappa.assign(B * T * HV * K, 0.0f);
    const auto* k = static_cast<const float*>(r.memory_inputs.k.data);
    for (long long b = 0; b < B; ++b)
      for (long long t = 0; t < T; ++t)
        for (long long h = 0; h < HV; ++h) {
          const long long row = (b * T + t) * HV + h;
          float sum = 0.0f;
          for (long long i = 0; i < K; ++i) {
            const float key = k[offset_of(r.memory_inputs.k, b, t, h / group, i)];
            sum = fma_rn(mem.dkappa[row * K + i], key, sum);
            dk_from_kappa[row * K + i] = mul_rn((*r.beta)[row], mem.dkappa[row * K + i]);
          }
          d_gain[row] = sum;
        }
  }
  // The gain path's backward in one call (a varlen fixture's sequences through cu_seqlens; dμ, shared by
  // the sequences, their sum in sequence order: kdn_gain_backward.hpp).
  std::vector<float> dq(B * T * H * K), dk(dq.size()), dg(B * T * HV * K), domega(B * T * HV * L), dr(B * T * HV),
      dmu(HV), dprior(N * HV * L);
  kdn_gain_backward_problem g;
  g.forward = r.gains;
  g.d_gain = d_gain.data();
  g.d_readout_variance = dreadout_data;
  g.d_final_covariance = dcov_data;
  g.dq = dq.data(), g.dk = dk.data(), g.dg = dg.data(), g.domega = domega.data(), g.dr = dr.data();
  g.dmu = dmu.data(), g.dinitial_covariance = dprior.data();
  if (on == executor::twin) {
    kdn_gain_backward_twin(g);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    kdn_gain_backward_host(g);
#else
    throw input_error("--device cuda: this build has no CUDA kernels (no CUDA compiler was found); use --device twin");
#endif
  }
  // Each shared input's shares: the memory's, then the gain path's (the isotropic κ share of dk summed
  // over a key head's value heads, in head order, before).
  for (long long row = 0; row < B * T; ++row)
    for (long long kh = 0; kh < H; ++kh)
      for (long long i = 0; i < K; ++i) {
        const long long at = (row * H + kh) * K + i;
        float key = mem.dk[at];
        if (!r.diagonal)
          for (long long j = 0; j < group; ++j)  // (planted bug gpu_kdn_backward_drops_kappa_key_share)
            key = KALMAN_ORACLE_MUTANT(gpu_kdn_backward_drops_kappa_key_share,
                                       add_rn(key, dk_from_kappa[(row * HV + kh * group + j) * K + i]), key);
        dk[at] = add_rn(key, dk[at]);
        dq[at] = add_rn(mem.dq[at], dq[at]);
      }
  for (std::size_t e = 0; e < dg.size(); ++e) dg[e] = add_rn(mem.dg[e], dg[e]);

  safetensors::file out;
  add_fixture_gradients(out, f, source,
                        {{"dq", &dq},
                         {"dk", &dk},
                         {"dv", &mem.dv},
                         {"dg", &dg},
                         {"domega", &domega},
                         {"dr", &dr},
                         {"dmu", &dmu},
                         {"dinitial_covariance", &dprior},
                         {"dinitial_state", &mem.dinitial_state}});
  return out;
}

}  // namespace

safetensors::file run_kdn_gain(const safetensors::file& f, const std::string& source, executor on, bool memory,
                               bool gradients, delta_rule_backward_operands operands) {
  if (gradients) memory = true;  // the memory's backward needs its inputs, set up as for the forward
  const bool diagonal = fixture_model(f, source) == "kdn_diagonal";
  // B, T, H, K from k; HV from v (models/kdn_common.hpp's rules; the fixture was generated under them).
  const safetensors::tensor_entry& k = f.at("k", source);
  const safetensors::tensor_entry& v = f.at("v", source);
  if (k.shape.size() != 4 || v.shape.size() != 4)
    throw input_error(source + ": k and v must have rank 4 ([B, T, H, K] and [B, T, HV, V])");
  const long long B = static_cast<long long>(k.shape[0]), T = static_cast<long long>(k.shape[1]),
                  H = static_cast<long long>(k.shape[2]), K = static_cast<long long>(k.shape[3]),
                  HV = static_cast<long long>(v.shape[2]);
  if (H < 1 || HV % H != 0) throw input_error(source + ": v's heads must be a multiple of k's (grouped value heads)");
  const long long L = diagonal ? K : 1;

  kdn_gain_problem p;
  p.form = diagonal ? kdn_form::diagonal : kdn_form::isotropic;
  p.heads = static_cast<int>(HV);
  p.key_dim = static_cast<int>(K);
  p.key_head_group = static_cast<int>(HV / H);
  p.dtype = common_input_dtype(f, {"q", "k", "g", "omega", "r", "mu", "initial_covariance"}, source);
  // The reference's query scale in binary32 (models/query_scale.hpp): K ** -0.5 in binary64, rounded.
  p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
  const strided_input k_all = broadcast_to(k, {B, T, H, K}, source),
                      q_all = broadcast_to(f.at("q", source), {B, T, H, K}, source),
                      g_all = broadcast_to(f.at("g", source), {B, T, HV, K}, source),
                      r_all = broadcast_to(f.at("r", source), {B, T, HV}, source);
  const strided_input omega_all = diagonal ? broadcast_to(f.at("omega", source), {B, T, HV, K}, source)
                                           : broadcast_to(f.at("omega", source), {B, T, HV}, source);
  if (const auto* x = f.find("mu")) p.mu = broadcast_to(*x, {HV}, source);

  const auto [starts, ends] = sequences(f, B, T, source);
  const bool varlen = f.find("cu_seqlens") != nullptr;
  const long long N = varlen ? static_cast<long long>(starts.size()) : B;
  strided_input prior_all;
  if (const auto* x = f.find("initial_covariance"))
    prior_all = diagonal ? broadcast_to(*x, {N, HV, K}, source) : broadcast_to(*x, {N, HV}, source);

  const bool internals = f.find("predicted_covariance") != nullptr;
  std::vector<float> readout(B * T * HV), final_covariance(N * HV * L), predicted(internals ? B * T * HV * L : 0),
      gain(internals || memory ? B * T * HV * L : 0);
  // The gain kernels on the whole problem in one call: a varlen fixture's sequences through cu_seqlens
  // (the backward, kdn_gradients, too).
  kdn_gain_problem whole = p;
  std::vector<long long> offsets;
  if (varlen) {
    offsets.assign(starts.begin(), starts.end());
    offsets.push_back(ends.empty() ? 0 : ends.back());  // (the kernels' check names a last offset other than T)
    whole.cu_seqlens = offsets.data();
    whole.sequences = static_cast<int>(N);
  }
  whole.batch = static_cast<int>(B);
  whole.tokens = static_cast<int>(T);
  whole.k = k_all, whole.q = q_all, whole.g = g_all, whole.r = r_all, whole.omega = omega_all;
  whole.initial_covariance = prior_all;
  whole.readout_variance = readout.data();
  whole.final_covariance = final_covariance.data();
  whole.predicted_covariance = internals ? predicted.data() : nullptr;
  whole.gain = internals || memory ? gain.data() : nullptr;
  if (on == executor::twin) {
    kdn_gain_twin(whole);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    kdn_gain_host(whole);
#else
    throw input_error("--device cuda: this build has no CUDA kernels (no CUDA compiler was found); use --device twin");
#endif
  }

  const auto u = [](long long x) { return static_cast<std::size_t>(x); };
  safetensors::file out;
  if (memory) {
    // The memory's inputs widened to binary32 (the gains are binary32; the kernel reads one dtype).
    const long long V = static_cast<long long>(v.shape[3]);
    std::vector<safetensors::tensor_entry> widened;
    widened.reserve(5);
    const auto as_f32 = [&](const safetensors::tensor_entry& e) -> const safetensors::tensor_entry& {
      const std::vector<double> d = safetensors::to_doubles(e);
      widened.push_back(safetensors::make_f32(e.name, e.shape, std::vector<float>(d.begin(), d.end())));
      return widened.back();
    };
    delta_rule_problem m;
    // Both KDNs as the reference's parallel form runs them (models/kdn_parallel.hpp): the two-key rule
    // with κ_t the diagonal gain, or κ_t = fl(β_t k_t) for the isotropic one. (The β-form, fla's
    // KDA association, is as honest; the fixtures' typical ensemble does not run it for the KDNs yet,
    // and it went beyond their envelope, by up to 1.6 times, on 5 of 7 isotropic default fixtures.)
    m.rule = delta_rule_kind::two_key;
    m.gate = delta_rule_gate::per_channel;
    m.heads = static_cast<int>(HV);
    m.key_dim = static_cast<int>(K);
    m.value_dim = static_cast<int>(V);
    m.key_head_group = p.key_head_group;
    m.dtype = input_dtype::f32;
    m.tau = p.tau;
    delta_rule_views all;
    all.q = broadcast_to(as_f32(f.at("q", source)), {B, T, H, K}, source);
    all.k = broadcast_to(as_f32(k), {B, T, H, K}, source);
    all.v = broadcast_to(as_f32(v), {B, T, HV, V}, source);
    all.g = broadcast_to(as_f32(f.at("g", source)), {B, T, HV, K}, source);
    if (const auto* x = f.find("initial_state")) all.initial_state = broadcast_to(as_f32(*x), {N, HV, K, V}, source);
    std::vector<float> isotropic_gain;
    if (diagonal) {
      all.kappa = strided_view(gain.data(), T * HV * K, HV * K, K, 1);
    } else {
      isotropic_gain.resize(B * T * HV * K);
      for (long long b = 0; b < B; ++b)
        for (long long t = 0; t < T; ++t)
          for (long long h = 0; h < HV; ++h)
            for (long long i = 0; i < K; ++i) {
              const float key = static_cast<const float*>(all.k.data)[offset_of(all.k, b, t, h / p.key_head_group, i)];
              isotropic_gain[((b * T + t) * HV + h) * K + i] = gain[(b * T + t) * HV + h] * key;
            }
      all.kappa = strided_view(isotropic_gain.data(), T * HV * K, HV * K, K, 1);
    }
    if (gradients)
      return kdn_gradients(
          f, source, on,
          {m, all, starts, ends, varlen, B, T, diagonal, whole, isotropic_gain.empty() ? nullptr : &gain}, operands);
    std::vector<float> o, final_state;
    run_delta_rule_sequences(m, all, starts, ends, varlen, B, T, o, final_state, on);
    out.tensors.push_back(safetensors::make_f32("o", {u(B), u(T), u(HV), u(V)}, o));
    out.tensors.push_back(safetensors::make_f32("final_state", {u(N), u(HV), u(K), u(V)}, final_state));
  }
  out.tensors.push_back(safetensors::make_f32("readout_variance", {u(B), u(T), u(HV)}, readout));
  out.tensors.push_back(diagonal ? safetensors::make_f32("final_covariance", {u(N), u(HV), u(K)}, final_covariance)
                                 : safetensors::make_f32("final_covariance", {u(N), u(HV)}, final_covariance));
  if (internals) {
    const std::vector<std::size_t> shape =
        diagonal ? std::vector<std::size_t>{u(B), u(T), u(HV), u(K)} : std::vector<std::size_t>{u(B), u(T), u(HV)};
    out.tensors.push_back(safetensors::make_f32("predicted_covariance", shape, predicted));
    out.tensors.push_back(safetensors::make_f32(diagonal ? "gain" : "beta", shape, gain));
  }
  return out;
}

}  // namespace kalman_oracle::gpu::tools
