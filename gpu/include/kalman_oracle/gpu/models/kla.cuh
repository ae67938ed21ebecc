// KLA's per-element arithmetic in binary32 (docs/math.md §6), written once for the kernel and its
// CPU twin (docs/kernels.md, "KLA forward"). Every operation is a float_ops.cuh rounding, so both
// compute the same bits.
//
// One token of one element (m, s):
//     den    = fma(p̄, λ_{t-1}, fl(ā²))           ā² + p̄ λ_{t-1}: two roundings, as the bound counts
//     λ_t    = fl(fl(λ_{t-1} / den) + fl(fl(Λ k) k))  λ_{t-1}/den_t + φ_t
//     α_t    = fl(ā / den)
//     η_t    = fma(α_t, η_{t-1}, fl(fl(v Λ) k))     α_t η_{t-1} + ρ_t
// and its readout terms fl(fl(q η_t) / λ_t) and fl(fl(q q) / λ_t), summed over s in order
// s = 0, 1, … from +0 (the reference's order). These are the operation counts of the proven
// per-element bound (check/kla_bound.hpp, docs/error-model.md "KLA"): the step within 4 roundings
// (den 2, quotient 1, φ 2, sum 1), α̂ 3 past λ̂, ρ̂ 2, the fused η update one rounding where the
// bound allows two, each readout term 2. A kernel with this arithmetic is covered by the fixtures'
// budgets, which is what the twin's conformance test checks.
//
// The backward's reverse step (kla_element_adjoint_step) is grad/kla.hpp's recursion, operation by
// operation in its order, with fused multiply-adds where a product meets a sum.
//
// Every quotient is the IEEE one, RN(x / d). In the forward step and the readout, the quotients by
// one denominator share its reciprocal (division.cuh): each computes its values with
// markstein_division and, where a value left that method's range, again with ieee_division; the
// bits are the same either way (division.cuh), so the rounding counts above hold and kernel and twin
// agree. The backward's adjoint step (kla_element_adjoint_step_by) does the same with four shared
// reciprocals (λ_t, λ_t², den, den²) for its eight quotients; the twin runs it with div_rn.
#pragma once

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/division.cuh"
#include "kalman_oracle/gpu/float_ops.cuh"

namespace kalman_oracle::gpu {

/// The filter state of one element: precision λ and information mean η.
struct kla_element_state {
  float lambda, eta;
};

/// One element's decay for a token: ā, its square (the step's ā², formed once where ā is static) and p̄.
struct kla_element_decay {
  float a_bar, a_squared, p_bar;
};

KALMAN_ORACLE_HD kla_element_decay kla_decay(float a_bar, float p_bar) { return {a_bar, mul_rn(a_bar, a_bar), p_bar}; }

/// kla_element_step with the quotients of `divide` (division.cuh). The dividends λ_{t−1} and ā are
/// the caller's to check: with markstein_division, both in range must already be folded into
/// divide.in_range (kla_step_dividends_in_range), the other values are checked here.
template <class Division>
KALMAN_ORACLE_HD kla_element_state kla_element_step_by(Division& divide, const kla_element_state& previous,
                                                       const kla_element_decay& decay, float key, float precision,
                                                       float value) {
  // ā² + p̄ λ_{t-1}: one rounding fewer than the reference's on p̄λ, the step still within 4η (proofs/KlaStep.v,
  // kla_step_fma_rel).
  const divisor den = divide.by(fma_rn(decay.p_bar, previous.lambda, decay.a_squared));
  const float phi = mul_rn(mul_rn(precision, key), key);                            // φ = Λ k²
  const float lambda = add_rn(divide.checked_dividend(previous.lambda, den), phi);  // λ_t
#if defined(__CUDA_ARCH__)
  const float alpha = divide.checked_dividend(decay.a_bar, den);  // α_t = ā / den_t, from the previous precision
#else
  // The planted bug of the twin's meta-test (gpu/CMakeLists.txt): α from the new precision.
  const float alpha =
      KALMAN_ORACLE_MUTANT(gpu_kla_alpha_from_new_precision, divide.checked_dividend(decay.a_bar, den),
                           div_rn(decay.a_bar, fma_rn(decay.p_bar, lambda, mul_rn(decay.a_bar, decay.a_bar))));
#endif
  const float rho = mul_rn(mul_rn(value, precision), key);  // ρ = v Λ k
  return {lambda, fma_rn(alpha, previous.eta, rho)};
}

/// Whether the step's dividends λ_{t−1} and ā lie in the shared-reciprocal range (division.cuh).
KALMAN_ORACLE_HD bool kla_step_dividends_in_range(const kla_element_state& previous, float a_bar) {
  return in_markstein_range(previous.lambda) && in_markstein_range(a_bar);
}

/// The step with IEEE divisions: kla_element_step's fallback where a value left the
/// shared-reciprocal range (a kernel may pass one that calls it out of line).
struct kla_exact_step_inline {
  KALMAN_ORACLE_HD kla_element_state operator()(const kla_element_state& previous, const kla_element_decay& decay,
                                                float key, float precision, float value) const {
    ieee_division exact;
    return kla_element_step_by(exact, previous, decay, key, precision, value);
  }
};

/// One token of one element, from the previous state and this token's ā, p̄, k, Λ and v.
template <class Exact = kla_exact_step_inline>
KALMAN_ORACLE_HD kla_element_state kla_element_step(const kla_element_state& previous, float a_bar, float p_bar,
                                                    float key, float precision, float value, Exact exact = {}) {
  const kla_element_decay decay = kla_decay(a_bar, p_bar);
  markstein_division fast;
  fast.in_range = kla_step_dividends_in_range(previous, a_bar);
  const kla_element_state next = kla_element_step_by(fast, previous, decay, key, precision, value);
  if (fast.in_range) [[likely]]
    return next;
  return exact(previous, decay, key, precision, value);
}

/// The readout terms of one element: q η_t / λ_t (for y) and q² / λ_t (for y_var).
struct kla_readout_terms {
  float mean, variance;
};

template <class Division>
KALMAN_ORACLE_HD kla_readout_terms kla_readout_by(Division& divide, const kla_element_state& state, float query) {
  const divisor lambda = divide.by(state.lambda);
  return {divide(mul_rn(query, state.eta), lambda), divide(mul_rn(query, query), lambda)};
}

/// One token of one element and its readout terms q η_t / λ_t and q² / λ_t, with one range check
/// for both (a second check and branch for the readout cost about 5% of the forward kernel's
/// instructions).
KALMAN_ORACLE_HD kla_element_state kla_element_step_and_readout(const kla_element_state& previous, float a_bar,
                                                                float p_bar, float key, float precision, float value,
                                                                float query, kla_readout_terms& terms) {
  const kla_element_decay decay = kla_decay(a_bar, p_bar);
  markstein_division fast;
  fast.in_range = kla_step_dividends_in_range(previous, a_bar);
  const kla_element_state next = kla_element_step_by(fast, previous, decay, key, precision, value);
  terms = kla_readout_by(fast, next, query);
  if (fast.in_range) [[likely]]
    return next;
  ieee_division exact;
  const kla_element_state exact_next = kla_element_step_by(exact, previous, decay, key, precision, value);
  terms = kla_readout_by(exact, exact_next, query);
  return exact_next;
}

/// The adjoints of one element's state, λ̄ = ∂L/∂λ_t and η̄ = ∂L/∂η_t (docs/gradients.md, KLA).
struct kla_element_adjoint {
  float lambda, eta;
};

/// One token's contributions to the input gradients, before the sums over m (q, k) or s (v, Λ)
/// or over tokens and batch rows (ā, p̄ when static).
struct kla_gradient_terms {
  float q, k, v, Lambda, a_bar, p_bar;
};

/// One reverse step of grad/kla.hpp's recursion, token t, from the adjoints after token t to those
/// before it; `previous` and `state` are (λ, η) before and after the token, as the forward computed
/// them. The operations of grad/kla.hpp in its order, each a float_ops rounding, den recomputed as
/// the forward computes it (the same bits), the quotients by `divide` (division.cuh: the same bits
/// through shared reciprocals or div_rn). With markstein_division, ā's range is the caller's to
/// check and fold into divide.in_range (it is static in the model: checked once, not a token);
/// λ_t and den_t are checked with their squares (by_with_square), the other values here.
template <class Division>
KALMAN_ORACLE_HD kla_gradient_terms kla_element_adjoint_step_by(Division& divide, kla_element_adjoint& adjoint,
                                                                const kla_element_state& previous,
                                                                const kla_element_state& state, float a_bar,
                                                                float p_bar, float key, float query, float precision,
                                                                float value, float dy, float dy_var) {
  // Readout of token t (read after write): y += q η_t / λ_t, y_var += q² / λ_t.
  const float query_dy = mul_rn(query, dy);
  divisor lambda, lambda_squared;  // λ_t and RN(λ_t²), one range check for both
  divide.by_with_square(state.lambda, lambda, lambda_squared);
  adjoint.eta = add_rn(adjoint.eta, divide(query_dy, lambda));
  adjoint.lambda = add_rn(adjoint.lambda,
                          -divide(fma_rn(query_dy, state.eta, mul_rn(mul_rn(query, query), dy_var)), lambda_squared));
  kla_gradient_terms terms;
  terms.q = divide(fma_rn(dy, state.eta, mul_rn(2.0f * query, dy_var)), lambda);
  // η_t = α_t η_{t−1} + ρ_t, α_t = ā / den_t, den_t = ā² + p̄ λ_{t−1} (both λ_t and α_t read den_t).
  const float a_squared = mul_rn(a_bar, a_bar);
  divisor den, den_squared;  // den_t and RN(den_t²)
  divide.by_with_square(fma_rn(p_bar, previous.lambda, a_squared), den, den_squared);
  const float alpha = divide.checked_dividend(a_bar, den);  // ā: the caller's check (see above)
  const float rho_adjoint = adjoint.eta;
  const float alpha_adjoint = mul_rn(adjoint.eta, previous.eta);
#if defined(__CUDA_ARCH__)
  const float den_adjoint_mean = -divide(mul_rn(alpha_adjoint, a_bar), den_squared);
#else
  // The planted bug of the backward twin's meta-test: the mean decay's share of den̄ dropped.
  const float den_adjoint_mean =
      KALMAN_ORACLE_MUTANT(gpu_kla_adjoint_drops_mean_term, -divide(mul_rn(alpha_adjoint, a_bar), den_squared), 0.0f);
#endif
  const float den_adjoint = add_rn(-divide(mul_rn(adjoint.lambda, previous.lambda), den_squared), den_adjoint_mean);
  // φ = Λ k², ρ = v Λ k; φ̄ = λ̄_t.
  const float rho_value = mul_rn(rho_adjoint, value);
  terms.Lambda = fma_rn(adjoint.lambda, mul_rn(key, key), mul_rn(rho_value, key));
  terms.k = fma_rn(mul_rn(2.0f * precision, key), adjoint.lambda, mul_rn(rho_value, precision));
  terms.v = mul_rn(mul_rn(rho_adjoint, precision), key);
  terms.a_bar = fma_rn(2.0f * a_bar, den_adjoint, divide(alpha_adjoint, den));
  terms.p_bar = mul_rn(den_adjoint, previous.lambda);
  // λ̄_{t−1} = λ̄_t ā² / den² + p̄ den̄_mean;  η̄_{t−1} = α_t η̄_t.
  adjoint.lambda = fma_rn(p_bar, den_adjoint_mean, divide(mul_rn(adjoint.lambda, a_squared), den_squared));
  adjoint.eta = mul_rn(alpha, adjoint.eta);
  return terms;
}

/// kla_element_adjoint_step_by with div_rn: the twin's, and the kernel's fallback.
KALMAN_ORACLE_HD kla_gradient_terms kla_element_adjoint_step(kla_element_adjoint& adjoint,
                                                             const kla_element_state& previous,
                                                             const kla_element_state& state, float a_bar, float p_bar,
                                                             float key, float query, float precision, float value,
                                                             float dy, float dy_var) {
  ieee_division exact;
  return kla_element_adjoint_step_by(exact, adjoint, previous, state, a_bar, p_bar, key, query, precision, value, dy,
                                     dy_var);
}

}  // namespace kalman_oracle::gpu
