// Diagonal Kalman Delta Network: the sequential reference (MATH.md §4, with the memory update of
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
// This header also holds what the KDN models share (input checks, decays from gates, the query
// scale); isotropic.hpp and kdn_parallel.hpp include it.
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/delta_rule.hpp"
#include "kalman_oracle/models/options.hpp"
#include "kalman_oracle/models/query_scale.hpp"
#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/tensor/broadcast_view.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "kalman_oracle/tensor/validate.hpp"

namespace kalman_oracle {

/// Inputs of the diagonal KDN (MATH.md §4). Per-token parameters may be given in any shape that
/// broadcasts (numpy rules, io/tensor.hpp) to the full shape named here.
template <class T>
struct diagonal_kdn_inputs {
  tensor<T> q;      ///< queries [B, T, H, K]
  tensor<T> k;      ///< keys [B, T, H, K]
  tensor<T> v;      ///< values [B, T, H, V]
  tensor<T> g;      ///< decays, broadcast to [B, T, H, K]: log gates g <= 0 (α = e^g), or α in (0, 1]
  gate_space gates = gate_space::log;
  tensor<T> omega;  ///< process noise ω >= 0, broadcast to [B, T, H, K]
  tensor<T> r;      ///< observation noise r > 0, broadcast to [B, T, H]
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

/// The sizes of one KDN problem.
struct kdn_dims {
  std::size_t batch = 0, tokens = 0, heads = 0, key_dim = 0, value_dim = 0;
};

/// q, k [B, T, H, K] and v [B, T, H, V]: ranks, agreeing sizes, T >= 1, K >= 1, all finite.
template <class T>
kdn_dims kdn_check_qkv(const tensor<T>& q, const tensor<T>& k, const tensor<T>& v) {
  if (q.rank() != 4)
    throw input_error(q.name() + ": shape " + to_string(q.shape()) + ", expected 4 dimensions [B, T, H, K]");
  kdn_dims d{q.dim(0), q.dim(1), q.dim(2), q.dim(3), 0};
  require_tokens(q.name(), d.tokens);
  if (d.key_dim == 0)
    throw input_error(q.name() + ": shape " + to_string(q.shape()) + " has K = 0; rule: the key dimension must be >= 1");
  require_shape(k, q.shape());  // e.g. a K that differs between q and k
  if (v.rank() != 4 || v.dim(0) != d.batch || v.dim(1) != d.tokens || v.dim(2) != d.heads)
    throw input_error(v.name() + ": shape " + to_string(v.shape()) + ", expected [B, T, H, V] with [B, T, H] = " +
                      to_string({d.batch, d.tokens, d.heads}));
  d.value_dim = v.dim(3);
  require_finite(q);
  require_finite(k);
  require_finite(v);
  return d;
}

/// Decays: linear α must lie in (0, 1]; log gates g must be <= 0 (α = e^g in (0, 1]). α > 0 keeps
/// every covariance leaf invertible (det α², §8) and is what e^g gives; α <= 1 is fla's convention
/// for trained gates (g = logsigmoid(·) <= 0), enforced alike by the fixed-gain models.
template <class T>
void kdn_check_gates(const tensor<T>& g, gate_space gates) {
  if (gates == gate_space::linear) {
    require_each(g, [](const T& alpha) { return alpha > 0 && alpha <= 1; }, "decay alpha must be in (0, 1]");
    return;
  }
  if constexpr (scalar_traits<T>::is_exact)
    throw input_error(g.name() + ": gate_space::log needs exp(g), which is irrational for rational g != 0; rule: "
                      "exact scalars take the decays alpha with gate_space::linear");
  require_each(g, [](const T& x) { return x <= 0; }, "log gate g must be <= 0");
}

/// The decay α of one gate value (after kdn_check_gates).
template <class T>
T kdn_decay(const T& gate, gate_space gates) {
  if (gates == gate_space::linear) return gate;
  if constexpr (scalar_traits<T>::is_exact) {
    throw std::logic_error("kdn_decay: log gates over exact scalars (rejected by kdn_check_gates)");
  } else {
    using std::exp;
    return T(exp(gate));
  }
}

/// A broadcast view of `x` to `full`, checked: first the shape (broadcast_view names the axis), then
/// every source element with `check`.
template <class T, class Check>
broadcast_view<T> kdn_view(const tensor<T>& x, const shape_t& full, Check check) {
  broadcast_view<T> view(x, full);
  check(x);
  return view;
}

/// The given optional tensor, or the default one.
template <class T>
const tensor<T>& kdn_or(const std::optional<tensor<T>>& given, const tensor<T>& fallback) {
  return given ? *given : fallback;
}

/// Validated diagonal-KDN inputs with defaults filled in and parameters broadcast. Every check
/// happens in the constructor, before any arithmetic. Views point into `in` and into the default
/// tensors held here, so the object stays where it was built.
template <class T>
struct diagonal_kdn_problem {
  // Defaults (papers): μ = K, p_0 = 1, S_0 = 0. Declared first: the views below point at them.
  tensor<T> mu_default, p0_default, s0_default;
  kdn_dims dims;
  const diagonal_kdn_inputs<T>& in;
  broadcast_view<T> g, omega, r, mu, p0, s0;
  T tau;

  explicit diagonal_kdn_problem(const diagonal_kdn_inputs<T>& inputs)
      : mu_default("mu", {1}, T(static_cast<long>(inputs.q.rank() == 4 ? inputs.q.dim(3) : 1))),
        p0_default("initial_covariance", {1}, T(1)),
        s0_default("initial_state", {1}, T(0)),
        dims(kdn_check_qkv(inputs.q, inputs.k, inputs.v)),
        in(inputs),
        g(kdn_view(inputs.g, full_key(), [&](const tensor<T>& x) { kdn_check_gates(x, inputs.gates); })),
        omega(kdn_view(inputs.omega, full_key(),
                       [](const tensor<T>& x) { require_nonnegative(x, "process noise omega"); })),
        r(kdn_view(inputs.r, {dims.batch, dims.tokens, dims.heads},
                   [](const tensor<T>& x) { require_positive(x, "observation noise r"); })),
        mu(kdn_view(kdn_or(inputs.mu, mu_default), {dims.heads},
                    [](const tensor<T>& x) { require_positive(x, "information scale mu"); })),
        p0(kdn_view(kdn_or(inputs.initial_covariance, p0_default), {dims.batch, dims.heads, dims.key_dim},
                    [](const tensor<T>& x) { require_positive(x, "prior covariance p_0"); })),
        s0(kdn_view(kdn_or(inputs.initial_state, s0_default),
                    {dims.batch, dims.heads, dims.key_dim, dims.value_dim},
                    [](const tensor<T>& x) { require_finite(x); })),
        tau(query_scale(inputs.scale, dims.key_dim)) {}
  diagonal_kdn_problem(const diagonal_kdn_problem&) = delete;
  diagonal_kdn_problem& operator=(const diagonal_kdn_problem&) = delete;

  shape_t full_key() const { return {dims.batch, dims.tokens, dims.heads, dims.key_dim}; }
  /// α_{t,i} of head (b, h).
  T decay(std::size_t b, std::size_t t, std::size_t h, std::size_t i) const {
    return kdn_decay(g(b, t, h, i), in.gates);
  }
};

/// The diagonal-KDN outputs, allocated (internals only when asked for).
template <class T>
diagonal_kdn_outputs<T> diagonal_kdn_allocate(const kdn_dims& d, bool internals) {
  diagonal_kdn_outputs<T> out{tensor<T>("o", {d.batch, d.tokens, d.heads, d.value_dim}),
                              tensor<T>("final_state", {d.batch, d.heads, d.key_dim, d.value_dim}),
                              tensor<T>("final_covariance", {d.batch, d.heads, d.key_dim}),
                              tensor<T>("readout_variance", {d.batch, d.tokens, d.heads}),
                              std::nullopt, std::nullopt};
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

/// The diagonal KDN, token by token (MATH.md §4). Validates every input first (input_error names
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
    std::vector<T> state(K * V), covariance(K);
    for (std::size_t i = 0; i < K; ++i) {
      covariance[i] = pb.p0(b, h, i);
      for (std::size_t j = 0; j < V; ++j) state[i * V + j] = pb.s0(b, h, i, j);
    }
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
      const std::vector<T>& gain_covariance = KALMAN_ORACLE_MUTANT(
          kdn_gain_after_write, predicted, detail::diagonal_kdn_posterior(predicted, key, r, mu));
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
