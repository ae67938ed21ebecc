// One step of each scalar recursion of docs/math.md §4–§6, written exactly as the spec states it,
// without the Möbius form. These are the statements the leaves (algebra/leaves.hpp) must
// reproduce, and the sequential forms the models are built from.
#pragma once

#include <span>
#include <stdexcept>

namespace kalman_oracle {

/// KLA precision (§6): den = ā² + p̄ lambda; lambda_t = lambda / den + phi.
template <class T>
T kla_precision_step(const T& precision, const T& decay, const T& process_noise, const T& phi) {
  const T den = decay * decay + process_noise * precision;
  return precision / den + phi;
}

/// KLA information mean (§6): eta_t = (ā / den) eta + rho, den from the previous precision.
template <class T>
T kla_mean_step(const T& mean, const T& previous_precision, const T& decay, const T& process_noise, const T& rho) {
  const T den = decay * decay + process_noise * previous_precision;
  return decay / den * mean + rho;
}

/// Diagonal KDN covariance of one channel (§4): p̂ = alpha² p + omega; 1/p_t = 1/p̂ + mu k² / r.
template <class T>
T diag_kdn_covariance_step(const T& covariance, const T& decay, const T& process_noise, const T& key,
                           const T& observation_noise, const T& information_scale) {
  const T predicted = decay * decay * covariance + process_noise;
  const T information = information_scale * key * key / observation_noise;
  return predicted / (T(1) + information * predicted);
}

/// Isotropic KDN (§5): a = mean alpha², b̂ = a b + omega, u = mu ||k||² / (K r), b_t = b̂ / (1 + u b̂).
template <class T>
T iso_kdn_covariance_step(const T& covariance, std::span<const T> decay, const T& process_noise, std::span<const T> key,
                          const T& observation_noise, const T& information_scale) {
  if (decay.empty() || decay.size() != key.size())
    throw std::invalid_argument("iso_kdn_covariance_step: decay and key must have the same K >= 1 channels");
  T decay2_sum(0), key2_sum(0);
  for (std::size_t i = 0; i < decay.size(); ++i) {
    decay2_sum += decay[i] * decay[i];
    key2_sum += key[i] * key[i];
  }
  const T channels(static_cast<long>(decay.size()));
  const T predicted = decay2_sum / channels * covariance + process_noise;
  const T information = information_scale * key2_sum / (channels * observation_noise);
  return predicted / (T(1) + information * predicted);
}

}  // namespace kalman_oracle
