// Discretisation of the Ornstein–Uhlenbeck prior of KLA (docs/math.md §6).
//
// dx = a x dt + sqrt(p) dW with rate a <= 0 and diffusion p >= 0, over a step Delta > 0:
//   ā = exp(a Delta),  p̄ = p (-expm1(2 a Delta)) / (2 |a|)   (limit p Delta at a = 0).
// expm1, never 1 - exp: for |a Delta| small, 1 - exp(2 a Delta) loses about -log2|2 a Delta| bits
// to cancellation. The step is exact: two steps of Delta/2 compose to one step of Delta
// (ou_compose; properties/ou_discretisation_exact.cpp). The zero-order-hold variant p̄ = p Delta
// is not exact in that sense; it is provided because some implementations use it.
#pragma once

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

/// One discrete step x' = decay x + noise, Var(noise) = process_noise.
template <class T>
struct ou_step {
  T decay;          // ā
  T process_noise;  // p̄
};

namespace detail {
template <class T>
void check_ou_arguments(const char* who, const T& rate, const T& step, const T& diffusion) {
  std::ostringstream why;
  why << who << ": ";
  if (!(rate <= 0))
    why << "rate a must be <= 0 (a stable OU prior), got " << rate;
  else if (!(step > 0))
    why << "step Delta must be > 0, got " << step;
  else if (!(diffusion >= 0))
    why << "diffusion p must be >= 0, got " << diffusion;
  else
    return;
  throw std::invalid_argument(why.str());
}
}  // namespace detail

/// Exact discretisation of the OU prior (docs/math.md §6).
template <class T>
ou_step<T> ou_discretise(const T& rate, const T& step, const T& diffusion) {
  using std::exp;
  using std::expm1;
  detail::check_ou_arguments("ou_discretise", rate, step, diffusion);
  if (rate == 0) return {T(1), diffusion * step};
  const T two_a_delta = T(2) * rate * step;
  const T growth = KALMAN_ORACLE_MUTANT(ou_one_minus_exp, T(-expm1(two_a_delta)), T(T(1) - exp(two_a_delta)));
  const T denominator = KALMAN_ORACLE_MUTANT(ou_missing_half, T(-2) * rate, T(-rate));
  return {exp(rate * step), diffusion * growth / denominator};
}

/// Zero-order-hold variant: ā = exp(a Delta), p̄ = p Delta.
template <class T>
ou_step<T> ou_discretise_zero_order_hold(const T& rate, const T& step, const T& diffusion) {
  using std::exp;
  detail::check_ou_arguments("ou_discretise_zero_order_hold", rate, step, diffusion);
  return {exp(rate * step), diffusion * step};
}

/// Two steps in sequence, `earlier` then `later`: the means multiply, the noise of the earlier
/// step is propagated through the later decay: (ā₂ ā₁, ā₂² p̄₁ + p̄₂).
template <class T>
ou_step<T> ou_compose(const ou_step<T>& later, const ou_step<T>& earlier) {
  return {later.decay * earlier.decay, later.decay * later.decay * earlier.process_noise + later.process_noise};
}

}  // namespace kalman_oracle
