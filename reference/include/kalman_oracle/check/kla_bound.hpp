// Per-element error bounds for KLA's precision path (docs/math.md §6, §8 fact 4; docs/error-model.md,
// "KLA: contraction bounds"): λ_t for every token, the final λ and y_var, for the sequential
// recursion and the covered Möbius scans (check/contraction_bound.hpp), evaluated along the exact
// trajectory.
//
// Per element (m, s) the leaf of token t is M_t = [[1 + z, ā²φ], [p̄, ā²]], φ = Λ k², z = p̄φ, with
// Birkhoff coefficient τ_t = (√(1 + z) − √z)² (proofs/Birkhoff.v, kla_leaf_tau). Rounding counts
// (units of η = −ln(1 − u)), for any arithmetic of unit roundoff u <= 2^-24 without underflow:
//   step  the sequential recursion λ ← λ / (ā² + p̄ λ) + φ: den two roundings deep in a positive sum,
//         the quotient one, φ two, the sum one: λ̂_t = f_t(λ̂_{t−1}) e^{±4η} (machine-checked for
//         the reference's order: proofs/KlaStep.v, kla_step_fl_rel, kla_sequential_rounding);
//   leaf  entries 1 + p̄φ (φ 2, the product 1, the sum 1) and ā²φ (1 + 2 + 1) within 4 roundings:
//         the leaf's action within 8η (act_perturbed);
//   node  a compose: two products and a sum per entry (2; a fused multiply-add is not worse), and one
//         more for a trace or max-entry rescale (power-of-two rescales are exact): 2 × 3 = 6η;
//   apply Π_t · λ_0: numerator 2, denominator 2, quotient 1: 5η.
// Then |ln λ̂_t − ln λ_t| <= E_t (the largest over the covered orders) and |λ̂_t − λ_t| <=
// expm1(E_t) λ_t. y_var = Σ_s q_s² / λ_s: each term adds q² (1) and the quotient (1), the sum of S
// non-negative terms in any order S − 1: |ŷ − y| <= Σ_s (q_s²/λ_s) expm1(E_s + (S + 1) η)
// (machine-checked for every summation tree and the reference's order from +0: proofs/KlaReadout.v,
// readout_variance_error, readout_variance_error_from_zero).
//
// Hypotheses, checked on the exact values (the result names the first that fails): every non-zero
// λ_t, φ_t, ā², ā²φ, p̄, p̄λ_{t−1}, den_t and λ_{t−1}/den_t within [2^-100, 2^100] (computed values
// are within e^{E} <= e of them, so binary32 neither underflows nor overflows); E_t <= 1; every
// covered scan's normalised products in range (contraction_bound.hpp).
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kalman_oracle/check/affine_bound.hpp"
#include "kalman_oracle/check/contraction_bound.hpp"
#include "kalman_oracle/check/delta_rule_bound.hpp"
#include "kalman_oracle/models/kla.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle::check {

template <class T>
struct kla_error_bound {
  tensor<T> lambda;        ///< [B, T, M, S]: bound on |λ̂_t − λ_t|
  tensor<T> final_lambda;  ///< [B, M, S]
  tensor<T> y_var;         ///< [B, T, M]
  tensor<T> eta;           ///< [B, T, M, S]: bound on |η̂_t − η_t|
  tensor<T> final_eta;     ///< [B, M, S]
  tensor<T> y;             ///< [B, T, M]
  std::string hypothesis_failure;
};

/// The KLA leaf's rounding counts (see the top), in log units for unit roundoff u.
inline mobius_recursion_rounding kla_rounding(double u) {
  const double eta = log_rounding(u);
  return {8 * eta, 6 * eta, 5 * eta, 4 * eta};
}

/// A value of T as a binary64 rounded up (one ulp above round-to-nearest).
template <class T>
double upward_double(const T& x) {
  const double d = scalar_traits<T>::to_double(x);
  return std::nextafter(d, std::numeric_limits<double>::infinity());
}

/// The bound over every covered order; with `only`, the bound of that one scan order (tests check
/// each order against its own bound: a max over orders would hide a wrong one).
template <class T>
kla_error_bound<T> kla_bound(const kla_inputs<T>& inputs, const float_arithmetic& arith = {},
                             const covered_scan* only = nullptr) {
  const kalman_oracle::detail::kla_checked_inputs<T> in(inputs);
  const std::size_t B = in.dims.batch, TT = in.dims.tokens, M = in.dims.channels, S = in.dims.state;
  const double eta = log_rounding(arith.unit_roundoff);
  const mobius_recursion_rounding rounding = kla_rounding(arith.unit_roundoff);
  kla_error_bound<T> out{tensor<T>("lambda", {B, TT, M, S}),
                         tensor<T>("final_lambda", {B, M, S}),
                         tensor<T>("y_var", {B, TT, M}, T(0)),
                         tensor<T>("eta", {B, TT, M, S}),
                         tensor<T>("final_eta", {B, M, S}, T(0)),
                         tensor<T>("y", {B, TT, M}, T(0)),
                         {}};
  const double u_double = arith.unit_roundoff, underflow_double = arith.underflow_error;
  const T u(u_double), underflow(underflow_double);
  const T g2 = detail::delta_bound::gamma<T>(2, u), gS = detail::delta_bound::gamma<T>(static_cast<double>(S), u);
  const T lo(0x1p-100), hi(0x1p100);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t s = 0; s < S; ++s) {
        std::vector<bounded_leaf> leaves(TT);
        std::vector<T> lambda(TT);
        T prev = in.lambda_0(b, m, s);
        const auto fail = [&](std::size_t t, const std::string& what) {
          if (out.hypothesis_failure.empty())
            out.hypothesis_failure = "batch " + std::to_string(b) + ", token " + std::to_string(t) + ", element (" +
                                     std::to_string(m) + ", " + std::to_string(s) + "): " + what;
        };
        const auto in_range = [&](std::size_t t, const T& x, const char* what) {
          if (x != 0 && (x < lo || x > hi)) fail(t, std::string(what) + " outside [2^-100, 2^100] (binary32 range)");
        };
        in_range(0, prev, "lambda_0");
        for (std::size_t t = 0; t < TT; ++t) {
          const T& a = in.a_bar(b, t, m, s);
          const T& p = in.p_bar(b, t, m, s);
          const T& key = in.k(b, t, s);
          const T phi = in.Lambda(b, t, m) * key * key;
          const T a2 = a * a, z = p * phi, den = a2 + p * prev, predicted = prev / den;
          lambda[t] = predicted + phi;
          in_range(t, phi, "phi");
          in_range(t, a2, "a_bar^2");
          in_range(t, a2 * phi, "a_bar^2 phi");
          in_range(t, p, "p_bar");
          in_range(t, p * prev, "p_bar lambda");
          in_range(t, den, "a_bar^2 + p_bar lambda");
          in_range(t, predicted, "lambda / den");
          in_range(t, lambda[t], "lambda");
          // τ = (√(1 + z) − √z)² = 1 / (√(1 + z) + √z)², rounded up, at most 1.
          const T root = sqrt(T(1) + z) + sqrt(z);
          leaves[t].tau = std::min(1.0, upward_double(T(1) / (root * root)));
          leaves[t].a = scalar_traits<T>::to_double(T(1) + z);
          leaves[t].b = scalar_traits<T>::to_double(a2 * phi);
          leaves[t].c = scalar_traits<T>::to_double(p);
          leaves[t].d = scalar_traits<T>::to_double(a2);
          prev = lambda[t];
        }
        bool products_in_range = true;
        const auto log_bound = only ? scan_log_bound(leaves, rounding, *only, products_in_range)
                                    : mobius_recursion_log_bound(leaves, rounding, products_in_range);
        if (!products_in_range)
          fail(0,
               "a covered scan's rescaled product leaves binary32's normal range (a non-zero entry outside [2^-100, "
               "2^50] or a product term below 2^-120 after rescaling)");
        for (std::size_t t = 0; t < TT; ++t) {
          if (log_bound[t] > 1) fail(t, "the log-error bound exceeds 1");
          out.lambda(b, t, m, s) = T(std::expm1(log_bound[t]) * bound_inflation) * lambda[t];
          const T& query = in.q(b, t, s);
          out.y_var(b, t, m) += query * query / lambda[t] *
                                T(std::expm1(log_bound[t] + static_cast<double>(S + 1) * eta) * bound_inflation);
        }
        out.final_lambda(b, m, s) = TT == 0 ? T(0) : out.lambda(b, TT - 1, m, s);

        // The information mean (docs/error-model.md, "KLA: the information mean and y"). α̂_t =
        // fl(ā / fl(ā² + p̄ λ̂_{t−1})) is within e^{±(D_t + 3η)} of α_t, D_t = affine_log_error(w_t,
        // E^prev_t) with E^prev_t the bound of the λ̂_{t−1} it reads (previous_log_bound) and w_t =
        // p̄λ_{t−1}/den_t; ρ̂ = fl(fl(v Λ) k) within γ2 and underflow.
        const auto previous = previous_log_bound(leaves, rounding, products_in_range, only);
        std::vector<affine_error> affine_leaves(TT);
        std::vector<T> mean(TT);
        std::vector<double> mean_bound(TT, 0);
        {
          // The sequential recursion η̂_t = fl(fl(α̂_t η̂_{t−1}) + ρ̂_t): e_t >= |η̂_t − η_t|.
          T eta_t = in.eta_0(b, m, s), e(0), lambda_prev = in.lambda_0(b, m, s);
          for (std::size_t t = 0; t < TT; ++t) {
            const T& a = in.a_bar(b, t, m, s);
            const T& key = in.k(b, t, s);
            const T& p = in.p_bar(b, t, m, s);
            const T den = a * a + p * lambda_prev;
            const T alpha = a / den;
            const T rho = in.v(b, t, m) * in.Lambda(b, t, m) * key;
            in_range(t, alpha, "alpha = a_bar / den");
            // p̄ >= 0 and λ > 0 (the inputs' rules, kla_checked_inputs) put w in [0, 1].
            const double den_error = affine_log_error(upward_double(p * lambda_prev / den), previous[t]);
            const double coefficient_error = std::expm1(den_error + 3 * eta) * bound_inflation;
            affine_leaves[t] = {scalar_traits<T>::to_double(alpha), upward_double(abs(rho)),
                                upward_double(alpha * T(coefficient_error)) + underflow_double,
                                upward_double(g2 * abs(rho) + underflow * (T(1) + (T(1) + u) * abs(key)))};
            const T c(std::expm1(den_error + 4 * eta) * bound_inflation);
            // The underflow count 2 + (1 + u)(|k| + 1) holds while u (1 + (1 + u)|k|) <= 1, and
            // (1 + u)(2 + (1 + u)|k|) always: the larger of the two (proofs/KlaMean.v, kla_mean_step and
            // kla_mean_step_general; the first is the larger unless |k| > about 1/u).
            const T bounded_key_count = T(2) + (T(1) + u) * (abs(key) + T(1));
            const T any_key_count = (T(1) + u) * (T(2) + (T(1) + u) * abs(key));
            const T underflow_count = bounded_key_count < any_key_count ? any_key_count : bounded_key_count;
            e = alpha * e + alpha * c * (abs(eta_t) + e) + g2 * abs(rho) +
                u * (alpha * (T(1) + c) * (abs(eta_t) + e) + (T(1) + g2) * abs(rho)) + underflow * underflow_count;
            eta_t = alpha * eta_t + rho;
            mean[t] = eta_t;
            if (!only) mean_bound[t] = upward_double(e);
            lambda_prev = lambda[t];
          }
        }
        // The affine scans, each over its own tree (check/affine_bound.hpp).
        const double x0 = upward_double(abs(in.eta_0(b, m, s)));
        for (const auto& scan : covered_scans()) {
          if (only && only->name != scan.name) continue;
          const auto scanned = affine_scan_bound(affine_leaves, x0, scan, u_double, underflow_double);
          for (std::size_t t = 0; t < TT; ++t) mean_bound[t] = std::max(mean_bound[t], scanned[t]);
        }
        for (std::size_t t = 0; t < TT; ++t) {
          const T e(mean_bound[t]);
          out.eta(b, t, m, s) = e;
          // y_{t,m} += q η_t / λ_t: the term's error from η̂ and λ̂ (and its two roundings), the
          // S-term signed sum's γ_S on the computed terms' sizes, and underflow, which the additions
          // round too (1 + γ_S; proofs/KlaMean.v, kla_readout_y).
          const T& query = in.q(b, t, s);
          const T grow(std::expm1(log_bound[t] + 2 * eta) * bound_inflation);
          const T term_size = abs(query) * (abs(mean[t]) + e) / lambda[t];
          out.y(b, t, m) += abs(query) * e / lambda[t] + term_size * grow + gS * term_size * (T(1) + grow) +
                            (T(1) + gS) * underflow * (T(1) + (T(1) + grow) / lambda[t]);
        }
        out.final_eta(b, m, s) = TT == 0 ? T(0) : out.eta(b, TT - 1, m, s);
      }
  return out;
}

}  // namespace kalman_oracle::check
