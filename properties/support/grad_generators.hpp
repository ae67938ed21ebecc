// Generators shared by the gradient properties (properties/grad_*.cpp): tensors of generated
// values, shapes that broadcast to a full shape, small exact rationals and decays, and doubles with
// 40-bit fractions (exact in MPFR).
#pragma once

#include <rapidcheck.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kalman_oracle/io/tensor.hpp"
#include "kalman_oracle/scalar/types.hpp"

namespace kalman_oracle::testing {


template <class T>
inline tensor<T> gen_tensor(const std::string& name, const shape_t& shape, const rc::Gen<T>& gen) {
  return tensor<T>(name, shape, *rc::gen::container<std::vector<T>>(element_count(shape), gen));
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
  return rc::gen::map(rc::gen::inRange<std::int64_t>(0, (std::int64_t{1} << 40) + 1), [lo, hi](std::int64_t k) {
    return lo + (hi - lo) * std::ldexp(static_cast<double>(k), -40);
  });
}

}  // namespace kalman_oracle::testing
