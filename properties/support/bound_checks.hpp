// What the per-element bound properties (properties/check_*_bound.cpp) share: inputs drawn as
// binary32 values (so a binary32 run reads them exactly), their conversion to any scalar type, and
// the element-by-element comparison of a run with the exact values against a bound.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include <rapidcheck.h>

#include "kalman_oracle/check/contraction_bound.hpp"
#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/scalar/types.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle::testing {

/// Uniform on [lo, hi] from 53 random bits, rounded to binary32 (the same on every standard library).
inline float uniform_float(std::mt19937_64& rng, double lo, double hi) {
  return static_cast<float>(lo + (hi - lo) * std::ldexp(static_cast<double>(rng() >> 11), -53));
}

/// A key of K entries drawn on [-1, 1], normalised to length `length` in binary64, rounded to binary32.
inline std::vector<float> float_key(std::mt19937_64& rng, std::size_t K, double length) {
  std::vector<double> key(K);
  double norm2 = 0;
  for (auto& x : key) {
    x = uniform_float(rng, -1, 1);
    norm2 += x * x;
  }
  std::vector<float> out;
  for (double x : key) out.push_back(norm2 > 0 ? static_cast<float>(x / std::sqrt(norm2) * length) : 0.f);
  return out;
}

/// Binary32 values in the scalar type T (exact for every type the properties use).
template <class T>
std::vector<T> floats_as(const std::vector<float>& xs) {
  std::vector<T> out;
  out.reserve(xs.size());
  for (float x : xs) out.push_back(scalar_traits<T>::from_double(x));
  return out;
}

/// A covered scan order drawn by RapidCheck among the untiled ones (fold, trees, chunked 16/32/64/128):
/// the schedules the models' parallel forms run.
inline const check::covered_scan& draw_untiled_scan() {
  const auto& scans = check::covered_scans();
  std::vector<std::size_t> untiled;
  for (std::size_t i = 0; i < scans.size(); ++i)
    if (!scans[i].tiled) untiled.push_back(i);
  return scans[*rc::gen::elementOf(untiled)];
}

/// Every element of `got` within `factor` times its bound of the exact value.
template <class F>
void assert_within_bound(const tensor<F>& got, const tensor<mpfr_real>& exact, const tensor<mpfr_real>& bound,
                         double factor = 1) {
  for (std::size_t i = 0; i < got.size(); ++i)
    RC_ASSERT(abs(mpfr_real(static_cast<double>(got.data()[i])) - exact.data()[i]) <=
              bound.data()[i] * mpfr_real(factor));
}

/// A memory model's o and final_state from binary32 and binary64 runs within their per-element bound
/// (u = 2^-24; binary64 within 2^-29 of it: the bounds divided by u grow with u).
template <class Single, class Double, class Exact, class Bound>
void assert_memory_outputs_within_bound(const Single& single, const Double& dbl, const Exact& exact,
                                        const Bound& bound) {
  assert_within_bound(single.o, exact.o, bound.o, 1.0);
  assert_within_bound(single.final_state, exact.final_state, bound.final_state, 1.0);
  assert_within_bound(dbl.o, exact.o, bound.o, 0x1p-29);
  assert_within_bound(dbl.final_state, exact.final_state, bound.final_state, 0x1p-29);
}

/// Every gradient of a binary32 adjoint within twice its first-order running error bound (u = 2^-24;
/// docs/error-model.md, "Gradients: first-order running error"): `exact` at 256 bits, `first_order`
/// the same adjoint over running_error<MPFR>, all three by gradient name. The bound's model has no
/// underflow (the fixtures say so in its hypotheses); strong decays drive some gradients into
/// binary32's subnormal range, so each element is allowed 2^-120 absolute besides (64 times binary32's
/// smallest normal number; nothing else is loosened).
template <class Gradients, class ExactGradients, class FirstOrderGradients>
void assert_within_first_order_bound(const Gradients& got, const ExactGradients& exact,
                                     const FirstOrderGradients& first_order) {
  for (const auto& g : got.items()) {
    const auto& x = exact.at(g.name());
    const auto& e = first_order.at(g.name());
    tensor<mpfr_real> bound(g.name(), e.shape());
    for (std::size_t i = 0; i < e.size(); ++i)
      bound.data()[i] = e.data()[i].error() * mpfr_real(0x1p-23) + mpfr_real(0x1p-120);
    assert_within_bound(g, x, bound);
  }
}

}  // namespace kalman_oracle::testing
