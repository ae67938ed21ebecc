// Generators shared by the gradient problems (properties/support/grad_problems/*.hpp): tensors of
// generated values, parameters in shapes that broadcast to a full shape, the query scale, small
// exact rationals and decays, and doubles with 40-bit fractions (exact in MPFR).
#pragma once

#include <rapidcheck.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/scalar/types.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle::testing {

template <class T>
inline tensor<T> gen_tensor(const std::string& name, const shape_t& shape, const rc::Gen<T>& gen) {
  return tensor<T>(name, shape, *rc::gen::container<std::vector<T>>(element_count(shape), gen));
}

/// The sizes of the multi-head models (fixed gain, KDN, dense): batch B, tokens T, heads H, key
/// dimension K, value dimension V.
struct head_sizes {
  std::size_t batch, tokens, heads, key_dim, value_dim;
};
/// B, H ∈ {1, 2} (so that broadcasting over them is exercised), T ∈ [1, 8], K ∈ [1, max_key],
/// V ∈ [1, max_value].
inline head_sizes gen_head_sizes(std::size_t max_key, std::size_t max_value) {
  return {*rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, 9),
          *rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, max_key + 1),
          *rc::gen::inRange<std::size_t>(1, max_value + 1)};
}

/// A shape that broadcasts to `full`: each axis kept or 1, leading 1s sometimes dropped.
inline shape_t gen_broadcast_shape(const shape_t& full) {
  const auto keep = *rc::gen::container<std::vector<bool>>(full.size(), rc::gen::arbitrary<bool>());
  shape_t s(full.size());
  for (std::size_t i = 0; i < full.size(); ++i) s[i] = keep[i] ? full[i] : 1;
  std::size_t lead = 0;
  while (lead + 1 < s.size() && s[lead] == 1) ++lead;
  s.erase(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(*rc::gen::inRange<std::size_t>(0, lead + 1)));
  return s;
}

/// A parameter in a random shape that broadcasts to `full` (the models accept every such shape, and
/// the adjoints sum the gradient back over the broadcast axes: docs/gradients.md).
template <class T>
tensor<T> gen_broadcast_tensor(const std::string& name, const shape_t& full, const rc::Gen<T>& gen) {
  return gen_tensor<T>(name, gen_broadcast_shape(full), gen);
}

/// An optional parameter (a prior, μ, S_0): absent half the time, so that the default's gradient
/// path is covered too; else a broadcast tensor.
template <class T>
std::optional<tensor<T>> gen_optional_broadcast_tensor(const std::string& name, const shape_t& full,
                                                       const rc::Gen<T>& gen) {
  if (!*rc::gen::arbitrary<bool>()) return std::nullopt;
  return gen_broadcast_tensor<T>(name, full, gen);
}

/// The query scale τ: drawn from `given`, or absent for the default 1/√K, which is rational only
/// when K is a perfect square, so exact scalars take the default only there.
template <class T>
std::optional<T> gen_query_scale(std::size_t key_dim, const rc::Gen<T>& given) {
  std::size_t root = 0;
  while ((root + 1) * (root + 1) <= key_dim) ++root;
  const bool default_representable = !scalar_traits<T>::is_exact || root * root == key_dim;
  if (default_representable && *rc::gen::arbitrary<bool>()) return std::nullopt;
  return *given;
}

/// Small exact rationals n/d, n in [lo, hi], d in {1, 2, 3, 4, 8}.
inline rc::Gen<rational> gen_small_rational(long lo, long hi) {
  return rc::gen::map(rc::gen::pair(rc::gen::inRange<long>(lo, hi + 1), rc::gen::element<long>(1, 2, 3, 4, 8)),
                      [](std::pair<long, long> nd) { return rational(nd.first) / rational(nd.second); });
}
/// A decay in (0, 1]: exactly 1, or x / (1 + x).
inline rc::Gen<rational> gen_rational_decay() {
  return rc::gen::oneOf(rc::gen::just(rational(1)), rc::gen::map(gen_small_rational(1, 8), [](const rational& x) {
                          return rational(x / (1 + x));
                        }));
}
/// Doubles with full 40-bit fractions in [lo, hi] (exact in MPFR).
inline rc::Gen<double> gen_double(double lo, double hi) {
  return rc::gen::map(rc::gen::inRange<std::int64_t>(0, (std::int64_t{1} << 40) + 1),
                      [lo, hi](std::int64_t k) { return lo + (hi - lo) * std::ldexp(static_cast<double>(k), -40); });
}

}  // namespace kalman_oracle::testing
