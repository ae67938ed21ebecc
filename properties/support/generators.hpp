// Generators for hard inputs: zeros, subnormals, huge and tiny exponents, values near 1, long
// sequences. Rationals are exact; every double generated is finite.
#pragma once

#include <rapidcheck.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kalman_oracle/algebra/affine.hpp"
#include "kalman_oracle/algebra/mobius.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle::testing {

/// 2^e as an exact rational.
inline rational rational_pow2(long e) { return scalar_traits<rational>::ldexp(rational(1), e); }

/// Non-negative rationals: 0, small integers, fractions, scaled by 2^±64, and 1 ± 2^-k.
inline rc::Gen<rational> gen_rational_nonneg() {
  return rc::gen::oneOf(
      rc::gen::just(rational(0)), rc::gen::map(rc::gen::inRange<long>(0, 10), [](long n) { return rational(n); }),
      rc::gen::map(rc::gen::pair(rc::gen::inRange<long>(0, 1000), rc::gen::inRange<long>(1, 1000)),
                   [](std::pair<long, long> pq) { return rational(pq.first) / rational(pq.second); }),
      rc::gen::map(rc::gen::pair(rc::gen::inRange<long>(1, 64), rc::gen::inRange<long>(-64, 65)),
                   [](std::pair<long, long> me) { return rational(me.first) * rational_pow2(me.second); }),
      rc::gen::map(rc::gen::pair(rc::gen::inRange<long>(1, 200), rc::gen::arbitrary<bool>()),
                   [](std::pair<long, bool> kb) {
                     return kb.second ? rational(1) + rational_pow2(-kb.first) : rational(1) - rational_pow2(-kb.first);
                   }));
}

/// Strictly positive rationals (the domain of the Möbius action and of noises and precisions).
inline rc::Gen<rational> gen_rational_positive() {
  return rc::gen::suchThat(gen_rational_nonneg(), [](const rational& x) { return x > 0; });
}

/// Any sign.
inline rc::Gen<rational> gen_rational() {
  return rc::gen::map(rc::gen::pair(gen_rational_nonneg(), rc::gen::arbitrary<bool>()),
                      [](std::pair<rational, bool> xs) { return xs.second ? rational(-xs.first) : xs.first; });
}

/// Small non-negative integers: cheap exact entries for long sequences (products of 1000 leaves
/// stay a few thousand bits long).
inline rc::Gen<rational> gen_small_integer() {
  return rc::gen::map(rc::gen::inRange<long>(0, 4), [](long n) { return rational(n); });
}

/// Finite doubles that stress a format: ±0, subnormals, the extreme binades, values near 1, and
/// arbitrary finite bit patterns.
inline rc::Gen<double> gen_hard_double() {
  return rc::gen::oneOf(
      rc::gen::element(0.0, -0.0, 1.0, -1.0, std::ldexp(1.0, -1074), std::ldexp(1.0, -1022),
                       std::numeric_limits<double>::max()),
      rc::gen::map(rc::gen::inRange<std::int64_t>(1, std::int64_t{1} << 52),
                   [](std::int64_t m) { return std::ldexp(static_cast<double>(m), -1074); }),  // subnormal
      rc::gen::map(rc::gen::pair(rc::gen::inRange<int>(1, 1 << 20), rc::gen::inRange<int>(-1074, 1004)),
                   [](std::pair<int, int> me) { return std::ldexp(static_cast<double>(me.first), me.second); }),
      rc::gen::map(rc::gen::inRange<int>(-1 << 20, 1 << 20),
                   [](int k) { return 1.0 + std::ldexp(static_cast<double>(k), -52); }),  // near 1
      rc::gen::map(rc::gen::arbitrary<std::uint64_t>(), [](std::uint64_t bits) {
        double x;
        std::memcpy(&x, &bits, sizeof x);
        return std::isfinite(x) ? x : 0.5;
      }));
}

/// Non-negative Möbius maps over rationals (the leaves of docs/math.md §8 are all entrywise >= 0).
inline rc::Gen<mobius<rational>> gen_mobius_nonneg(rc::Gen<rational> entry = gen_rational_nonneg()) {
  return rc::gen::map(rc::gen::tuple(entry, entry, entry, entry), [](auto e) {
    return mobius<rational>{std::get<0>(e), std::get<1>(e), std::get<2>(e), std::get<3>(e)};
  });
}

/// Möbius maps that send positive x to positive values (entries >= 0 and c x + d > 0 for x > 0).
inline rc::Gen<mobius<rational>> gen_mobius_leaf(rc::Gen<rational> entry = gen_rational_nonneg()) {
  return rc::gen::suchThat(gen_mobius_nonneg(entry),
                           [](const mobius<rational>& m) { return m.d > 0 && (m.a > 0 || m.b > 0); });
}

inline rc::Gen<affine<rational>> gen_affine(rc::Gen<rational> entry = gen_rational()) {
  return rc::gen::map(rc::gen::pair(entry, entry), [](std::pair<rational, rational> ar) {
    return affine<rational>{ar.first, ar.second};
  });
}

/// Sequence lengths the scan properties must cover (issue 2), or a random one up to 300.
inline rc::Gen<std::size_t> gen_scan_length() {
  return rc::gen::oneOf(rc::gen::element<std::size_t>(0, 1, 2, 3, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000),
                        rc::gen::inRange<std::size_t>(0, 301));
}

/// Chunk sizes for the chunked scan: 1, 2, 3, 16, 64, or larger than the sequence of length n.
inline rc::Gen<std::size_t> gen_chunk_size(std::size_t n) {
  return rc::gen::oneOf(rc::gen::element<std::size_t>(1, 2, 3, 16, 64), rc::gen::inRange<std::size_t>(n + 1, n + 100));
}

}  // namespace kalman_oracle::testing
