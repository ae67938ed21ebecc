// gpu/tools/run_kdn_gain.hpp.
#include "run_kdn_gain.hpp"

#include <cmath>
#include <vector>

#include "fixture_inputs.hpp"
#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_twin.hpp"

namespace kalman_oracle::gpu::tools {

safetensors::file run_kdn_gain(const safetensors::file& f, const std::string& source, executor on) {
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
      gain(predicted.size());
  for (long long n = 0; n < static_cast<long long>(starts.size()); ++n) {
    const long long t0 = starts[n], rows = varlen ? 1 : B;
    p.batch = static_cast<int>(rows);
    p.tokens = static_cast<int>(ends[n] - t0);
    p.k = advanced(k_all, t0 * k_all.stride[1], p.dtype);
    p.q = advanced(q_all, t0 * q_all.stride[1], p.dtype);
    p.g = advanced(g_all, t0 * g_all.stride[1], p.dtype);
    p.r = advanced(r_all, t0 * r_all.stride[1], p.dtype);
    p.omega = advanced(omega_all, t0 * omega_all.stride[1], p.dtype);
    p.initial_covariance = advanced(prior_all, (varlen ? n : 0) * prior_all.stride[0], p.dtype);
    p.readout_variance = readout.data() + t0 * HV;
    p.final_covariance = final_covariance.data() + (varlen ? n : 0) * HV * L;
    p.predicted_covariance = internals ? predicted.data() + t0 * HV * L : nullptr;
    p.gain = internals ? gain.data() + t0 * HV * L : nullptr;
    if (on == executor::twin) {
      kdn_gain_twin(p);
    } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
      kdn_gain_host(p);
#else
      throw input_error(
          "--device cuda: this build has no CUDA kernels (no CUDA compiler was found); use --device twin");
#endif
    }
  }

  const auto u = [](long long x) { return static_cast<std::size_t>(x); };
  safetensors::file out;
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
