// The KDN gain path's backward on the GPU (docs/kernels.md, "KDN gain backward"): from the
// cotangents of the gain kernels' outputs (the gain κ_t or β_t, the prediction p̂_t or b̂_t, the
// readout variance and the final covariance), the gradient of every input of the gain path: k, q,
// g, ω, r, μ, the prior covariance and τ. The reverse recursion of the covariance adjoint is scalar
// per channel (grad/diagonal.hpp, grad/isotropic.hpp), never an adjoint through 2×2 products; it is
// affine, so it runs as a chunked scan (models/kdn_gain_backward.cuh).
//
// These are the gain path's shares of a KDN's gradients: a whole KDN adds the memory's (the
// memory's adjoint gives dκ and the gate and key terms of the delta rule: delta_rule_backward.hpp;
// `kalman-oracle-gpu run --gradients` chains the two, docs/kernels.md). Plain C++: the kernels are in
// gpu/src/kdn_gain_backward.cu, the CPU twin in twin/kdn_gain_backward_twin.hpp.
#pragma once

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kalman_oracle/gpu/kdn_gain.hpp"

namespace kalman_oracle::gpu {

/// One backward problem: the forward problem's inputs (its output pointers are not used; its
/// cu_seqlens, if any, make it a packed batch of N sequences, else N = B), the cotangents (binary32,
/// contiguous; null: zero), the gradients (binary32, contiguous), L = K (diagonal) or 1 (isotropic), HV
/// value heads, H = HV / key_head_group key heads:
///   d_gain, d_predicted_covariance [B, T, HV, L]; d_readout_variance [B, T, HV];
///   d_final_covariance [N, HV, L];
///   dq, dk [B, T, H, K] (summed over a key head's value heads); dg [B, T, HV, K];
///   domega [B, T, HV, L]; dr [B, T, HV]; dmu [HV] (may be null); dinitial_covariance [N, HV, L];
///   dtau [1] (may be null).
/// Gradients are written in full, whatever broadcasting the inputs had (sum over broadcast axes to
/// get a broadcast input's own gradient). dμ and dτ, shared by every sequence, are the sums in
/// sequence order (from the first sequence's) of what each sequence alone gives (a one-sequence call's
/// bits), so that a batch's gradients are its sequences' run one at a time and summed, bit for bit.
struct kdn_gain_backward_problem {
  kdn_gain_problem forward;
  /// p̂_t [B, T, HV, L] from a forward run on the same inputs (kdn_gain_problem::predicted_covariance):
  /// given, the backward does not run the forward again.
  const float* predicted_covariance = nullptr;
  const float *d_gain = nullptr, *d_predicted_covariance = nullptr, *d_readout_variance = nullptr,
              *d_final_covariance = nullptr;
  float *dq = nullptr, *dk = nullptr, *dg = nullptr, *domega = nullptr, *dr = nullptr, *dmu = nullptr,
        *dinitial_covariance = nullptr, *dtau = nullptr;
};

/// std::invalid_argument naming the rule for sizes out of range or a missing input or gradient buffer.
inline void kdn_gain_backward_check(const kdn_gain_backward_problem& p) {
  kdn_gain_check_inputs(p.forward, "kdn_gain_backward");
  const bool per_token = p.forward.tokens > 0;
  const std::tuple<const char*, const void*, bool> required[] = {
      {"dq", p.dq, per_token},         {"dk", p.dk, per_token}, {"dg", p.dg, per_token},
      {"domega", p.domega, per_token}, {"dr", p.dr, per_token}, {"dinitial_covariance", p.dinitial_covariance, true}};
  for (const auto& [name, data, needed] : required)
    if (needed && data == nullptr)
      throw std::invalid_argument("kdn_gain_backward: " + std::string(name) + " is missing (a null pointer)");
}

/// Tokens per chunk of the reverse scan (the forward's chunk).
inline constexpr int kdn_gain_backward_chunk_tokens = kdn_gain_chunk_tokens;

/// The parts of the backward's scratch, in floats, in this order, each a multiple of 4 floats (so
/// that every part, the forward's 16-byte Möbius maps included, starts 16-byte aligned).
struct kdn_gain_backward_scratch_counts {
  long long predicted;         ///< p̂ [B, T, HV, L], when not given
  long long forward_readout;   ///< the forward's readout variance [B, T, HV], when p̂ is not given
  long long forward_final;     ///< the forward's final covariance [B, HV, L], when p̂ is not given
  long long forward_scratch;   ///< the forward's scratch, when p̂ is not given
  long long affine;            ///< each chunk's map (m, c) [HV, NC, L, 2], NC every sequence's chunks
  long long carries;           ///< y at each chunk's end [HV, NC, L]
  long long mu_partial;        ///< dμ's per chunk [HV, NC]
  long long tau_partial;       ///< dτ's per chunk [HV, NC]
  long long q_parts, k_parts;  ///< dq, dk per value head [B, T, HV, K], when key_head_group > 1
  long long token_scalars;     ///< isotropic: each token's ‖k‖², Q, a, c [B, T, HV, 4] (map pass → emit pass)
  long long chunk_table;       ///< with cu_seqlens, the chunk map's table (delta_rule_sequences.hpp)
  long long total() const {
    return predicted + forward_readout + forward_final + forward_scratch + affine + carries + mu_partial + tau_partial +
           q_parts + k_parts + token_scalars + chunk_table;
  }
};

inline kdn_gain_backward_scratch_counts kdn_gain_backward_scratch(const kdn_gain_backward_problem& p) {
  const kdn_gain_problem& f = p.forward;
  const long long B = f.batch, T = f.tokens, HV = f.heads, K = f.key_dim, L = kdn_gain_channels(f);
  const long long N = f.cu_seqlens != nullptr ? f.sequences : B;
  const std::vector<delta_rule_sequence_start> starts = delta_rule_sequence_starts(f);
  const long long chunks = delta_rule_chunks(f, starts, nullptr).total_chunks;  // every sequence's
  const auto padded = [](long long floats) { return (floats + 3) / 4 * 4; };
  kdn_gain_backward_scratch_counts n{};
  if (p.predicted_covariance == nullptr) {
    n.predicted = padded(B * T * HV * L);
    n.forward_readout = padded(B * T * HV);
    n.forward_final = padded(N * HV * L);
    n.forward_scratch = padded((kdn_gain_scratch_bytes(f) + 3) / 4);
  }
  n.affine = padded(2 * HV * chunks * L);
  n.carries = padded(HV * chunks * L);
  n.mu_partial = n.tau_partial = padded(HV * chunks);
  n.q_parts = n.k_parts = f.key_head_group > 1 ? padded(B * T * HV * K) : 0;
  n.token_scalars = f.form == kdn_form::isotropic ? 4 * B * T * HV : 0;
  n.chunk_table = padded(static_cast<long long>((starts.size() * sizeof(delta_rule_sequence_start) + 3) / 4));
  return n;
}

/// Scratch bytes kdn_gain_backward_device needs.
inline long long kdn_gain_backward_scratch_bytes(const kdn_gain_backward_problem& p) {
  return 4 * kdn_gain_backward_scratch(p).total();
}

/// Runs the kernels on device pointers, `scratch` of kdn_gain_backward_scratch_bytes (asynchronous
/// on problem.forward.stream); std::runtime_error for a CUDA error.
void kdn_gain_backward_device(const kdn_gain_backward_problem& problem, void* scratch);

/// The same problem with host pointers: copies the inputs and cotangents to the device, poisons the
/// gradients with NaN, runs, copies the gradients back.
void kdn_gain_backward_host(const kdn_gain_backward_problem& problem);

}  // namespace kalman_oracle::gpu
