// Per-element error bounds for the diagonal KDN (docs/math.md §4; docs/error-model.md, "Diagonal KDN:
// contraction and a-posteriori bounds"): each channel's covariance by the contraction bound of its
// Möbius leaves (check/contraction_bound.hpp), the gain κ_t from the predictions p̂_t, and the memory
// by the two-key rule's a-posteriori bound (local roundings as for the delta rules, with κ's relative
// error in every write) propagated through the exact steps by check/two_key_propagation.hpp, all
// along the exact trajectory.
//
// Per head, token t, channel i: a = α_i², p̂_i = a p_i + ω_i, u_i = μ k_i²/r, p_i ← p̂_i/(1 + u_i p̂_i),
// κ_i = p̂_i k_i/(r + Σ_j p̂_j k_j²). The map p_{t−1,i} ↦ p_{t,i} is the action of the leaf
// [[a, ω], [u a, 1 + u ω]] (det a), τ = (√(1 + uω) − √(uω))² (proofs/Birkhoff.v, the KDN leaf).
// Rounding counts in units of η = −ln(1 − u) (exp within 1 ulp counts 2):
//   a      exp 2, squared 4, the square's rounding 1: 5;     u      k_i² 1, μ k_i² 1, / r 1: 3;
//   p̂      a p 1 more, + ω 1: within 7 of a p + ω for the computed p;
//   step   p̂ 7, the denominator u (3) + p̂ (7) + product 1 + sum 1, the quotient 1: 20 (machine-checked
//          for the reference's order: proofs/KdnStep.v, kdn_step_fl_rel, kdn_sequential_rounding);
//   leaf   entries a (5), ω (0), u a (9), 1 + u ω (5): within 9, so the action within 18 (machine-checked:
//          proofs/KdnLeaf.v, kdn_leaf_fl_within); node 6;
//          apply 5.
// Each leaf's τ and errors are refined along the exact trajectory (check/kdn_leaf_local.hpp: the local
// Lipschitz factor and the action and step errors from â's 5 and û's 3, at most 7η and 10η;
// contraction_bound.hpp's trajectory_lane_log_bound).
// Then E(p_t,i) <= E_t,i (the largest over the covered orders), E(p̂_t,i) <= W(a p / p̂, E^prev_t,i + 6)
// + 1 (W(w, E) = ln(1 + w(e^E − 1)): how far a p + ω moves when p moves within E, w the term's weight,
// contraction_bound.hpp's affine_log_error; at w = 1 the count E^prev + 7), E(κ_t,i) <= E(p̂_t,i) +
// W(Σ p̂ k² / (r + Σ p̂ k²), max_j E(p̂_t,j) + 2) + K + 2 (numerator 1; the denominator's terms 2 each
// past p̂_j, read through their weight in r + Σ, K additions of positive terms; the quotient 1; at
// weight 1, E(p̂_i) + max_j E(p̂_j) + K + 4, machine-checked for every summation order:
// proofs/KdnGain.v, diagonal_gain_rel), the readout variance τ² Σ_i q_i² p_i:
// max_i E_t,i + K + 7 (as the isotropic model's; machine-checked for every summation order:
// proofs/KdnReadout.v, diagonal_readout_variance_default).
// The memory: S_t = (I − κ_t k_tᵀ) D_t S_{t−1} + κ_t v_tᵀ computed as fla's order with the gain κ̂:
// p = fl(α̂ ⊙ s), ŵ = fl(Σ k_i p_i), ĉ = fl(v_j − ŵ), s_i ← fl(p_i + fl(κ̂_i ĉ)); its local rounding
// ℓ = (I − κkᵀ)ε1 − κε2 + diag(κ)φ(v_j − ŵ) + η + δ⊙(p̂ + write), |φ_i| <= (1 + γ2)(1 + e_κ) − 1:
//     L = ‖I − κkᵀ‖₂‖ε1‖ + ‖κ‖|ε2| + ‖κ‖ w R + √K η + u(‖p̂‖ + ‖κ‖(1 + w)R + √K η),
// ε1, ε2, R and ‖p̂‖ as the delta rules' (check/delta_rule_bound.hpp, decayed_column_bound).
//
// Hypotheses (the result names the first failure): decays in [0, 1]; every non-zero exact a, ω, u,
// p̂, p, κ, p̂_j k_j² and (τ q_i)² p_i within [2^-100, 2^100]; E(κ) <= 1; every covered scan's
// rescaled products in binary32's range; no exact state entry above largest_finite / 2.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kalman_oracle/check/contraction_bound.hpp"
#include "kalman_oracle/check/delta_rule_bound.hpp"
#include "kalman_oracle/check/kdn_leaf_local.hpp"
#include "kalman_oracle/check/kla_bound.hpp"
#include "kalman_oracle/check/two_key_propagation.hpp"
#include "kalman_oracle/models/diagonal.hpp"

namespace kalman_oracle::check {

template <class T>
struct diagonal_kdn_error_bound {
  tensor<T> o;                     ///< [B, T, H, V]
  tensor<T> final_state;           ///< [B, H, K, V]
  tensor<T> final_covariance;      ///< [B, H, K]
  tensor<T> readout_variance;      ///< [B, T, H]
  tensor<T> predicted_covariance;  ///< [B, T, H, K]
  tensor<T> gain;                  ///< [B, T, H, K]
  std::string hypothesis_failure;
};

/// The diagonal leaf's rounding counts (see the top), in log units.
inline mobius_recursion_rounding diagonal_kdn_rounding(double u) {
  const double eta = log_rounding(u);
  return {18 * eta, 6 * eta, 5 * eta, 20 * eta};
}

/// The diagonal leaf's formation counts for the trajectory-local bound: â = fl(α̂ α̂) within 5, û within 3
/// (proofs/KdnLeaf.v).
inline kdn_leaf_counts diagonal_kdn_counts(double eta) { return {5 * eta, 3 * eta, eta}; }

template <class T>
diagonal_kdn_error_bound<T> diagonal_kdn_bound(const diagonal_kdn_inputs<T>& inputs,
                                               const float_arithmetic& arith = {}) {
  using namespace detail::delta_bound;
  const kalman_oracle::detail::diagonal_kdn_problem<T> pb(inputs);
  const auto& d = pb.dims;
  const std::size_t B = d.batch, TT = d.tokens, H = d.heads, K = d.key_dim, V = d.value_dim;
  const double eta_log = log_rounding(arith.unit_roundoff), k_count = static_cast<double>(K);
  const mobius_recursion_rounding rounding = diagonal_kdn_rounding(arith.unit_roundoff);
  const step_constants<T> c(arith, K);
  const T lo(0x1p-100), hi(0x1p100), huge = T(arith.largest_finite) / T(2);
  diagonal_kdn_error_bound<T> out{tensor<T>("o", {B, TT, H, V}),
                                  tensor<T>("final_state", {B, H, K, V}),
                                  tensor<T>("final_covariance", {B, H, K}),
                                  tensor<T>("readout_variance", {B, TT, H}),
                                  tensor<T>("predicted_covariance", {B, TT, H, K}),
                                  tensor<T>("gain", {B, TT, H, K}),
                                  {}};

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      const auto fail = [&](std::size_t t, const std::string& what) {
        if (out.hypothesis_failure.empty())
          out.hypothesis_failure = "batch " + std::to_string(b) + ", token " + std::to_string(t) + ", head " +
                                   std::to_string(h) + ": " + what;
      };
      const auto in_range = [&](std::size_t t, const T& x, const char* what) {
        if (x != 0 && (abs(x) < lo || abs(x) > hi))
          fail(t, std::string(what) + " outside [2^-100, 2^100] (binary32 range)");
      };
      const T mu = pb.mu(h);
      // The exact covariance path, channel by channel: leaves, p̂, p, κ.
      std::vector<std::vector<bounded_leaf>> leaves(K, std::vector<bounded_leaf>(TT));
      std::vector<std::vector<kdn_trajectory_leaf>> paths(K, std::vector<kdn_trajectory_leaf>(TT));
      std::vector<T> predicted(TT * K), posterior(TT * K), gain(TT * K), covariance(K), carried(TT * K),
          innovation_of(TT), noise_of(TT);
      for (std::size_t i = 0; i < K; ++i) covariance[i] = pb.prior(b, h, i);
      for (std::size_t t = 0; t < TT; ++t) {
        const T r = pb.r(b, t, h);
        T innovation = r;
        for (std::size_t i = 0; i < K; ++i) {
          const T alpha = pb.decay(b, t, h, i), a = alpha * alpha, omega = pb.omega(b, t, h, i);
          const T k = inputs.k(b, t, h, i), u = mu * k * k / r;
          if (alpha < 0 || alpha > 1) fail(t, "decay outside [0, 1]");
          paths[i][t] = {scalar_traits<T>::to_double(a), scalar_traits<T>::to_double(omega),
                         scalar_traits<T>::to_double(u), scalar_traits<T>::to_double(covariance[i])};
          carried[t * K + i] = a * covariance[i];
          predicted[t * K + i] = a * covariance[i] + omega;
          posterior[t * K + i] = predicted[t * K + i] / (T(1) + u * predicted[t * K + i]);
          innovation += predicted[t * K + i] * k * k;
          in_range(t, a, "a = alpha^2");
          in_range(t, omega, "omega");
          in_range(t, u, "u");
          in_range(t, predicted[t * K + i], "the predicted covariance");
          in_range(t, posterior[t * K + i], "the covariance");
          in_range(t, predicted[t * K + i] * k * k, "a term p_hat_j k_j^2 of the gain's denominator");
          const T z = u * omega, root = sqrt(T(1) + z) + sqrt(z);
          leaves[i][t] = {std::min(1.0, upward_double(T(1) / (root * root))), scalar_traits<T>::to_double(a),
                          scalar_traits<T>::to_double(omega), scalar_traits<T>::to_double(u * a),
                          scalar_traits<T>::to_double(T(1) + z)};
          covariance[i] = posterior[t * K + i];
        }
        innovation_of[t] = innovation;
        noise_of[t] = r;
        for (std::size_t i = 0; i < K; ++i) {
          gain[t * K + i] = predicted[t * K + i] * inputs.k(b, t, h, i) / innovation;
          in_range(t, gain[t * K + i], "the gain");
        }
      }
      // Log-error bounds per channel over the covered orders.
      std::vector<std::vector<double>> now(K), previous(K);
      bool products_in_range = true;
      for (std::size_t i = 0; i < K; ++i) {
        auto bounds =
            trajectory_lane_log_bound(leaves[i], rounding, products_in_range,
                                      kdn_trajectory_factors(std::move(paths[i]), diagonal_kdn_counts(eta_log)));
        now[i] = std::move(bounds.now);
        previous[i] = std::move(bounds.previous);
      }
      if (!products_in_range)
        fail(0,
             "a covered scan's rescaled product leaves binary32's normal range (a non-zero entry outside "
             "[2^-100, 2^50] or a product term below 2^-120 after rescaling)");

      // The memory along the exact trajectory, with the covariance path's bounds per token.
      std::vector<T> S = pb.initial_state(b, h), alpha(K), key(K), kappa(K), query(K), decayed(K), local(V);
      two_key_propagation<T> propagation(K, V);
      for (std::size_t t = 0; t < TT; ++t) {
        // p̂_i = fl(fl(â_i p_i) + ω_i): the term a p within E^prev + 5η (â) + η, through its weight
        // a p / p̂ (affine_log_error), then the sum's rounding. The gain's denominator r + Σ_j
        // fl(fl(p̂_j k_j) k_j) reads every p̂_j, each term within E_max + 2η, through the weight
        // Σ p̂ k² / (r + Σ p̂ k²), then K additions; the numerator 1, the quotient 1
        // (docs/error-model.md, "Diagonal KDN"; at weight 1 the counts of proofs/KdnGain.v).
        std::vector<double> e_predicted(K);
        double e_predicted_max = 0, e_now_max = 0;
        for (std::size_t i = 0; i < K; ++i) {
          const T& p_hat = predicted[t * K + i];
          e_predicted[i] = affine_log_error(p_hat > 0 ? upward_double(carried[t * K + i] / p_hat) : 1.0,
                                            previous[i][t] + 6 * eta_log) +
                           eta_log;
          e_predicted_max = std::max(e_predicted_max, e_predicted[i]);
          e_now_max = std::max(e_now_max, now[i][t]);
        }
        const double e_denominator =
            affine_log_error(upward_double((innovation_of[t] - noise_of[t]) / innovation_of[t]),
                             e_predicted_max + 2 * eta_log) +
            k_count * eta_log;
        T gain_error(0), k2(0), k1(0), q2(0), kappa2(0), dmax(0), variance(0);
        const T tau2 = pb.tau * pb.tau;
        for (std::size_t i = 0; i < K; ++i) {
          const double e_gain = e_predicted[i] + e_denominator + 2 * eta_log;
          if (e_gain > 1) fail(t, "the gain's log-error bound exceeds 1");
          out.predicted_covariance(b, t, h, i) = T(std::expm1(e_predicted[i]) * bound_inflation) * predicted[t * K + i];
          out.gain(b, t, h, i) = T(std::expm1(e_gain) * bound_inflation) * abs(gain[t * K + i]);
          gain_error = std::max(gain_error, T(std::expm1(e_gain) * bound_inflation));
          alpha[i] = pb.decay(b, t, h, i);
          key[i] = inputs.k(b, t, h, i);
          kappa[i] = gain[t * K + i];
          query[i] = inputs.q(b, t, h, i);
          k2 += key[i] * key[i];
          k1 += abs(key[i]);
          q2 += query[i] * query[i];
          kappa2 += kappa[i] * kappa[i];
          dmax = std::max(dmax, alpha[i]);
          const T term = tau2 * query[i] * query[i] * posterior[t * K + i];
          in_range(t, term, "a term (tau q_i)^2 p_i of the readout variance");
          variance += term;
        }
        out.readout_variance(b, t, h) = T(std::expm1(e_now_max + (k_count + 7) * eta_log) * bound_inflation) * variance;
        const T knorm = sqrt(k2), qnorm = sqrt(q2), kappa_norm = sqrt(kappa2);
        const T erase = erase_write_norm(kappa, key);
        const T write_factor = (T(1) + c.g2) * (T(1) + gain_error) - T(1);
        for (std::size_t j = 0; j < V; ++j) {
          const auto [pn2, sn2, sigma, w] = decay_column(S, V, j, alpha, key, decayed);
          const T r = inputs.v(b, t, h, j) - w;
          const auto [eps1, p_hat_norm, eps2, residual] =
              decayed_column_bound(c, true, dmax, propagation.bound(j), sqrt(pn2), sqrt(sn2), sigma, r, knorm, k1);
          local[j] = erase * eps1 + kappa_norm * eps2 + kappa_norm * write_factor * residual + c.sqrtK * c.eta +
                     c.u * (p_hat_norm + kappa_norm * (T(1) + write_factor) * residual + c.sqrtK * c.eta);
          for (std::size_t i = 0; i < K; ++i) {
            S[i * V + j] = decayed[i] + kappa[i] * r;
            if (abs(S[i * V + j]) > huge) fail(t, "a state entry exceeds largest_finite / 2 (overflow)");
          }
        }
        propagation.step(alpha, key, kappa, local);
        for (std::size_t j = 0; j < V; ++j) {
          T q_abs_s(0), s_abs(0);
          for (std::size_t i = 0; i < K; ++i) {
            q_abs_s += abs(query[i] * S[i * V + j]);
            s_abs += abs(S[i * V + j]);
          }
          out.o(b, t, h, j) = read_bound(c, pb.tau, qnorm, q_abs_s, s_abs, propagation.bound(j));
        }
      }
      for (std::size_t i = 0; i < K; ++i) {
        out.final_covariance(b, h, i) =
            TT == 0 ? T(0) : T(std::expm1(now[i][TT - 1]) * bound_inflation) * posterior[(TT - 1) * K + i];
        for (std::size_t j = 0; j < V; ++j) out.final_state(b, h, i, j) = propagation.bound(j);
      }
    }
  return out;
}

}  // namespace kalman_oracle::check
