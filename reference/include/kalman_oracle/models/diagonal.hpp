// Diagonal Kalman Delta Network: the sequential reference (docs/math.md §4, with the memory update of
// §7's two-key delta rule). Per head, the memory mean S (K x V) and a diagonal covariance p (K),
// per token t = 1..T:
//
//   p̂_t = α_t² ⊙ p_{t−1} + ω_t                                   (predict, §4 line 1)
//   κ_t = p̂_t ⊙ k_t / (r_t + Σ_i p̂_{t,i} k_{t,i}²)               (exact gain for the prior diag(p̂_t))
//   S_t = (I − κ_t k_tᵀ) diag(α_t) S_{t−1} + κ_t v_tᵀ             (exact one-step posterior mean)
//   u_t = μ k_t ⊙ k_t / r_t ;  p_t = p̂_t / (1 + u_t ⊙ p̂_t)        (1/p_t = 1/p̂_t + u_t)
//   o_t = S_tᵀ (τ q_t)
//
// The gain is formed from p̂_t, before the covariance write, so μ changes only later gains (§4).
// The memory uses models/delta_rule.hpp in fla's order: decay, then the delta correction against
// the decayed state with gain κ_t and erase key k_t, then the read (read after write).
//
// Also returned: p_T, and the readout variance τ² q_tᵀ diag(p_t) q_t. That is the diagonal
// model's OWN variance (its covariance diag(p_t) in place of §2's P_t); with μ = 1, diag(p_t) is
// the reverse-KL projection of the exact one-step posterior, not the exact posterior covariance,
// and with μ ≠ 1 it is further rescaled information. It is not the dense model's variance.
//
// What the diagonal and the isotropic model share (input checks, decays from gates, defaults, the
// query scale, the validated problem) is models/kdn_common.hpp.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/delta_rule.hpp"
#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/models/kdn_common.hpp"
#include "kalman_oracle/models/options.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle {

/// Inputs of the diagonal KDN (docs/math.md §4). Per-token parameters may be given in any shape that
/// broadcasts (numpy rules, tensor/broadcast_view.hpp) to the full shape named here.
template <class T>
struct diagonal_kdn_inputs {
  tensor<T> q;  ///< queries [B, T, H, K]
  tensor<T> k;  ///< keys [B, T, H, K]
  tensor<T> v;  ///< values [B, T, H, V]
  tensor<T> g;  ///< decays, broadcast to [B, T, H, K]: log gates g <= 0 (α = e^g), or α in (0, 1]
  gate_space gates = gate_space::log;
  tensor<T> omega;                              ///< process noise ω >= 0, broadcast to [B, T, H, K]
  tensor<T> r;                                  ///< observation noise r > 0, broadcast to [B, T, H]
  std::optional<tensor<T>> mu;                  ///< information scale μ > 0, broadcast to [H]; default K
  std::optional<tensor<T>> initial_covariance;  ///< prior p_0 > 0, broadcast to [B, H, K]; default 1
  std::optional<tensor<T>> initial_state;       ///< prior mean S_0, broadcast to [B, H, K, V]; default 0
  std::optional<T> scale;                       ///< query scale τ > 0; default 1/√K (fla)
};

template <class T>
struct diagonal_kdn_outputs {
  tensor<T> o;                 ///< o_t = S_tᵀ (τ q_t), [B, T, H, V]
  tensor<T> final_state;       ///< S_T, [B, H, K, V]
  tensor<T> final_covariance;  ///< p_T, [B, H, K]
  tensor<T> readout_variance;  ///< τ² q_tᵀ diag(p_t) q_t, [B, T, H] (the diagonal model's own variance)
  std::optional<tensor<T>> predicted_covariance;  ///< p̂_t, [B, T, H, K] (run_options::internals)
  std::optional<tensor<T>> gain;                  ///< κ_t, [B, T, H, K] (run_options::internals)
};

namespace detail {

/// Validated diagonal-KDN inputs: ω [B, T, H, K], p_0 [B, H, K] (models/kdn_common.hpp).
template <class T>
using diagonal_kdn_problem = kdn_problem<T, kdn_covariance::diagonal>;

/// The diagonal-KDN outputs, allocated (internals only when asked for).
template <class T>
diagonal_kdn_outputs<T> diagonal_kdn_allocate(const kdn_dims& d, bool internals) {
  diagonal_kdn_outputs<T> out{tensor<T>("o", {d.batch, d.tokens, d.heads, d.value_dim}),
                              tensor<T>("final_state", {d.batch, d.heads, d.key_dim, d.value_dim}),
                              tensor<T>("final_covariance", {d.batch, d.heads, d.key_dim}),
                              tensor<T>("readout_variance", {d.batch, d.tokens, d.heads}),
                              std::nullopt,
                              std::nullopt};
  if (internals) {
    out.predicted_covariance = tensor<T>("predicted_covariance", {d.batch, d.tokens, d.heads, d.key_dim});
    out.gain = tensor<T>("gain", {d.batch, d.tokens, d.heads, d.key_dim});
  }
  return out;
}

/// §4: p_t = p̂_t / (1 + u_t ⊙ p̂_t), u_t = μ k_t ⊙ k_t / r_t (the precision update 1/p_t = 1/p̂_t + u_t).
template <class T>
std::vector<T> diagonal_kdn_posterior(const std::vector<T>& predicted, const std::vector<T>& key,
                                      const T& observation_noise, const T& information_scale) {
  std::vector<T> posterior(predicted.size());
  for (std::size_t i = 0; i < predicted.size(); ++i) {
    const T u = information_scale * key[i] * key[i] / observation_noise;
    posterior[i] = predicted[i] / (T(1) + u * predicted[i]);
  }
  return posterior;
}

}  // namespace detail

/// The diagonal KDN, token by token (docs/math.md §4). Validates every input first (input_error names
/// the tensor, the element and the rule), then runs the independent (batch, head) problems on
/// options.threads threads (bit-identical to one thread).
template <class T>
diagonal_kdn_outputs<T> diagonal_kdn_forward(const diagonal_kdn_inputs<T>& inputs, const run_options& options = {}) {
  const detail::diagonal_kdn_problem<T> pb(inputs);
  const detail::kdn_dims& d = pb.dims;
  const std::size_t K = d.key_dim, V = d.value_dim;
  diagonal_kdn_outputs<T> out = detail::diagonal_kdn_allocate<T>(d, options.internals);

  detail::parallel_for(d.batch * d.heads, options.threads, [&](std::size_t bh) {
    const std::size_t b = bh / d.heads, h = bh % d.heads;
    const T mu = pb.mu(h);
    // Prior: S_0, p_0 (§2 "quantities with index 0 are the prior").
    std::vector<T> state = pb.initial_state(b, h), covariance(K);
    for (std::size_t i = 0; i < K; ++i) covariance[i] = pb.prior(b, h, i);
    std::vector<T> alpha(K), key(K), query(K), value(V), predicted(K), gain(K), read(V);
    for (std::size_t t = 0; t < d.tokens; ++t) {
      for (std::size_t i = 0; i < K; ++i) {
        alpha[i] = pb.decay(b, t, h, i);
        key[i] = inputs.k(b, t, h, i);
        query[i] = inputs.q(b, t, h, i);
      }
      for (std::size_t j = 0; j < V; ++j) value[j] = inputs.v(b, t, h, j);
      const T r = pb.r(b, t, h);

      // §4 predict: p̂_t = α_t² ⊙ p_{t−1} + ω_t.
      for (std::size_t i = 0; i < K; ++i) predicted[i] = alpha[i] * alpha[i] * covariance[i] + pb.omega(b, t, h, i);

      // §4 gain, from p̂_t (the prior of this token's write): κ_t = p̂_t ⊙ k_t / (r_t + Σ_i p̂_{t,i} k_{t,i}²).
      // (Planted bugs: the gain formed from the posterior p_t, or μ inside the gain's denominator.)
      const std::vector<T>& gain_covariance =
          KALMAN_ORACLE_MUTANT(kdn_gain_after_write, predicted, detail::diagonal_kdn_posterior(predicted, key, r, mu));
      T innovation_variance = r;
      for (std::size_t i = 0; i < K; ++i)
        innovation_variance += KALMAN_ORACLE_MUTANT(kdn_mu_before_gain, gain_covariance[i] * key[i] * key[i],
                                                    mu * gain_covariance[i] * key[i] * key[i]);
      for (std::size_t i = 0; i < K; ++i) gain[i] = gain_covariance[i] * key[i] / innovation_variance;

      // §4 / §7 memory: S_t = (I − κ_t k_tᵀ) diag(α_t) S_{t−1} + κ_t v_tᵀ, fla's order: decay first,
      // then the delta correction against the decayed state (erase along k_t, write along κ_t).
      // (Planted bugs: decay after the correction; read before the write.)
      const bool decay_late = KALMAN_ORACLE_MUTANT(kdn_decay_after_delta, false, true);
      const bool read_early = KALMAN_ORACLE_MUTANT(kdn_read_before_write, false, true);
      if (read_early) read_state<T>(state, query, pb.tau, read);
      if (!decay_late) decay_rows<T>(state, V, alpha);
      delta_write<T>(state, key, gain, value);
      if (decay_late) decay_rows<T>(state, V, alpha);

      // §4 precision update: 1/p_t = 1/p̂_t + μ k_t ⊙ k_t / r_t.
      covariance = detail::diagonal_kdn_posterior(predicted, key, r, mu);

      // §4 read after write: o_t = S_tᵀ (τ q_t); readout variance τ² q_tᵀ diag(p_t) q_t.
      if (!read_early) read_state<T>(state, query, pb.tau, read);
      T variance(0);
      for (std::size_t i = 0; i < K; ++i) {
        const T scaled = pb.tau * query[i];
        variance += scaled * scaled * covariance[i];
      }
      for (std::size_t j = 0; j < V; ++j) out.o(b, t, h, j) = read[j];
      out.readout_variance(b, t, h) = variance;
      if (options.internals) {
        for (std::size_t i = 0; i < K; ++i) {
          (*out.predicted_covariance)(b, t, h, i) = predicted[i];
          (*out.gain)(b, t, h, i) = gain[i];
        }
      }
    }
    for (std::size_t i = 0; i < K; ++i) {
      out.final_covariance(b, h, i) = covariance[i];
      for (std::size_t j = 0; j < V; ++j) out.final_state(b, h, i, j) = state[i * V + j];
    }
  });
  return out;
}

}  // namespace kalman_oracle
