// The leaves of docs/math.md §8, built from model parameters. Each is the Möbius (or affine) map of one
// token's step of a scalar recursion of §4–§6; all Möbius entries are >= 0, so products of leaves
// involve no cancellation (§8 fact 4). algebra/recursion_steps.hpp writes the same steps directly,
// and properties/leaves_reproduce_steps.cpp checks, exactly over rationals, that they agree.
#pragma once

#include <span>
#include <stdexcept>

#include "kalman_oracle/algebra/affine.hpp"
#include "kalman_oracle/algebra/mobius.hpp"
#include "kalman_oracle/detail/mutant.hpp"

namespace kalman_oracle {

// ---- KLA (§6): one scalar filter per (channel m, state s) -------------------------------------

/// The observation terms of one KLA element: phi = Lambda k^2 (precision gained), rho = v Lambda k.
template <class T>
struct kla_observation {
  T phi, rho;
};

template <class T>
kla_observation<T> kla_observe(const T& value_precision, const T& key, const T& value) {
  return {value_precision * key * key, value * value_precision * key};
}

/// Precision leaf [[1 + p̄ phi, ā² phi], [p̄, ā²]] (det ā²): lambda_t = lambda_{t-1} / (ā² +
/// p̄ lambda_{t-1}) + phi.
template <class T>
mobius<T> kla_precision_leaf(const T& decay, const T& process_noise, const T& phi) {
  const T decay2 = KALMAN_ORACLE_MUTANT(kla_leaf_wrong_decay, decay * decay, decay);
  return {T(1) + process_noise * phi, decay2 * phi, process_noise, decay2};
}

/// Information-mean leaf: eta_t = alpha_t eta_{t-1} + rho_t with alpha_t = ā / (ā² + p̄ lambda_{t-1}).
/// It needs lambda_{t-1}, so the mean scan runs after the precision scan (§6, §8 fact 5).
template <class T>
affine<T> kla_mean_leaf(const T& decay, const T& process_noise, const T& previous_precision, const T& rho) {
  return {decay / (decay * decay + process_noise * previous_precision), rho};
}

// ---- Diagonal KDN (§4): one scalar covariance recursion per key channel i -----------------------

/// Information added by the write: u = mu k_i^2 / r.
template <class T>
T diag_kdn_information(const T& key, const T& observation_noise, const T& information_scale) {
  return information_scale * key * key / observation_noise;
}

/// Covariance leaf [[alpha², omega], [u alpha², 1 + u omega]] (det alpha²): p_t = p̂ / (1 + u p̂),
/// p̂ = alpha² p_{t-1} + omega.
template <class T>
mobius<T> diag_kdn_covariance_leaf(const T& decay, const T& process_noise, const T& key, const T& observation_noise,
                                   const T& information_scale) {
  const T u = diag_kdn_information(key, observation_noise, information_scale);
  const T decay2 = decay * decay;
  return {decay2, process_noise, KALMAN_ORACLE_MUTANT(diag_kdn_leaf_missing_u, u * decay2, decay2),
          T(1) + u * process_noise};
}

/// The same map acting on the precision 1/p: [[1 + u omega, u alpha²], [omega, alpha²]].
template <class T>
mobius<T> diag_kdn_precision_leaf(const T& decay, const T& process_noise, const T& key, const T& observation_noise,
                                  const T& information_scale) {
  const T u = diag_kdn_information(key, observation_noise, information_scale);
  const T decay2 = decay * decay;
  return {T(1) + u * process_noise, u * decay2, process_noise, decay2};
}

// ---- Isotropic KDN (§5): one scalar b per head --------------------------------------------------

/// a_t = mean_i alpha_i²: the trace projection of diag(alpha) b I diag(alpha).
template <class T>
T iso_kdn_decay(std::span<const T> decay) {
  if (decay.empty()) throw std::invalid_argument("iso_kdn_decay: decay (alpha) has no channels (K = 0)");
  T sum(0);
  for (const T& alpha : decay) sum += KALMAN_ORACLE_MUTANT(iso_kdn_leaf_wrong_trace, alpha * alpha, alpha);
  return sum / T(static_cast<long>(decay.size()));
}

/// u_t = mu ||k||² / (K r).
template <class T>
T iso_kdn_information(std::span<const T> key, const T& observation_noise, const T& information_scale) {
  if (key.empty()) throw std::invalid_argument("iso_kdn_information: key has no channels (K = 0)");
  T norm2(0);
  for (const T& k : key) norm2 += k * k;
  return information_scale * norm2 / (T(static_cast<long>(key.size())) * observation_noise);
}

/// Covariance leaf [[a, omega], [u a, 1 + u omega]]: b_t = b̂ / (1 + u b̂), b̂ = a b_{t-1} + omega.
template <class T>
mobius<T> iso_kdn_covariance_leaf(std::span<const T> decay, const T& process_noise, std::span<const T> key,
                                  const T& observation_noise, const T& information_scale) {
  const T a = iso_kdn_decay(decay);
  const T u = iso_kdn_information(key, observation_noise, information_scale);
  return {a, process_noise, u * a, T(1) + u * process_noise};
}

}  // namespace kalman_oracle
