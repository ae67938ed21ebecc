// A-posteriori rounding-error bounds for the delta rules (DeltaNet, GDN, KDA: docs/math.md §7),
// per token and per element, evaluated along the exact trajectory (docs/error-model.md,
// "Delta rules: a-posteriori bound", which derives every term below).
//
// What is bounded: any implementation that runs the sequential recursion in fla's order in a
// binary floating-point arithmetic with unit roundoff u <= `unit_roundoff` and smallest subnormal
// spacing 2·eta, i.e. per token, for every value column j,
//     p = fl(α̂ ⊙ s)                    (decay; α̂ = exp(g) within 1 ulp, subnormal or not;
//                                        DeltaNet: none)
//     ŵ = fl(Σ_i k_i p_i)               (any summation order)
//     ĉ = fl(β fl(v_j − ŵ))             (or fl(fl(β k_i) fl(v_j − ŵ)): the same count)
//     s ← fl(p + fl(k ĉ))
//     ô_j = fl(Σ_i fl(τ̂ q_i) s_i)      (τ̂ = 1/√K rounded twice, any summation order)
// with the inputs exactly as stored. The model: fl(x ∘ y) = (x ∘ y)(1 + δ) + η, |δ| <= u, |η| <= eta,
// η = 0 for additions (Higham, Accuracy and Stability, §2.2 and Thm 2.2). No other hypothesis on the
// arithmetic: underflow is covered by the η terms; overflow is excluded by checking that every
// exact quantity is below `largest_finite` / 2.
//
// The argument. Column j of the state evolves on its own: s_t = A_t s_{t−1} + β_t k_t v_{t,j} with
// A_t = (I − β_t k_t k_tᵀ) D_t, D_t = diag(α_t). The recursion is affine in s with A_t independent
// of s, so the computed column's error ε_t = ŝ_t − s_t obeys ε_t = A_t ε_{t−1} + ℓ_t exactly, ℓ_t the
// local rounding of step t applied to the computed ŝ_{t−1}. Under β_t ‖k_t‖² ∈ [0, 2] the symmetric
// I − β k kᵀ has eigenvalues 1 and 1 − β‖k‖² ∈ [−1, 1], so ‖A_t‖₂ <= max_i α_{t,i}: the decay
// forgets old errors and nothing is amplified. Hence, with e_t >= ‖ε_t‖₂,
//     e_t = (max_i α_{t,i}) e_{t−1} + L_t(e_{t−1}),   e_0 = 0 (the initial state is an exact input),
// where L_t bounds ‖ℓ_t‖₂ from the exact s_{t−1}, k_t, v_t, β_t, α_t and e_{t−1} (|ŝ_i| <= |s_i| + e).
// The local bound uses the data, not norms of worst cases: the inner product's rounding is
// γ_K Σ_i |k_i| |p_i| (Higham's bound for any summation order, machine-checked in
// proofs/InnerProduct.v), not γ_K ‖k‖ ‖p‖ K.
// Outputs: |ô_{t,j} − o_{t,j}| <= τ‖q_t‖₂ e_t + γ_{K+3} τ Σ_i |q_i| |ŝ_i| + η terms, and every entry
// of the final state's column j is within e_T of the exact one.
//
// The result is a bound in absolute units for the given u; divided by u it increases with u (every
// term is γ_n(u)/u or a product of such with earlier terms), so a bound evaluated at u = 2^-24 and
// divided by 2^-24 is valid for binary64 (u = 2^-53) too; eta / u is largest for binary32 (2^-126).
//
// Hypotheses checked on the inputs (the result names the first that fails; the bound is then not
// proven, and a caller must label it an estimate): β_t ‖k_t‖² ∈ [0, 2], α_{t,i} ∈ [0, 1] (g <= 0),
// every exact state entry below largest_finite / 2. A decay in the subnormal range or 0 is covered:
// 1 ulp there is the absolute 2·eta.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle::check {

/// The arithmetic a bound is for: unit roundoff u, the largest absolute rounding error of a product
/// that underflows (half the smallest subnormal), and the largest finite number.
struct float_arithmetic {
  double unit_roundoff = 0x1p-24;  ///< binary32
  double underflow_error = 0x1p-150;
  double largest_finite = 0x1.fffffep127;
};

template <class T>
struct delta_rule_error_bound {
  tensor<T> o;            ///< [B, T, H, V]: bound on |ô − o| per element
  tensor<T> final_state;  ///< [B, H, K, V]: bound on |Ŝ_T − S_T| per element
  /// Empty when every hypothesis held; else the first failure, naming the token, head and rule.
  std::string hypothesis_failure;
};

namespace detail::delta_bound {

/// γ_n = n u / (1 − n u) (Higham, Lemma 3.1); the caller keeps n u < 1.
template <class T>
T gamma(double n, const T& u) {
  const T nu = T(n) * u;
  return nu / (T(1) - nu);
}

/// The constants of one step for key size K in the arithmetic `arith`.
template <class T>
struct step_constants {
  T u, eta, g2, g3, gK, gK3, sqrtK, KK;
  step_constants(const float_arithmetic& arith, std::size_t K)
      : u(arith.unit_roundoff),
        eta(arith.underflow_error),
        g2(gamma<T>(2, u)),
        g3(gamma<T>(3, u)),
        gK(gamma<T>(static_cast<double>(K), u)),
        gK3(gamma<T>(static_cast<double>(K + 3), u)),
        sqrtK(sqrt(T(static_cast<long>(K)))),
        KK(static_cast<long>(K)) {}
};

/// Column j of the exact state S (K x V row-major) decayed by α into `decayed`, with what the local
/// bound reads of it: ‖p‖², ‖s‖², σ = Σ|k_i p_i| and w = kᵀp (p = D s).
template <class T>
struct decayed_column_sums {
  T pn2, sn2, sigma, w;
};

template <class T>
decayed_column_sums<T> decay_column(const std::vector<T>& S, std::size_t V, std::size_t j, const std::vector<T>& alpha,
                                    const std::vector<T>& key, std::vector<T>& decayed) {
  T pn2(0), sigma(0), w(0), sn2(0);
  for (std::size_t i = 0; i < alpha.size(); ++i) {
    sn2 += S[i * V + j] * S[i * V + j];
    decayed[i] = alpha[i] * S[i * V + j];
    pn2 += decayed[i] * decayed[i];
    sigma += abs(key[i] * decayed[i]);
    w += key[i] * decayed[i];
  }
  return {pn2, sn2, sigma, w};
}

/// One column's decay and inner product (docs/error-model.md, "Local bound L_t"): from the exact
/// decayed column's norm ‖p‖ = pn, the state column's norm sn, σ = Σ|k_i p_i|, the exact residual
/// r = v_j − kᵀp, the key's norms, the largest decay and the carried bound e:
/// ‖ε1‖, ‖p̂‖, |ε2| and R >= |v_j − ŵ|.
template <class T>
struct decayed_column {
  T eps1, p_hat_norm, eps2, residual;
};

template <class T>
decayed_column<T> decayed_column_bound(const step_constants<T>& c, bool decays, const T& dmax, const T& ej, const T& pn,
                                       const T& sn, const T& sigma, const T& r, const T& knorm, const T& k1) {
  // ε1 = p̂ − Dŝ: exp within 1 ulp (|α̂ − α| <= γ2 α + 2η) and the product (u, η):
  // |ε1_i| <= γ3 α_i |ŝ_i| + 2η(1 + u)|ŝ_i| + η. DeltaNet: no decay, ε1 = 0.
  const T exp_floor = T(2) * c.eta * (T(1) + c.u);
  const T eps1 = decays ? c.g3 * (pn + dmax * ej) + exp_floor * (sn + ej) + c.sqrtK * c.eta : T(0);
  const T p_hat_norm = decays ? (pn + dmax * ej) + eps1 : pn + ej;
  // Σ|k_i||p̂_i| and ε2 = ŵ − kᵀp̂ (γ_K for any order; K products may underflow).
  const T k_dot_p_hat = decays
                            ? (T(1) + c.g3) * (sigma + dmax * knorm * ej) + exp_floor * knorm * (sn + ej) + k1 * c.eta
                            : sigma + knorm * ej;
  // Any summation order of the K products: proofs/InnerProduct.v, inner_product_gamma (binary32:
  // binary32_inner_product).
  const T eps2 = c.gK * k_dot_p_hat + c.KK * c.eta * (T(1) + c.gK);
  // |v_j − ŵ| <= |r| + |kᵀD(ŝ − s)| + |kᵀε1| + |ε2|.
  const T residual = abs(r) + dmax * knorm * ej + knorm * eps1 + eps2;
  return {eps1, p_hat_norm, eps2, residual};
}

/// The read o_j = τ qᵀ s (docs/error-model.md, "Outputs"): the state's error e through τ‖q‖, the
/// read's own rounding γ_{K+3} τ Σ|q_i||ŝ_i| with |ŝ_i| <= |s_i| + e, and K + 1 products that may
/// underflow. q_abs_s = Σ|q_i s_i|, s_abs = Σ|s_i| of the exact column.
template <class T>
T read_bound(const step_constants<T>& c, const T& tau, const T& qnorm, const T& q_abs_s, const T& s_abs, const T& e) {
  // The γ_{K+3} term over the exact state: proofs/InnerProduct.v, binary32_inner_product_rounded_operands.
  return tau * qnorm * e + c.gK3 * tau * (q_abs_s + qnorm * e) +
         (T(1) + c.gK) * c.eta * (c.KK + (T(1) + c.u) * (s_abs + c.sqrtK * e));
}

}  // namespace detail::delta_bound

/// The per-element bound above for DeltaNet, GDN and KDA in fla's sequential order (the header
/// comment). T is the working type the trajectory and the bound are evaluated in (MPFR in the
/// generator); the result is that evaluation, not yet rounded upward (the caller does that).
/// `beta_relative_error` [B, T, H] (optional): β is not an exact input but computed with a relative
/// error at most this (the isotropic KDN's gain, check/isotropic_kdn_bound.hpp); the step is still
/// compared with the exact one, so the difference enters the local bound with the write's own roundings.
template <class T>
delta_rule_error_bound<T> delta_rule_bound(const fixed_gain_inputs<T>& inputs, const float_arithmetic& arith = {},
                                           const tensor<T>* beta_relative_error = nullptr) {
  using namespace detail::delta_bound;
  const kalman_oracle::detail::fixed_gain::problem<T> p(inputs);
  if (!p.erases() || p.given_gain())
    throw std::invalid_argument("delta_rule_bound: the bound is for the beta-form delta rules (DeltaNet, GDN, KDA)");
  const std::size_t B = p.batch(), TT = p.tokens(), H = p.heads(), K = p.key_dim(), V = p.value_dim();
  const step_constants<T> c(arith, K);
  const T &u = c.u, &eta = c.eta, &g2 = c.g2, &g3 = c.g3, &sqrtK = c.sqrtK;
  const T huge = T(arith.largest_finite) / T(2);
  const T tau = p.scale();
  const bool decays = p.decays();

  delta_rule_error_bound<T> out{tensor<T>("o", {B, TT, H, V}), tensor<T>("final_state", {B, H, K, V}), {}};
  const auto fail = [&](std::size_t b, std::size_t t, std::size_t h, const std::string& what) {
    if (out.hypothesis_failure.empty())
      out.hypothesis_failure =
          "batch " + std::to_string(b) + ", token " + std::to_string(t) + ", head " + std::to_string(h) + ": " + what;
  };
  const auto check_finite = [&](std::size_t b, std::size_t t, std::size_t h, const T& x, const char* what) {
    if (abs(x) > huge) fail(b, t, h, std::string(what) + " exceeds largest_finite / 2 (overflow)");
  };

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      std::vector<T> S = p.initial_state(b, h);  // exact trajectory, K x V row-major
      std::vector<T> e(V, T(0));                 // e[j] >= ‖ŝ_j − s_j‖₂ (column j)
      std::vector<T> alpha(K, T(1)), decayed(K);
      for (std::size_t t = 0; t < TT; ++t) {
        const std::vector<T> k = p.key(b, t, h), q = p.query(b, t, h), v = p.value(b, t, h);
        const T beta = p.beta(b, t, h);
        // The write's factor: its three roundings (γ3) and, for a computed β, β's own error.
        const T beta_error = beta_relative_error ? (*beta_relative_error)(b, t, h) : T(0);
        const T write_factor = (T(1) + g3) * (T(1) + beta_error) - T(1);
        T k2(0), k1(0), q2(0);
        for (std::size_t i = 0; i < K; ++i) {
          k2 += k[i] * k[i];
          k1 += abs(k[i]);
          q2 += q[i] * q[i];
        }
        const T knorm = sqrt(k2), qnorm = sqrt(q2);
        if (beta < 0 || beta * k2 > 2) fail(b, t, h, "beta * |k|^2 outside [0, 2] (the step is not non-expansive)");
        T dmax(decays ? 0 : 1);
        if (decays)
          for (std::size_t i = 0; i < K; ++i) {
            alpha[i] = p.decay(b, t, h, i);
            if (alpha[i] > 1 || alpha[i] < 0) fail(b, t, h, "decay outside [0, 1]");
            dmax = std::max(dmax, alpha[i]);
          }
        for (std::size_t j = 0; j < V; ++j) {
          // Exact decayed column p, its norm, σ = Σ|k_i p_i|, the residual r = v_j − kᵀp.
          const auto [pn2, sn2, sigma, w] = decay_column(S, V, j, alpha, k, decayed);
          const T pn = sqrt(pn2), sn = sqrt(sn2), r = v[j] - w, ej = e[j];
          const auto [eps1, p_hat_norm, eps2, residual] =
              decayed_column_bound(c, decays, dmax, ej, pn, sn, sigma, r, knorm, k1);
          const T c_hat = beta * (T(1) + beta_error) * residual * (T(1) + g2) + eta;
          // ℓ = (I − βkkᵀ)ε1 − βkε2 + βkθ3(v_j − ŵ) + k η_c + (write's η and δ).
          const T local = eps1 + beta * knorm * eps2 + beta * knorm * write_factor * residual +
                          knorm * eta * (T(1) + g2) + sqrtK * eta * (T(1) + u) +
                          u * (p_hat_norm + knorm * c_hat * (T(1) + u) + sqrtK * eta);
          e[j] = KALMAN_ORACLE_MUTANT(delta_bound_forgets_history, dmax * ej + local, local);
          // Advance the exact column: s ← p + β k r.
          for (std::size_t i = 0; i < K; ++i) {
            S[i * V + j] = decayed[i] + beta * k[i] * r;
            check_finite(b, t, h, S[i * V + j], "a state entry");
          }
          // The read o_j = τ qᵀ s.
          T q_abs_s(0), s_abs(0);
          for (std::size_t i = 0; i < K; ++i) {
            q_abs_s += abs(q[i] * S[i * V + j]);
            s_abs += abs(S[i * V + j]);
          }
          out.o(b, t, h, j) = read_bound(c, tau, qnorm, q_abs_s, s_abs, e[j]);
        }
      }
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) out.final_state(b, h, i, j) = e[j];
    }
  return out;
}

}  // namespace kalman_oracle::check
