// The CPU twin of the KDN gain kernels (gpu/src/kdn_gain.cu; docs/kernels.md, "KDN gains"): the
// kernels' schedule run on the CPU over the same arithmetic (models/kdn_gain.cuh), so it computes
// the kernels' bits, which the GPU test checks. Per (sequence, head) and covariance lane (a key
// channel, or the head's one variance):
//   map    per chunk of kdn_gain_chunk_tokens tokens, the leaves composed in order (later on the
//          left), the chunk's total its last local prefix;
//   carry  carry[1] = total[0], carry[c] = total[c−1] ∘ carry[c−1];
//   emit   token t of chunk c: prefix = local_t (c = 0) or local_t ∘ carry[c]; p_t = prefix · p_0;
//          p_{t−1} the previous token's (or carry[c] · p_0 at a chunk's start, p_0 at the first)
// (scan/chunked.hpp's order), then per token the prediction, the gain and the readout variance,
// the sums over channels in kdn_channel_sum_twin's order.
#pragma once

#include <vector>

#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/models/kdn_gain.cuh"

namespace kalman_oracle::gpu {

namespace detail {

/// One token's inputs to the covariance recursion, per lane: the leaf's a, ω and u.
struct kdn_token_leaf {
  float a, omega, u;
};

/// One (sequence, head)'s inputs: token t is the sequence's (t0 + t of batch row b), its prior the
/// state row `state` (the batch row, or the sequence of a varlen batch).
template <class In>
struct kdn_gain_reader {
  const kdn_gain_problem& p;
  long long b, h;
  long long t0 = 0, state = b;

  float k(long long t, long long i) const {
    return load_widened<In>(p.k, offset_of(p.k, b, t0 + t, h / p.key_head_group, i));
  }
  float q(long long t, long long i) const {
    return load_widened<In>(p.q, offset_of(p.q, b, t0 + t, h / p.key_head_group, i));
  }
  float g(long long t, long long i) const { return load_widened<In>(p.g, offset_of(p.g, b, t0 + t, h, i)); }
  float omega(long long t, long long i) const { return load_widened<In>(p.omega, offset_of(p.omega, b, t0 + t, h, i)); }
  float r(long long t) const { return load_widened<In>(p.r, offset_of(p.r, b, t0 + t, h)); }
  float mu() const {
    return p.mu.data ? load_widened<In>(p.mu, offset_of(p.mu, h, 0, 0)) : static_cast<float>(p.key_dim);
  }
  float prior(long long lane) const {
    return p.initial_covariance.data
               ? load_widened<In>(p.initial_covariance, offset_of(p.initial_covariance, state, h, lane))
               : 1.0f;
  }

  /// Token t's leaf inputs for every covariance lane (K channels, or the head's one).
  std::vector<kdn_token_leaf> leaves(long long t) const {
    const int K = p.key_dim;
    const float r_t = r(t), mu_h = mu();
    if (p.form == kdn_form::diagonal) {
      std::vector<kdn_token_leaf> out(K);
      for (int i = 0; i < K; ++i)
        out[i] = {kdn_decay_squared(g(t, i)), omega(t, i), kdn_diagonal_information(mu_h, k(t, i), r_t)};
      return out;
    }
    const float decay2 = kdn_channel_sum_twin(K, [&](int i) { return kdn_decay_squared(g(t, i)); });
    const float key2 = kdn_channel_sum_twin(K, [&](int i) { return mul_rn(k(t, i), k(t, i)); });
    const float channels = static_cast<float>(K);
    return {{div_rn(decay2, channels), omega(t, 0), kdn_isotropic_information(mu_h, key2, channels, r_t)}};
  }
};

template <class In>
void kdn_gain_twin_typed(const kdn_gain_problem& p) {
  const long long HV = p.heads, K = p.key_dim, L = kdn_gain_channels(p);
  const bool diagonal = p.form == kdn_form::diagonal;
  for (const delta_rule_sequence& s : delta_rule_sequence_list(p))
    for (long long h = 0; h < HV; ++h) {
      const long long T = s.tokens, chunk = kdn_gain_chunk_tokens, chunks = s.chunks;
      const kdn_gain_reader<In> in{p, s.batch_row, h, s.first_token, s.state};
      std::vector<float> prior(L);
      for (long long c = 0; c < L; ++c) prior[c] = in.prior(c);
      // map: each chunk's total, per lane.
      std::vector<mobius_f32> total(chunks * L);
      for (long long c = 0; c < chunks; ++c)
        for (long long t = c * chunk; t < std::min(T, (c + 1) * chunk); ++t) {
          const std::vector<kdn_token_leaf> x = in.leaves(t);
          for (long long i = 0; i < L; ++i) {
            const mobius_f32 leaf = kdn_covariance_leaf(x[i].a, x[i].omega, x[i].u);
            total[c * L + i] = t == c * chunk ? leaf : mobius_compose(leaf, total[c * L + i]);
          }
        }
      // carry: carry[c] for c >= 1 (carry[0], the identity, is never used).
      std::vector<mobius_f32> carry(chunks * L);
      for (long long c = 1; c < chunks; ++c)
        for (long long i = 0; i < L; ++i)
          carry[c * L + i] = c == 1 ? total[i] : mobius_compose(total[(c - 1) * L + i], carry[(c - 1) * L + i]);
      // emit.
      std::vector<float> previous(L), covariance(prior), predicted(L);
      std::vector<mobius_f32> local(L);
      for (long long c = 0; c < chunks; ++c) {
        for (long long i = 0; i < L; ++i) previous[i] = c == 0 ? prior[i] : mobius_apply(carry[c * L + i], prior[i]);
        for (long long t = c * chunk; t < std::min(T, (c + 1) * chunk); ++t) {
          const std::vector<kdn_token_leaf> x = in.leaves(t);
          for (long long i = 0; i < L; ++i) {
            const mobius_f32 leaf = kdn_covariance_leaf(x[i].a, x[i].omega, x[i].u);
            local[i] = t == c * chunk ? leaf : mobius_compose(leaf, local[i]);
            const mobius_f32 prefix = c == 0 ? local[i] : mobius_compose(local[i], carry[c * L + i]);
            covariance[i] = mobius_apply(prefix, prior[i]);
            predicted[i] = kdn_predict(x[i].a, previous[i], x[i].omega);
          }
          const long long row = (s.batch_row * p.tokens + s.first_token + t) * HV + h;  // [B, T, HV]
          const float r_t = in.r(t);
          if (diagonal) {
            const float innovation = add_rn(
                r_t, kdn_channel_sum_twin(K, [&](int i) { return kdn_innovation_term(predicted[i], in.k(t, i)); }));
            for (long long i = 0; i < K; ++i) {
              if (p.predicted_covariance) p.predicted_covariance[row * K + i] = predicted[i];
              if (p.gain) p.gain[row * K + i] = kdn_diagonal_gain(predicted[i], in.k(t, i), innovation);
            }
            p.readout_variance[row] = kdn_channel_sum_twin(
                K, [&](int i) { return mul_rn(kdn_scaled_query_squared(p.tau, in.q(t, i)), covariance[i]); });
          } else {
            const float key2 = kdn_channel_sum_twin(K, [&](int i) { return mul_rn(in.k(t, i), in.k(t, i)); });
            if (p.predicted_covariance) p.predicted_covariance[row] = predicted[0];
            if (p.gain) p.gain[row] = kdn_isotropic_gain(predicted[0], key2, r_t);
            p.readout_variance[row] =
                mul_rn(covariance[0],
                       kdn_channel_sum_twin(K, [&](int i) { return kdn_scaled_query_squared(p.tau, in.q(t, i)); }));
          }
          previous = covariance;
        }
      }
      for (long long i = 0; i < L; ++i) p.final_covariance[(s.state * HV + h) * L + i] = covariance[i];
    }
}

}  // namespace detail

/// The twin on host pointers (kdn_gain.hpp's problem).
inline void kdn_gain_twin(const kdn_gain_problem& problem) {
  kdn_gain_check(problem);
  switch (problem.dtype) {
    case input_dtype::f32: return detail::kdn_gain_twin_typed<float>(problem);
    case input_dtype::bf16: return detail::kdn_gain_twin_typed<bf16_bits>(problem);
    case input_dtype::f16: return detail::kdn_gain_twin_typed<f16_bits>(problem);
  }
}

}  // namespace kalman_oracle::gpu
