// The KDN gain path's adjoint in binary32 (docs/gradients.md, "Diagonal KDN", "Isotropic KDN";
// docs/kernels.md, "KDN gain backward"), written once for the kernels and their CPU twin: every
// operation a float_ops.cuh rounding, so that kernel and twin compute the same bits.
//
// The reverse recursion of the covariance adjoint (grad/diagonal.hpp, grad/isotropic.hpp) is
// affine in the adjoint y_t = ∂L/∂p_t arriving from later tokens (the readout's s_t added here):
//     p̂̄_t = (y_t + s_t) / (1 + u_t p̂_t)² + e_t,        y_{t−1} = a_t p̂̄_t
// with s_t = dv_t τ² Σ q² (per channel for the diagonal KDN), and e_t the gain's and the
// prediction's own cotangent terms, which do not depend on y:
//     diagonal   e_i = dκ_i k_i / D + D̄ k_i² + dp̂_i,  D = r + Σ p̂ k²,  D̄ = −Σ dκ κ / D
//     isotropic  e   = dβ r / (r + b̂ n)² + db̂,        n = ‖k‖²
// So y_{t−1} = m_t y_t + c_t, m_t = a_t / (1 + u_t p̂_t)², c_t = a_t (s_t / (1 + u_t p̂_t)² + e_t):
// a chunk's composition is one affine map (the kernels' map pass), the chunks' carries a sequential
// walk (carry), and each chunk's tokens then run the recursion itself from its carry (emit), where
// every input's gradient is formed. The forward states come from p̂ (the forward's
// predicted_covariance): p_t = p̂_t / (1 + u_t p̂_t), the reference's kdn_posterior_step.
#pragma once

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/float_ops.cuh"
#include "kalman_oracle/gpu/models/kdn_gain.cuh"

namespace kalman_oracle::gpu {

/// p = p̂ / (1 + u p̂) (grad/kdn_common.hpp's kdn_posterior_step, in its order).
KALMAN_ORACLE_HD float kdn_posterior(float predicted, float u) {
  return div_rn(predicted, add_rn(1.0f, mul_rn(u, predicted)));
}

/// (1 + u p̂)², the covariance step's derivative's denominator.
KALMAN_ORACLE_HD float kdn_step_denominator_squared(float predicted, float u) {
  const float one_plus = add_rn(1.0f, mul_rn(u, predicted));
  return mul_rn(one_plus, one_plus);
}

/// The covariance the gate's gradient reads, p_{t−1}. The twin's planted bug (gpu/CMakeLists.txt's
/// meta-test): p_t instead, the reference's grad_kdn_covariance_wrong_time.
KALMAN_ORACLE_HD float kdn_gate_adjoint_covariance(float previous, float current) {
  (void)current;
#if defined(__CUDA_ARCH__)
  return previous;
#else
  return KALMAN_ORACLE_MUTANT(gpu_kdn_backward_gate_wrong_time, previous, current);
#endif
}

/// One affine map y ↦ m y + c of the reverse recursion.
struct kdn_adjoint_affine {
  float m, c;
};

/// The token's map from its pieces: m = a / (1 + u p̂)², c = a (s / (1 + u p̂)² + e).
KALMAN_ORACLE_HD kdn_adjoint_affine kdn_adjoint_step(float a, float denominator_squared, float s, float e) {
  return {div_rn(a, denominator_squared), mul_rn(a, add_rn(div_rn(s, denominator_squared), e))};
}

/// later ∘ earlier for the reverse walk: the map of token t applied after the chunk's later tokens'
/// composition, y ↦ m_t (M y + C) + c_t.
KALMAN_ORACLE_HD kdn_adjoint_affine kdn_adjoint_then(const kdn_adjoint_affine& composed,
                                                     const kdn_adjoint_affine& step) {
  return {mul_rn(step.m, composed.m), add_rn(mul_rn(step.m, composed.c), step.c)};
}

/// M y + C.
KALMAN_ORACLE_HD float kdn_adjoint_apply(const kdn_adjoint_affine& f, float y) { return add_rn(mul_rn(f.m, y), f.c); }

/// The readout's term s = dv (τ q)² of one channel (diagonal), or dv Σ (τ q)² (isotropic, given
/// the sum).
KALMAN_ORACLE_HD float kdn_readout_adjoint(float d_readout, float scaled_query_squared) {
  return mul_rn(d_readout, scaled_query_squared);
}

/// Diagonal: a channel's dκ κ, the term of D̄ = −Σ dκ κ / D.
KALMAN_ORACLE_HD float kdn_gain_adjoint_term(float d_gain, float predicted, float key, float innovation_variance) {
  return mul_rn(d_gain, kdn_diagonal_gain(predicted, key, innovation_variance));
}

/// Diagonal: D̄ = −(Σ dκ κ) / D.
KALMAN_ORACLE_HD float kdn_innovation_adjoint(float gain_terms, float innovation_variance) {
  return -div_rn(gain_terms, innovation_variance);
}

/// Diagonal: e = dκ k / D + D̄ k² + dp̂ of one channel.
KALMAN_ORACLE_HD float kdn_diagonal_cotangent_terms(float d_gain, float key, float innovation_variance,
                                                    float innovation_adjoint, float d_predicted) {
  return add_rn(add_rn(div_rn(mul_rn(d_gain, key), innovation_variance), mul_rn(innovation_adjoint, mul_rn(key, key))),
                d_predicted);
}

/// Isotropic: e = dβ r / (r + b̂ n)² + db̂.
KALMAN_ORACLE_HD float kdn_isotropic_cotangent_terms(float d_beta, float r, float gain_denominator_squared,
                                                     float d_predicted) {
  return add_rn(div_rn(mul_rn(d_beta, r), gain_denominator_squared), d_predicted);
}

/// Isotropic: (r + b̂ n)², the gain's denominator squared.
KALMAN_ORACLE_HD float kdn_isotropic_gain_denominator_squared(float predicted, float key_norm_squared, float r) {
  const float denominator = add_rn(r, mul_rn(predicted, key_norm_squared));
  return mul_rn(denominator, denominator);
}

/// The gradients of one diagonal channel at token t, from y_t (the adjoint from later tokens).
struct kdn_diagonal_token_gradients {
  float dq, dk, dg, domega;
  float r_term;    ///< ū u / r: dr = D̄ − Σ of these
  float mu_term;   ///< ū k² / r: dμ = Σ of these over tokens and channels
  float tau_term;  ///< s p: dτ = 2 Σ / τ
  float y_previous;
};

/// grad/diagonal.hpp's reverse step for one channel. `p_previous` is p_{t−1} (the prior at t = 0).
KALMAN_ORACLE_HD kdn_diagonal_token_gradients kdn_diagonal_token_adjoint(
    float y, float tau, float query, float d_readout, float key, float a, float predicted, float p_previous, float u,
    float r, float mu, float d_gain, float innovation_variance, float innovation_adjoint, float d_predicted) {
  kdn_diagonal_token_gradients out;
  const float covariance = kdn_posterior(predicted, u);
  const float scaled_query = mul_rn(tau, query);
  const float s = kdn_readout_adjoint(d_readout, mul_rn(scaled_query, scaled_query));
  const float p_bar = add_rn(y, s);
  // v_t = τ² Σ q² p_t: dq = 2 dv τ (τ q) p, dτ's term s p.
  out.dq = mul_rn(mul_rn(add_rn(d_readout, d_readout), mul_rn(tau, scaled_query)), covariance);
  out.tau_term = mul_rn(s, covariance);
  // p_t = p̂ / (1 + u p̂), u = μ k² / r: ū = −p̄ p².
  const float u_bar = -mul_rn(p_bar, mul_rn(covariance, covariance));
  out.r_term = div_rn(mul_rn(u_bar, u), r);
  out.mu_term = div_rn(mul_rn(u_bar, mul_rn(key, key)), r);
  // κ = p̂ k / D, D = r + Σ p̂ k².
  out.dk = add_rn(add_rn(div_rn(mul_rn(d_gain, predicted), innovation_variance),
                         mul_rn(add_rn(innovation_adjoint, innovation_adjoint), mul_rn(predicted, key))),
                  div_rn(mul_rn(mul_rn(add_rn(mu, mu), u_bar), key), r));
  const float e = kdn_diagonal_cotangent_terms(d_gain, key, innovation_variance, innovation_adjoint, d_predicted);
  const float predicted_bar = add_rn(div_rn(p_bar, kdn_step_denominator_squared(predicted, u)), e);
  // p̂ = α² p_{t−1} + ω, α = e^g: dg = dα α = 2 α² p_{t−1} p̂̄.
  out.dg = mul_rn(add_rn(a, a), mul_rn(kdn_gate_adjoint_covariance(p_previous, covariance), predicted_bar));
  out.domega = predicted_bar;
  out.y_previous = mul_rn(a, predicted_bar);
  return out;
}

/// The head's scalar gradients of one isotropic token (grad/isotropic.hpp's reverse step).
struct kdn_isotropic_token_gradients {
  float n_bar;          ///< ∂L/∂‖k‖²: dk_i = 2 n̄ k_i
  float a_bar;          ///< ∂L/∂a (a = Σ α² / K): dg_i = 2 α_i² ā / K
  float readout_scale;  ///< 2 dv b_t: dq_i = readout_scale · τ (τ q_i)
  float dr, domega, mu_term, tau_term, y_previous;
};

/// grad/isotropic.hpp's reverse step. Q = Σ (τ q)², n = ‖k‖², `b_previous` b_{t−1}.
KALMAN_ORACLE_HD kdn_isotropic_token_gradients kdn_isotropic_token_adjoint(float y, float d_readout, float queries,
                                                                           float key_norm_squared, float a,
                                                                           float predicted, float b_previous, float u,
                                                                           float r, float mu, float channels,
                                                                           float d_beta, float d_predicted) {
  kdn_isotropic_token_gradients out;
  const float covariance = kdn_posterior(predicted, u);
  const float s = kdn_readout_adjoint(d_readout, queries);
  const float p_bar = add_rn(y, s);
  out.readout_scale = mul_rn(add_rn(d_readout, d_readout), covariance);
  out.tau_term = mul_rn(covariance, s);
  const float step_squared = kdn_step_denominator_squared(predicted, u);
  const float gain_squared = kdn_isotropic_gain_denominator_squared(predicted, key_norm_squared, r);
  // b = b̂ / (1 + c b̂), c = μ n / (K r): c̄ = −p̄ b̂² / (1 + c b̂)².
  const float u_bar = -div_rn(mul_rn(p_bar, mul_rn(predicted, predicted)), step_squared);
  const float channel_r = mul_rn(channels, r);
  out.mu_term = div_rn(mul_rn(u_bar, key_norm_squared), channel_r);
  // β = b̂ / (r + b̂ n): ∂β/∂n = −b̂² / (r + b̂ n)², ∂β/∂r = −b̂ / (r + b̂ n)².
  out.n_bar =
      add_rn(div_rn(mul_rn(u_bar, mu), channel_r), -div_rn(mul_rn(d_beta, mul_rn(predicted, predicted)), gain_squared));
  out.dr = add_rn(-div_rn(mul_rn(u_bar, u), r), -div_rn(mul_rn(d_beta, predicted), gain_squared));
  const float predicted_bar =
      add_rn(div_rn(p_bar, step_squared), kdn_isotropic_cotangent_terms(d_beta, r, gain_squared, d_predicted));
  out.a_bar = mul_rn(predicted_bar, kdn_gate_adjoint_covariance(b_previous, covariance));
  out.domega = predicted_bar;
  out.y_previous = mul_rn(a, predicted_bar);
  return out;
}

/// The isotropic token's map: m = a / (1 + u b̂)², c = a (dv Q / (1 + u b̂)² + e).
KALMAN_ORACLE_HD kdn_adjoint_affine kdn_isotropic_adjoint_step(float d_readout, float queries, float key_norm_squared,
                                                               float a, float predicted, float u, float r, float d_beta,
                                                               float d_predicted) {
  const float e = kdn_isotropic_cotangent_terms(
      d_beta, r, kdn_isotropic_gain_denominator_squared(predicted, key_norm_squared, r), d_predicted);
  return kdn_adjoint_step(a, kdn_step_denominator_squared(predicted, u), kdn_readout_adjoint(d_readout, queries), e);
}

/// The diagonal channel's map: m = a / (1 + u p̂)², c = a (dv (τ q)² / (1 + u p̂)² + e).
KALMAN_ORACLE_HD kdn_adjoint_affine kdn_diagonal_adjoint_step(float tau, float query, float d_readout, float key,
                                                              float a, float predicted, float u, float d_gain,
                                                              float innovation_variance, float innovation_adjoint,
                                                              float d_predicted) {
  const float e = kdn_diagonal_cotangent_terms(d_gain, key, innovation_variance, innovation_adjoint, d_predicted);
  return kdn_adjoint_step(a, kdn_step_denominator_squared(predicted, u),
                          kdn_readout_adjoint(d_readout, kdn_scaled_query_squared(tau, query)), e);
}

/// dq_i of the isotropic head: 2 dv b τ (τ q_i).
KALMAN_ORACLE_HD float kdn_isotropic_query_gradient(float readout_scale, float tau, float query) {
  return mul_rn(readout_scale, mul_rn(tau, mul_rn(tau, query)));
}

/// dg_i of the isotropic head: 2 α_i² ā / K (dα_i = 2 α_i ā / K, dg = dα α).
KALMAN_ORACLE_HD float kdn_isotropic_gate_gradient(float a_bar, float decay_squared, float channels) {
  return div_rn(mul_rn(add_rn(a_bar, a_bar), decay_squared), channels);
}

}  // namespace kalman_oracle::gpu
