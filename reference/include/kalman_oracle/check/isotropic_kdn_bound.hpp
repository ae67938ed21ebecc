// Per-element error bounds for the isotropic KDN (docs/math.md §5; docs/error-model.md, "Isotropic
// KDN: contraction and a-posteriori bounds"): the covariance b_t by the contraction bound of its
// Möbius leaves (check/contraction_bound.hpp), the gain β_t from the prediction b̂_t, and the memory
// by the delta rules' a-posteriori bound with β's relative error added to every write
// (check/delta_rule_bound.hpp), all along the exact trajectory.
//
// Per head, token t: a_t = mean_i α_{t,i}², b̂_t = a_t b_{t−1} + ω_t, u_t = μ‖k_t‖²/(K r_t),
// b_t = b̂_t/(1 + u_t b̂_t), β_t = b̂_t/(r_t + b̂_t‖k_t‖²). The map b_{t−1} ↦ b_t is the action of the
// leaf [[a, ω], [u a, 1 + u ω]] (det a), τ_t = (√(1 + uω) − √(uω))² (proofs/Birkhoff.v, iso_leaf_tau).
// Rounding counts in units of η = −ln(1 − u) (exp within 1 ulp counts 2):
//   a      α = exp(g) 2, squared 4, the square's rounding 1, the K-term positive sum K − 1, the
//          division by K 1: K + 5;
//   b̂      a b 1 more, + ω 1: within K + 7 of a_t b + ω for the computed b;
//   u      ‖k‖² K (positive terms), μ‖k‖² 1, K r 1, the quotient 1: K + 3;
//   step   b = b̂/(1 + u b̂): b̂ K + 7, the denominator (K + 3) + (K + 7) + 1 + 1, the quotient 1
//          (machine-checked for the reference's order: proofs/IsoStep.v, iso_step_fl_rel):
//          3K + 20 (the sequential recursion);
//   leaf   entries a (K + 5), ω (0), u a (2K + 9), 1 + u ω (K + 5): within 2K + 9 roundings, so the
//          action within 2(2K + 9) (machine-checked: proofs/IsoLeaf.v, iso_leaf_action); node 6 (a trace
//          or max-entry rescale included); apply 5.
// Each leaf's τ and errors are refined along the exact trajectory (check/kdn_leaf_local.hpp: the local
// Lipschitz factor and the action and step errors from â's K + 5 and û's K + 3, at most (K + 7)η and
// (K + 10)η; contraction_bound.hpp's trajectory_lane_log_bound).
// Then E(b_t) <= E_t (the largest over the covered orders), E(b̂_t) <= W(a b / b̂, E^prev_t + K + 6) + 1
// (b ↦ a b + ω moves in log by at most W(w, E) = ln(1 + w(e^E − 1)) when b moves within E, w the
// term's weight: contraction_bound.hpp's affine_log_error; at w = 1 the count E^prev + K + 7;
// E^prev from previous_log_bound), and E(β_t) <= W(r / (r + b̂‖k‖²), E(b̂_t)) + K + 3 (β = 1/(‖k‖² +
// r/b̂) reads b̂ through the same lemma; ‖k‖²'s K and the product 1 move the denominator at most as
// much, the sum and the quotient 1 + 1; at weight 1 machine-checked: proofs/KdnGain.v,
// isotropic_gain_rel). The readout variance
// τ² b_t ‖q_t‖²: τ 2 and τq 1 (3), its square 3 + 3 + 1, the K-term sum K − 1, the product with b 1:
// E_t + K + 7 (machine-checked for every summation order: proofs/KdnReadout.v,
// isotropic_readout_variance_default).
// The memory: KDA with the exact β_t, β‖k‖² = b̂‖k‖²/(r + b̂‖k‖²) < 1 (non-expansive), and β's relative
// error expm1(E(β_t)) in every write.
//
// Hypotheses (the result names the first failure): those of delta_rule_bound; every non-zero exact
// a, ω, u, b̂, b, β within [2^-100, 2^100]; E(β_t) <= 1; every covered scan's rescaled products in
// binary32's range.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "kalman_oracle/check/contraction_bound.hpp"
#include "kalman_oracle/check/delta_rule_bound.hpp"
#include "kalman_oracle/check/kdn_leaf_local.hpp"
#include "kalman_oracle/check/kla_bound.hpp"
#include "kalman_oracle/models/isotropic.hpp"

namespace kalman_oracle::check {

template <class T>
struct isotropic_kdn_error_bound {
  tensor<T> o;                     ///< [B, T, H, V]
  tensor<T> final_state;           ///< [B, H, K, V]
  tensor<T> final_covariance;      ///< [B, H]
  tensor<T> readout_variance;      ///< [B, T, H]
  tensor<T> predicted_covariance;  ///< [B, T, H]
  tensor<T> beta;                  ///< [B, T, H]
  std::string hypothesis_failure;
};

/// The isotropic leaf's rounding counts (see the top), in log units, for key size K.
inline mobius_recursion_rounding isotropic_kdn_rounding(double u, std::size_t K) {
  const double eta = log_rounding(u), k = static_cast<double>(K);
  return {2 * (2 * k + 9) * eta, 6 * eta, 5 * eta, (3 * k + 20) * eta};
}

/// The isotropic leaf's formation counts for the trajectory-local bound: â = fl(Â/K) within K + 5,
/// û within K + 3 (proofs/IsoLeaf.v, iso_leaf_fl_rel).
inline kdn_leaf_counts isotropic_kdn_counts(double eta, std::size_t K) {
  const double k = static_cast<double>(K);
  return {(k + 5) * eta, (k + 3) * eta, eta};
}

template <class T>
isotropic_kdn_error_bound<T> isotropic_kdn_bound(const isotropic_kdn_inputs<T>& inputs,
                                                 const float_arithmetic& arith = {}) {
  const kalman_oracle::detail::isotropic_kdn_problem<T> pb(inputs);
  const auto& d = pb.dims;
  const std::size_t B = d.batch, TT = d.tokens, H = d.heads, K = d.key_dim;
  const double eta = log_rounding(arith.unit_roundoff), k_count = static_cast<double>(K);
  const mobius_recursion_rounding rounding = isotropic_kdn_rounding(arith.unit_roundoff, K);
  const T channels(static_cast<long>(K)), lo(0x1p-100), hi(0x1p100);
  isotropic_kdn_error_bound<T> out{tensor<T>("o", {B, TT, H, d.value_dim}),
                                   tensor<T>("final_state", {B, H, K, d.value_dim}),
                                   tensor<T>("final_covariance", {B, H}),
                                   tensor<T>("readout_variance", {B, TT, H}),
                                   tensor<T>("predicted_covariance", {B, TT, H}),
                                   tensor<T>("beta", {B, TT, H}),
                                   {}};
  // The memory's inputs: KDA with the exact gains, and the gains' relative error bounds.
  fixed_gain_inputs<T> memory;
  memory.rule = fixed_gain_rule::kda;
  memory.q = inputs.q;
  memory.k = inputs.k;
  memory.v = inputs.v;
  memory.g = tensor<T>("g", {B, TT, H, K});
  memory.gates = gate_space::linear;  // the decays themselves, as the model computed them exactly
  memory.beta = tensor<T>("beta", {B, TT, H});
  memory.initial_state = tensor<T>("initial_state", {B, H, K, d.value_dim});
  memory.scale = pb.tau;
  tensor<T> beta_error("beta_relative_error", {B, TT, H});

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      const auto fail = [&](std::size_t t, const std::string& what) {
        if (out.hypothesis_failure.empty())
          out.hypothesis_failure = "batch " + std::to_string(b) + ", token " + std::to_string(t) + ", head " +
                                   std::to_string(h) + ": " + what;
      };
      const auto in_range = [&](std::size_t t, const T& x, const char* what) {
        if (x != 0 && (x < lo || x > hi)) fail(t, std::string(what) + " outside [2^-100, 2^100] (binary32 range)");
      };
      const std::vector<T> s0 = pb.initial_state(b, h);
      for (std::size_t i = 0; i < s0.size(); ++i) memory.initial_state->data()[(b * H + h) * s0.size() + i] = s0[i];
      const T mu = pb.mu(h);
      std::vector<bounded_leaf> leaves(TT);
      std::vector<kdn_trajectory_leaf> path(TT);
      std::vector<T> posterior(TT), predicted(TT), beta(TT), key2(TT), query2(TT), carried(TT), noise(TT), obs(TT);
      T covariance = pb.prior(b, h);
      for (std::size_t t = 0; t < TT; ++t) {
        T decay2_sum(0), k2(0), q2(0);
        for (std::size_t i = 0; i < K; ++i) {
          const T alpha = pb.decay(b, t, h, i);
          (*memory.g)(b, t, h, i) = alpha;
          decay2_sum += alpha * alpha;
          k2 += inputs.k(b, t, h, i) * inputs.k(b, t, h, i);
          q2 += inputs.q(b, t, h, i) * inputs.q(b, t, h, i);
        }
        const T a = decay2_sum / channels, omega = pb.omega(b, t, h), r = pb.r(b, t, h);
        const T u = mu * k2 / (channels * r);
        path[t] = {scalar_traits<T>::to_double(a), scalar_traits<T>::to_double(omega), scalar_traits<T>::to_double(u),
                   scalar_traits<T>::to_double(covariance)};
        carried[t] = a * covariance;
        noise[t] = omega;
        obs[t] = r;
        predicted[t] = a * covariance + omega;
        posterior[t] = predicted[t] / (T(1) + u * predicted[t]);
        beta[t] = predicted[t] / (r + predicted[t] * k2);
        key2[t] = k2;
        query2[t] = q2;
        (*memory.beta)(b, t, h) = beta[t];
        in_range(t, a, "a = mean alpha^2");
        in_range(t, omega, "omega");
        in_range(t, u, "u");
        in_range(t, predicted[t], "the predicted covariance");
        in_range(t, posterior[t], "the covariance");
        in_range(t, beta[t], "beta");
        const T z = u * omega, root = sqrt(T(1) + z) + sqrt(z);
        leaves[t] = {std::min(1.0, upward_double(T(1) / (root * root))), scalar_traits<T>::to_double(a),
                     scalar_traits<T>::to_double(omega), scalar_traits<T>::to_double(u * a),
                     scalar_traits<T>::to_double(T(1) + z)};
        covariance = posterior[t];
      }
      bool products_in_range = true;
      const auto bounds = trajectory_lane_log_bound(leaves, rounding, products_in_range,
                                                    kdn_trajectory_factors(path, isotropic_kdn_counts(eta, K)));
      const std::vector<double>& now = bounds.now;
      const std::vector<double>& previous = bounds.previous;
      if (!products_in_range)
        fail(0,
             "a covered scan's rescaled product leaves binary32's normal range (a non-zero entry outside "
             "[2^-100, 2^50] or a product term below 2^-120 after rescaling)");
      for (std::size_t t = 0; t < TT; ++t) {
        // b̂ = fl(fl(â b) + ω): the product's term a b within E^prev + (K + 5)η (â) + η, through the
        // weight w = a b / b̂ of b̂ = a b + ω, then the sum's rounding. β = b̂ / (r + b̂ N) = 1 / (N + r / b̂)
        // reads b̂ with weight r / (r + b̂ N), N̂ and the product (K + 1)η at most once, the sum and
        // the quotient 2 (docs/error-model.md, "Isotropic KDN"; affine_log_error).
        const double e_predicted = affine_log_error(predicted[t] > 0 ? upward_double(carried[t] / predicted[t]) : 1.0,
                                                    previous[t] + (k_count + 6) * eta) +
                                   eta;
        const double e_beta = affine_log_error(upward_double(obs[t] / (obs[t] + predicted[t] * key2[t])), e_predicted) +
                              (k_count + 3) * eta;
        if (e_beta > 1) fail(t, "the gain's log-error bound exceeds 1");
        out.predicted_covariance(b, t, h) = T(std::expm1(e_predicted) * bound_inflation) * predicted[t];
        out.beta(b, t, h) = T(std::expm1(e_beta) * bound_inflation) * beta[t];
        beta_error(b, t, h) = T(std::expm1(e_beta) * bound_inflation);
        const T tau2 = pb.tau * pb.tau;
        out.readout_variance(b, t, h) =
            T(std::expm1(now[t] + (k_count + 7) * eta) * bound_inflation) * posterior[t] * tau2 * query2[t];
      }
      out.final_covariance(b, h) = TT == 0 ? T(0) : T(std::expm1(now[TT - 1]) * bound_inflation) * posterior[TT - 1];
    }
  auto mem = delta_rule_bound(memory, arith, &beta_error);
  out.o = std::move(mem.o);
  out.final_state = std::move(mem.final_state);
  if (out.hypothesis_failure.empty()) out.hypothesis_failure = std::move(mem.hypothesis_failure);
  return out;
}

}  // namespace kalman_oracle::check
