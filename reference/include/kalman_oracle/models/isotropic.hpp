// Isotropic Kalman Delta Network: the sequential reference (docs/math.md §5; the memory is §7's KDA
// with β_t from §5). Per head, the memory mean S (K x V) and one covariance scalar b (P ≈ b I),
// per token t = 1..T:
//
//   a_t = mean_i α_{t,i}²                      (trace projection of diag(α_t) b I diag(α_t))
//   b̂_t = a_t b_{t−1} + ω_t
//   β_t = b̂_t / (r_t + b̂_t ‖k_t‖²) ;  κ_t = β_t k_t
//   S_t = (I − β_t k_t k_tᵀ) diag(α_t) S_{t−1} + β_t k_t v_tᵀ
//   u_t = μ ‖k_t‖² / (K r_t) ;  b_t = b̂_t / (1 + u_t b̂_t)
//   o_t = S_tᵀ (τ q_t)
//
// ω_t and r_t are scalars per head and token, μ one scalar per head. As in §4 the gain comes from
// the prediction b̂_t, before the covariance write. Also returned: b_T and the isotropic model's
// own readout variance τ² b_t ‖q_t‖² (its covariance b_t I in place of §2's P_t).
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/delta_rule.hpp"
#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/models/kdn_common.hpp"
#include "kalman_oracle/models/options.hpp"
#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle {

/// Inputs of the isotropic KDN (docs/math.md §5). Per-token parameters may be given in any shape that
/// broadcasts to the full shape named here.
template <class T>
struct isotropic_kdn_inputs {
  tensor<T> q;  ///< queries [B, T, H, K]
  tensor<T> k;  ///< keys [B, T, H, K]
  tensor<T> v;  ///< values [B, T, H, V]
  tensor<T> g;  ///< decays, broadcast to [B, T, H, K]: log gates g <= 0 (α = e^g), or α in (0, 1]
  gate_space gates = gate_space::log;
  tensor<T> omega;                              ///< process noise ω >= 0, broadcast to [B, T, H]
  tensor<T> r;                                  ///< observation noise r > 0, broadcast to [B, T, H]
  std::optional<tensor<T>> mu;                  ///< information scale μ > 0, broadcast to [H]; default K
  std::optional<tensor<T>> initial_covariance;  ///< prior b_0 > 0, broadcast to [B, H]; default 1
  std::optional<tensor<T>> initial_state;       ///< prior mean S_0, broadcast to [B, H, K, V]; default 0
  std::optional<T> scale;                       ///< query scale τ > 0; default 1/√K (fla)
};

template <class T>
struct isotropic_kdn_outputs {
  tensor<T> o;                 ///< o_t = S_tᵀ (τ q_t), [B, T, H, V]
  tensor<T> final_state;       ///< S_T, [B, H, K, V]
  tensor<T> final_covariance;  ///< b_T, [B, H]
  tensor<T> readout_variance;  ///< τ² b_t ‖q_t‖², [B, T, H] (the isotropic model's own variance)
  std::optional<tensor<T>> predicted_covariance;  ///< b̂_t, [B, T, H] (run_options::internals)
  std::optional<tensor<T>> beta;                  ///< β_t, [B, T, H] (run_options::internals)
};

namespace detail {

/// Validated isotropic-KDN inputs: ω [B, T, H], b_0 [B, H] (models/kdn_common.hpp).
template <class T>
using isotropic_kdn_problem = kdn_problem<T, kdn_covariance::isotropic>;

/// The isotropic-KDN outputs, allocated (internals only when asked for).
template <class T>
isotropic_kdn_outputs<T> isotropic_kdn_allocate(const kdn_dims& d, bool internals) {
  isotropic_kdn_outputs<T> out{tensor<T>("o", {d.batch, d.tokens, d.heads, d.value_dim}),
                               tensor<T>("final_state", {d.batch, d.heads, d.key_dim, d.value_dim}),
                               tensor<T>("final_covariance", {d.batch, d.heads}),
                               tensor<T>("readout_variance", {d.batch, d.tokens, d.heads}),
                               std::nullopt,
                               std::nullopt};
  if (internals) {
    out.predicted_covariance = tensor<T>("predicted_covariance", {d.batch, d.tokens, d.heads});
    out.beta = tensor<T>("beta", {d.batch, d.tokens, d.heads});
  }
  return out;
}

/// ‖k‖ for the planted bug iso_kdn_norm_not_squared only (exact scalars: via binary64, it only
/// needs to be wrong).
template <class T>
T kdn_mutant_norm(const T& squared_norm) {
  if constexpr (scalar_traits<T>::is_exact) {
    return from_double<T>(std::sqrt(to_double(squared_norm)));
  } else {
    using std::sqrt;
    return T(sqrt(squared_norm));
  }
}

}  // namespace detail

/// The isotropic KDN, token by token (docs/math.md §5). Validates every input first, then runs the
/// independent (batch, head) problems on options.threads threads (bit-identical to one thread).
template <class T>
isotropic_kdn_outputs<T> isotropic_kdn_forward(const isotropic_kdn_inputs<T>& inputs, const run_options& options = {}) {
  const detail::isotropic_kdn_problem<T> pb(inputs);
  const detail::kdn_dims& d = pb.dims;
  const std::size_t K = d.key_dim, V = d.value_dim;
  const T channels(static_cast<long>(K));
  isotropic_kdn_outputs<T> out = detail::isotropic_kdn_allocate<T>(d, options.internals);

  detail::parallel_for(d.batch * d.heads, options.threads, [&](std::size_t bh) {
    const std::size_t b = bh / d.heads, h = bh % d.heads;
    const T mu = pb.mu(h);
    // Prior: S_0, b_0 (§2 "quantities with index 0 are the prior").
    std::vector<T> state = pb.initial_state(b, h);
    T covariance = pb.prior(b, h);
    std::vector<T> alpha(K), key(K), query(K), value(V), gain(K), read(V);
    for (std::size_t t = 0; t < d.tokens; ++t) {
      for (std::size_t i = 0; i < K; ++i) {
        alpha[i] = pb.decay(b, t, h, i);
        key[i] = inputs.k(b, t, h, i);
        query[i] = inputs.q(b, t, h, i);
      }
      for (std::size_t j = 0; j < V; ++j) value[j] = inputs.v(b, t, h, j);
      const T r = pb.r(b, t, h);
      const T omega = pb.omega(b, t, h);

      // §5 predict: a_t = mean_i α_{t,i}², b̂_t = a_t b_{t−1} + ω_t.
      T decay2_sum(0), key2_sum(0);
      for (std::size_t i = 0; i < K; ++i) decay2_sum += alpha[i] * alpha[i];
      for (std::size_t i = 0; i < K; ++i) key2_sum += key[i] * key[i];  // ‖k_t‖²
      const T a = decay2_sum / channels;
      const T predicted = a * covariance + omega;

      // §5 precision update (needs only b̂_t): u_t = μ ‖k_t‖² / (K r_t), b_t = b̂_t / (1 + u_t b̂_t).
      const T u = mu * key2_sum / (channels * r);
      const T posterior = predicted / (T(1) + u * predicted);

      // §5 gain from b̂_t (before the write): β_t = b̂_t / (r_t + b̂_t ‖k_t‖²), κ_t = β_t k_t.
      // (Planted bugs: β from the posterior b_t; μ inside the denominator; ‖k‖ for ‖k‖².)
      const T& gain_covariance = KALMAN_ORACLE_MUTANT(kdn_gain_after_write, predicted, posterior);
      const T key_term = KALMAN_ORACLE_MUTANT(iso_kdn_norm_not_squared, key2_sum, detail::kdn_mutant_norm(key2_sum));
      const T beta = gain_covariance / (r + KALMAN_ORACLE_MUTANT(kdn_mu_before_gain, gain_covariance * key_term,
                                                                 mu * gain_covariance * key_term));
      for (std::size_t i = 0; i < K; ++i) gain[i] = beta * key[i];

      // §5 / §7 memory (KDA with β_t): decay first, then the delta correction against the decayed
      // state, then the read. (Planted bugs: decay after the correction; read before the write.)
      const bool decay_late = KALMAN_ORACLE_MUTANT(kdn_decay_after_delta, false, true);
      const bool read_early = KALMAN_ORACLE_MUTANT(kdn_read_before_write, false, true);
      if (read_early) read_state<T>(state, query, pb.tau, read);
      if (!decay_late) decay_rows<T>(state, V, alpha);
      delta_write<T>(state, key, gain, value);
      if (decay_late) decay_rows<T>(state, V, alpha);
      covariance = posterior;

      // §5 read after write: o_t = S_tᵀ (τ q_t); readout variance τ² b_t ‖q_t‖².
      if (!read_early) read_state<T>(state, query, pb.tau, read);
      T scaled_query2(0);
      for (std::size_t i = 0; i < K; ++i) {
        const T scaled = pb.tau * query[i];
        scaled_query2 += scaled * scaled;
      }
      for (std::size_t j = 0; j < V; ++j) out.o(b, t, h, j) = read[j];
      out.readout_variance(b, t, h) = covariance * scaled_query2;
      if (options.internals) {
        (*out.predicted_covariance)(b, t, h) = predicted;
        (*out.beta)(b, t, h) = beta;
      }
    }
    out.final_covariance(b, h) = covariance;
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) out.final_state(b, h, i, j) = state[i * V + j];
  });
  return out;
}

}  // namespace kalman_oracle
