// The KDN gain path's arithmetic in binary32 (docs/math.md §4, §5; docs/kernels.md, "KDN gains"),
// written once for the kernels and their CPU twins: every operation is a float_ops.cuh rounding, in
// the reference's order (models/diagonal.hpp, models/isotropic.hpp, algebra/leaves.hpp), so that
// the operation counts of the fixtures' per-element bounds (check/diagonal_kdn_bound.hpp,
// check/isotropic_kdn_bound.hpp) cover them:
//
//   α     = e^g within one ulp (exp_within_one_ulp: the bounds' "exp 2"), a = fl(α α)
//   u     diagonal fl(fl(fl(μ k) k) / r);  isotropic fl(fl(μ Σk²) / fl(K r))
//   a     isotropic fl(Σα² / K)
//   leaf  [[a, ω], [fl(u a), fl(1 + fl(u ω))]]                     (algebra/leaves.hpp)
//   p̂     fl(fl(a p_{t−1}) + ω)
//   gain  diagonal  κ_i = fl(fl(p̂_i k_i) / fl(r + Σ_j fl(fl(p̂_j k_j) k_j)))
//         isotropic β   = fl(b̂ / fl(r + fl(b̂ Σk²)))
//   read  diagonal  Σ_i fl(fl(s_i s_i) p_i), s_i = fl(τ q_i);  isotropic fl(b Σ_i fl(s_i s_i))
//
// The covariance itself comes from the chunked Möbius scan of the leaves (gpu/algebra/mobius.cuh,
// scan/chunked.hpp's map/carry/emit order) applied to the prior with mobius_apply. The sums over
// channels are sums of non-negative terms, which the bounds count as K additions in any order; the
// kernels and twins use one fixed order (lane_partial_sums and warp_tree_sum below).
#pragma once

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/algebra/mobius.cuh"
#include "kalman_oracle/gpu/float_ops.cuh"

namespace kalman_oracle::gpu {

/// a = α² with α = e^g (log gates, fla's convention).
KALMAN_ORACLE_HD float kdn_decay_squared(float log_gate) {
  const float alpha = exp_within_one_ulp(log_gate);
  return mul_rn(alpha, alpha);
}

/// The diagonal KDN's information per channel, u = μ k² / r (models/diagonal.hpp's order).
KALMAN_ORACLE_HD float kdn_diagonal_information(float mu, float key, float r) {
  return div_rn(mul_rn(mul_rn(mu, key), key), r);
}

/// The isotropic KDN's information, u = μ ‖k‖² / (K r), from ‖k‖² (models/isotropic.hpp's order).
KALMAN_ORACLE_HD float kdn_isotropic_information(float mu, float key_norm_squared, float channels, float r) {
  return div_rn(mul_rn(mu, key_norm_squared), mul_rn(channels, r));
}

/// The covariance leaf [[a, ω], [u a, 1 + u ω]] (docs/math.md §8; det a).
KALMAN_ORACLE_HD mobius_f32 kdn_covariance_leaf(float a, float omega, float u) {
  return {a, omega, mul_rn(u, a), add_rn(1.0f, mul_rn(u, omega))};
}

/// M · x = (a x + b) / (c x + d): one FMA for each side and the quotient (the bounds count 5).
KALMAN_ORACLE_HD float mobius_apply(const mobius_f32& m, float x) {
  return div_rn(fma_rn(m.a, x, m.b), fma_rn(m.c, x, m.d));
}

/// The prediction p̂ = a p + ω.
KALMAN_ORACLE_HD float kdn_predict(float a, float previous, float omega) {
#if defined(__CUDA_ARCH__)
  return add_rn(mul_rn(a, previous), omega);
#else
  // The planted bug of the twin's meta-test (gpu/CMakeLists.txt): the prediction without ω.
  return KALMAN_ORACLE_MUTANT(gpu_kdn_predict_drops_noise, add_rn(mul_rn(a, previous), omega), mul_rn(a, previous));
#endif
}

/// The diagonal gain's innovation term of one channel, (p̂ k) k.
KALMAN_ORACLE_HD float kdn_innovation_term(float predicted, float key) { return mul_rn(mul_rn(predicted, key), key); }

/// The diagonal gain of one channel, κ = (p̂ k) / (r + Σ p̂ k²), from the innovation variance.
KALMAN_ORACLE_HD float kdn_diagonal_gain(float predicted, float key, float innovation_variance) {
  return div_rn(mul_rn(predicted, key), innovation_variance);
}

/// The isotropic gain β = b̂ / (r + b̂ ‖k‖²).
KALMAN_ORACLE_HD float kdn_isotropic_gain(float predicted, float key_norm_squared, float r) {
  return div_rn(predicted, add_rn(r, mul_rn(predicted, key_norm_squared)));
}

/// The scaled query's square, (τ q)², a readout variance's channel term before the covariance.
KALMAN_ORACLE_HD float kdn_scaled_query_squared(float tau, float query) {
  const float scaled = mul_rn(tau, query);
  return mul_rn(scaled, scaled);
}

/// Lanes per warp: the sums over channels run over 32 lanes.
inline constexpr int kdn_lanes = 32;

/// The kernels' order of a sum over K channels, for the twins: lane l adds its channels l, l + 32,
/// l + 64, … in that order from +0; then lanes combine down a tree, lane l taking lane l + o for
/// o = 16, 8, 4, 2, 1 (warp_tree_sum). `term(i)` is channel i's term.
template <class Term>
float kdn_channel_sum_twin(int channels, Term term) {
  float partial[kdn_lanes] = {};
  for (int lane = 0; lane < kdn_lanes; ++lane)
    for (int i = lane; i < channels; i += kdn_lanes) partial[lane] = add_rn(partial[lane], term(i));
  for (int offset = kdn_lanes / 2; offset > 0; offset /= 2)
    for (int lane = 0; lane < offset; ++lane) partial[lane] = add_rn(partial[lane], partial[lane + offset]);
  return partial[0];
}

}  // namespace kalman_oracle::gpu
