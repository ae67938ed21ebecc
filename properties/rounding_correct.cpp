// Correct rounding from MPFR to binary64, binary32, bfloat16 and binary16 (scalar/rounding.hpp).
//
// binary64 and binary32 have an independent oracle, MPFR's own mpfr_get_d / mpfr_get_flt. The
// 16-bit formats have none, so there the result is checked against the definition of round to
// nearest, ties to even, with exact distances in MPFR. Ties are built exactly, since a random value
// is almost never one and the ties are where the planted bug (round_ties_away) hides.
#include "kalman_oracle/scalar/rounding.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "generators.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;

namespace {

/// 2^e, exactly.
mpfr_real two(long e) {
  mpfr_real r;
  mpfr_set_ui_2exp(r.backend().data(), 1, e, MPFR_RNDN);
  return r;
}

/// The exact value of a double (the current precision is >= 53 bits in every property here).
mpfr_real exact(double d) {
  mpfr_real r;
  mpfr_set_d(r.backend().data(), d, MPFR_RNDN);
  return r;
}

/// A factor 1 + a / (b 2^j): a small rational perturbation, rounded to the working precision (the
/// value need not be exact: both sides of the comparison round the same MPFR number).
rc::Gen<mpfr_real> gen_perturbation() {
  return rc::gen::map(rc::gen::tuple(rc::gen::inRange<long>(-1000, 1001), rc::gen::inRange<long>(1, 1000),
                                     rc::gen::inRange<long>(0, 190)),
                      [](std::tuple<long, long, long> abj) {
                        const auto [a, b, j] = abj;
                        mpfr_real t(a);
                        t /= b;
                        return 1 + t * two(-j);
                      });
}

/// Finite floats that stress binary32: ±0, subnormals, the extreme binades, values near 1, and
/// arbitrary finite bit patterns (the float counterpart of kt::gen_hard_double).
rc::Gen<float> gen_hard_float() {
  return rc::gen::oneOf(
      rc::gen::element(0.0f, -0.0f, 1.0f, -1.0f, std::ldexp(1.0f, -149), std::ldexp(1.0f, -126),
                       std::numeric_limits<float>::max()),
      rc::gen::map(rc::gen::inRange<std::int32_t>(1, 1 << 23),
                   [](std::int32_t m) { return std::ldexp(static_cast<float>(m), -149); }),  // subnormal
      rc::gen::map(rc::gen::pair(rc::gen::inRange<int>(1, 1 << 20), rc::gen::inRange<int>(-149, 108)),
                   [](std::pair<int, int> me) { return std::ldexp(static_cast<float>(me.first), me.second); }),
      rc::gen::map(rc::gen::inRange<int>(-1 << 20, 1 << 20),
                   [](int k) { return 1.0f + std::ldexp(static_cast<float>(k), -23); }),  // near 1
      rc::gen::map(rc::gen::arbitrary<std::uint32_t>(), [](std::uint32_t bits) {
        const float x = std::bit_cast<float>(bits);
        return std::isfinite(x) ? x : 0.5f;
      }));
}

/// The exact midpoint of |d| and the next larger value of its format (2^(emax+1) above the largest
/// finite, the overflow threshold), with a random sign and, half the time, nudged by a tiny
/// fraction of the gap to either side (just above / just below the tie).
template <class F>
mpfr_real tie_above(F d, bool negative, int nudge) {
  const F lo = std::fabs(d);
  const F next = std::nextafter(lo, std::numeric_limits<F>::infinity());
  const mpfr_real hi = std::isinf(next) ? two(std::numeric_limits<F>::max_exponent) : exact(static_cast<double>(next));
  const mpfr_real lo_exact = exact(static_cast<double>(lo));
  mpfr_real mid = (lo_exact + hi) / 2;  // exact: two <= 54-bit values, far from the precision
  if (nudge != 0) mid += (hi - lo_exact) * two(-std::abs(nudge)) * (nudge > 0 ? 1 : -1);
  return negative ? mpfr_real(-mid) : mid;
}

rc::Gen<int> gen_nudge() {
  return rc::gen::oneOf(rc::gen::just(0), rc::gen::inRange<int>(-150, -2), rc::gen::inRange<int>(2, 150));
}

// ---- the 16-bit formats, against the definition ----------------------------------------------

/// The midpoint between the largest finite value and 2^(emax+1): from here on, |x| rounds to inf.
mpfr_real overflow_threshold(const binary_format& f) { return two(f.emax + 1) - two(f.emax - f.precision); }

/// Draws |x| in one binade [2^t, 2^(t+1)) with t from below half the smallest subnormal to above
/// the overflow threshold, with a significand of 1 to 40 bits: x = k 2^(t-b+1), 2^(b-1) <= k < 2^b.
mpfr_real draw_across_range(const binary_format& f) {
  const int t = *rc::gen::inRange<int>(f.emin + 1 - f.precision - 3, f.emax + 3);
  const int b = *rc::gen::inRange<int>(1, 41);
  const auto k = *rc::gen::inRange<std::uint64_t>(std::uint64_t{1} << (b - 1), std::uint64_t{1} << b);
  return exact(static_cast<double>(k)) * two(t - b + 1);  // exact: k < 2^40
}

/// Draws the exact midpoint of two adjacent non-negative values of f (or of the largest finite
/// value and 2^(emax+1)), possibly nudged by a tiny fraction of the gap.
mpfr_real draw_tie(const binary_format& f) {
  const std::uint64_t inf_bits = detail::format_layout(f).exponent_all_ones;
  const auto m = *rc::gen::inRange<std::uint64_t>(0, inf_bits);  // any finite magnitude, 0 included
  const mpfr_real lo = from_format_bits(m, f);
  const mpfr_real hi = m + 1 == inf_bits ? two(f.emax + 1) : from_format_bits(m + 1, f);
  mpfr_real mid = (lo + hi) / 2;
  const int nudge = *gen_nudge();
  if (nudge != 0) mid += (hi - lo) * two(-std::abs(nudge)) * (nudge > 0 ? 1 : -1);
  return mid;
}

/// Checks that x rounds in f to nearest, ties to even, from the definition.
void check_nearest_even(const mpfr_real& x, const binary_format& f) {
  const detail::format_layout layout(f);
  const std::uint64_t bits = round_to_format_bits(x, f);
  const mpfr_real r = from_format_bits(bits, f);
  RC_ASSERT(!mpfr_nan_p(r.backend().data()));
  RC_ASSERT(mpfr_signbit(r.backend().data()) == mpfr_signbit(x.backend().data()));  // zeros too
  const bool overflows = abs(x) >= overflow_threshold(f);
  RC_ASSERT(static_cast<bool>(mpfr_inf_p(r.backend().data())) == overflows);
  if (overflows) return;
  // The result is a value of f: it encodes back to itself.
  RC_ASSERT(round_to_format_bits(r, f) == bits);
  // No value of f is strictly closer. It suffices to look at the two neighbours of r on x's side
  // of zero: if a closer value existed, the neighbour towards it would be closer too. (When r is
  // ±0, the values of the other sign are farther from x than r is; above the largest finite value
  // there is none, and the overflow check above covers that side.) Magnitude bits are monotone in
  // the value, so the neighbours are magnitude - 1 and magnitude + 1.
  const std::uint64_t sign = bits & layout.sign_bit;
  const std::uint64_t magnitude = bits & ~layout.sign_bit;
  const mpfr_real distance = abs(x - r);
  auto check_neighbour = [&](std::uint64_t neighbour) {
    const mpfr_real other = abs(x - from_format_bits(sign | neighbour, f));
    RC_ASSERT(other >= distance);
    if (other == distance) RC_ASSERT((bits & 1) == 0);  // a tie: the even significand wins
  };
  if (magnitude > 0) check_neighbour(magnitude - 1);
  if (magnitude + 1 < layout.exponent_all_ones) check_neighbour(magnitude + 1);
}

}  // namespace

TEST_SUITE("rounding") {
  TEST_CASE("rounding: binary64 and binary32 agree with mpfr_get_d and mpfr_get_flt") {
    check_property("rounding_matches_mpfr_get_d_get_flt", [] {
      const precision_scope scope(200);
      // Hard doubles times a perturbation cover over- and underflow of binary32; hard floats cover
      // its own binades.
      const double d = *rc::gen::oneOf(kt::gen_hard_double(),
                                       rc::gen::map(gen_hard_float(), [](float v) { return static_cast<double>(v); }));
      const mpfr_real x = exact(d) * *gen_perturbation();
      RC_ASSERT(to_binary64_bits(x) == std::bit_cast<std::uint64_t>(mpfr_get_d(x.backend().data(), MPFR_RNDN)));
      RC_ASSERT(to_binary32_bits(x) == std::bit_cast<std::uint32_t>(mpfr_get_flt(x.backend().data(), MPFR_RNDN)));
    });
  }

  TEST_CASE("rounding: binary64 agrees with mpfr_get_d on exact ties") {
    check_property("rounding_binary64_ties_match_mpfr_get_d", [] {
      const precision_scope scope(200);
      const mpfr_real x = tie_above(*kt::gen_hard_double(), *rc::gen::arbitrary<bool>(), *gen_nudge());
      RC_ASSERT(to_binary64_bits(x) == std::bit_cast<std::uint64_t>(mpfr_get_d(x.backend().data(), MPFR_RNDN)));
    });
  }

  TEST_CASE("rounding: binary32 agrees with mpfr_get_flt on exact ties") {
    check_property("rounding_binary32_ties_match_mpfr_get_flt", [] {
      const precision_scope scope(200);
      const mpfr_real x = tie_above(*gen_hard_float(), *rc::gen::arbitrary<bool>(), *gen_nudge());
      RC_ASSERT(to_binary32_bits(x) == std::bit_cast<std::uint32_t>(mpfr_get_flt(x.backend().data(), MPFR_RNDN)));
    });
  }

  TEST_CASE("rounding: bfloat16 and binary16 round to nearest, ties to even, by definition") {
    check_property("rounding_16bit_nearest_even", [] {
      // 400 bits make every difference of x and a value of f near it exact: x has at most about
      // 160 significant bits (a tie nudged by 2^-150 of the gap), and the values of f it is
      // compared with lie within a few of their quanta of x, or are 0.
      const precision_scope scope(400);
      const binary_format f = *rc::gen::element(bfloat16_format, binary16_format);
      mpfr_real x = *rc::gen::arbitrary<bool>() ? draw_across_range(f) : draw_tie(f);
      if (*rc::gen::arbitrary<bool>()) x = -x;
      RC_TAG(f.name);
      check_nearest_even(x, f);
    });
  }

  TEST_CASE("rounding: bfloat16 and binary16 patterns round-trip through MPFR") {
    check_property("rounding_16bit_round_trip", [] {
      const precision_scope scope(64);
      const auto bits = *rc::gen::arbitrary<std::uint16_t>();
      for (const binary_format& f : {bfloat16_format, binary16_format}) {
        const mpfr_real v = from_format_bits(bits, f);
        if (mpfr_nan_p(v.backend().data())) continue;  // NaN is canonicalised, not round-tripped
        RC_ASSERT(round_to_format_bits(v, f) == bits);
      }
    });
  }
}
