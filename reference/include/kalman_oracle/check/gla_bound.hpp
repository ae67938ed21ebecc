// A-posteriori rounding-error bound for GLA (docs/math.md §7; docs/error-model.md, "GLA:
// a-posteriori bound"), per token and per element, evaluated along the exact trajectory.
//
// What is bounded: any implementation that runs GLA's sequential recursion in a binary
// floating-point arithmetic with unit roundoff u <= `unit_roundoff`, i.e. per token and element
//     ŝ_ij ← fl(fl(α̂_i ŝ_ij) + fl(k_i v_j))     (α̂ = exp(g_i) within 1 ulp, subnormal or not)
//     ô_j = fl(Σ_i fl(τ̂ q_i) ŝ_ij)               (τ̂ = 1/√K rounded twice, any summation order)
// with the inputs exactly as stored, in the model fl(x ∘ y) = (x ∘ y)(1 + δ) + η, |δ| <= u,
// |η| <= eta, η = 0 for additions (check/delta_rule_bound.hpp states it in full).
//
// The argument. Every state entry evolves alone, s_t = α_t s_{t−1} + k_t v_t (the indices i, j
// dropped), so with e_{t−1} >= |ŝ_{t−1} − s_{t−1}|:
//   the decay    |fl(α̂ ŝ) − α s| <= α e + (2uα + 2η)(|s| + e) + u((1 + 2u)α + 2η)(|s| + e) + η =: ε_p
//                (|α̂ − α| <= 2uα + 2η: 1 ulp; the product's own δ and η)
//   the write    |fl(k v) − k v| <= u|k v| + η =: ε_w
//   the sum      e_t = ε_p + ε_w + u(|s_t| + ε_p + ε_w)
// so the decay forgets old errors (α < 1), where the formula budget 4T + 2 counts every token's
// roundings at full weight. The read: |ô_j − o_j| <= τ Σ_i |q_i| e_i + γ_{K+3} τ Σ_i |q_i| (|s_i| + e_i)
// + (1 + γ_K) η (K + (1 + u) Σ_i (|s_i| + e_i)) (τ̂'s two roundings, the product by q, the product by
// ŝ and K − 1 sums in any order: Higham's γ_{K+3}; K + 1 products that may underflow).
//
// The result is absolute for the given u; divided by u it increases with u, so a bound evaluated at
// u = 2^-24 and divided by 2^-24 holds for binary64 too. Hypothesis checked on the inputs (the result
// names the first failure; the bound is then an estimate): every exact state entry plus its bound
// below largest_finite / 2 (no overflow); decays >= 0.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kalman_oracle/check/delta_rule_bound.hpp"
#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"

namespace kalman_oracle::check {

/// The per-element bound above for GLA in its sequential order. T is the working type the
/// trajectory and the bound are evaluated in (MPFR in the generator); the result is that
/// evaluation, not yet rounded upward (the caller does that).
template <class T>
delta_rule_error_bound<T> gla_bound(const fixed_gain_inputs<T>& inputs, const float_arithmetic& arith = {}) {
  using detail::delta_bound::gamma;
  const kalman_oracle::detail::fixed_gain::problem<T> p(inputs);
  if (p.erases()) throw std::invalid_argument("gla_bound: the bound is for GLA (no erase)");
  const std::size_t B = p.batch(), TT = p.tokens(), H = p.heads(), K = p.key_dim(), V = p.value_dim();
  const T u(arith.unit_roundoff), eta(arith.underflow_error), huge = T(arith.largest_finite) / T(2);
  const T gK = gamma<T>(static_cast<double>(K), u), gK3 = gamma<T>(static_cast<double>(K + 3), u);
  const T KK(static_cast<long>(K)), tau = p.scale();

  delta_rule_error_bound<T> out{tensor<T>("o", {B, TT, H, V}), tensor<T>("final_state", {B, H, K, V}), {}};
  const auto fail = [&](std::size_t b, std::size_t t, std::size_t h, const std::string& what) {
    if (out.hypothesis_failure.empty())
      out.hypothesis_failure =
          "batch " + std::to_string(b) + ", token " + std::to_string(t) + ", head " + std::to_string(h) + ": " + what;
  };

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      std::vector<T> S = p.initial_state(b, h);  // exact trajectory, K x V row-major
      std::vector<T> e(K * V, T(0));             // e[i V + j] >= |ŝ_ij − s_ij|
      for (std::size_t t = 0; t < TT; ++t) {
        const std::vector<T> k = p.key(b, t, h), q = p.query(b, t, h), v = p.value(b, t, h);
        for (std::size_t i = 0; i < K; ++i) {
          const T alpha = p.decays() ? p.decay(b, t, h, i) : T(1);
          if (alpha < 0) fail(b, t, h, "a decay below 0");
          for (std::size_t j = 0; j < V; ++j) {
            T& s = S[i * V + j];
            const T magnitude = abs(s) + e[i * V + j];
            const T eps_p = p.decays() ? alpha * e[i * V + j] + (T(2) * u * alpha + T(2) * eta) * magnitude +
                                             u * ((T(1) + T(2) * u) * alpha + T(2) * eta) * magnitude + eta
                                       : e[i * V + j];
            const T kv = k[i] * v[j];
            const T eps_w = u * abs(kv) + eta;
            s = alpha * s + kv;
            // (Planted bug gla_bound_forgets_history: the carried error dropped from the decay term.)
            const T carried = KALMAN_ORACLE_MUTANT(gla_bound_forgets_history, eps_p, eps_p - alpha * e[i * V + j]);
            e[i * V + j] = carried + eps_w + u * (abs(s) + carried + eps_w);
            if (abs(s) + e[i * V + j] > huge) fail(b, t, h, "a state entry exceeds largest_finite / 2 (overflow)");
          }
        }
        // The read o_j = τ qᵀ s.
        for (std::size_t j = 0; j < V; ++j) {
          T carried(0), q_abs_s(0), s_abs(0);
          for (std::size_t i = 0; i < K; ++i) {
            const T ei = e[i * V + j], si = abs(S[i * V + j]) + ei;
            carried += abs(q[i]) * ei;
            q_abs_s += abs(q[i]) * si;
            s_abs += si;
          }
          out.o(b, t, h, j) = tau * carried + gK3 * tau * q_abs_s + (T(1) + gK) * eta * (KK + (T(1) + u) * s_abs);
        }
      }
      for (std::size_t x = 0; x < K * V; ++x) out.final_state.data()[(b * H + h) * K * V + x] = e[x];
    }
  return out;
}

}  // namespace kalman_oracle::check
