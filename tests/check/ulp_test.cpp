// check/ulp.hpp: ULP distances between bit patterns and the correctly rounded bits of a certified
// binary64 value in a narrower format (docs/error-model.md, "ULP distance"). Every expected value
// is derived in the comment next to it.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "kalman_oracle/check/ulp.hpp"

using namespace kalman_oracle;
using check::correctly_rounded_bits;
using check::ordinal;
using check::ulp_distance;

TEST_CASE("ulp: ordinals count representable numbers, with one zero") {
  // binary16: sign bit 0x8000; the magnitude bits are the ordinal, negated for negative numbers.
  CHECK(ordinal(0x0000, binary16_format) == 0);       // +0
  CHECK(ordinal(0x8000, binary16_format) == 0);       // −0: the same ordinal as +0
  CHECK(ordinal(0x0001, binary16_format) == 1);       // the smallest subnormal, 2^-24
  CHECK(ordinal(0x8001, binary16_format) == -1);      // −2^-24
  CHECK(ordinal(0x3C00, binary16_format) == 0x3C00);  // 1.0: exponent 15 (biased), fraction 0
  // binary64: −1.0 is 0xBFF0000000000000, magnitude 0x3FF0000000000000.
  CHECK(ordinal(0xBFF0000000000000u, binary64_format) == -0x3FF0000000000000);
}

TEST_CASE("ulp: distances between neighbours, across zero and across binades") {
  // 1.0 (0x3C00) and the next binary16, 1 + 2^-10 (0x3C01): one step.
  CHECK(ulp_distance(0x3C00, 0x3C01, binary16_format) == 1);
  CHECK(ulp_distance(0x3C01, 0x3C00, binary16_format) == 1);  // symmetric
  // −2^-24 to +2^-24: through the one zero, two steps (ordinals −1 and 1).
  CHECK(ulp_distance(0x8001, 0x0001, binary16_format) == 2);
  CHECK(ulp_distance(0x8000, 0x0000, binary16_format) == 0);  // −0 and +0
  // binary32's largest finite number 0x7F7FFFFF and +∞ 0x7F800000 are neighbours.
  CHECK(ulp_distance(0x7F7FFFFF, 0x7F800000, binary32_format) == 1);
  // binary64 from 1.0 to 2.0: the 2^52 numbers of [1, 2) (52 fraction bits) lie in between.
  CHECK(ulp_distance(std::bit_cast<std::uint64_t>(1.0), std::bit_cast<std::uint64_t>(2.0), binary64_format) ==
        std::uint64_t{1} << 52);
  // bfloat16 from 1.0 (0x3F80) to 2.0 (0x4000): 7 fraction bits, 2^7 = 128 steps.
  CHECK(ulp_distance(0x3F80, 0x4000, bfloat16_format) == 128);
}

TEST_CASE("ulp: the residual sign breaks the ties of a narrower format") {
  // binary16 numbers in [1, 2) are 2^-10 apart. y = 1 + 2^-11 (a binary64) is the midpoint of
  // 1 (0x3C00, even significand) and 1 + 2^-10 (0x3C01, odd).
  const double midpoint = 1 + std::ldexp(1.0, -11);
  CHECK(correctly_rounded_bits(midpoint, 0, binary16_format) == 0x3C00);   // a true tie: to even
  CHECK(correctly_rounded_bits(midpoint, +1, binary16_format) == 0x3C01);  // exact value above y: up
  CHECK(correctly_rounded_bits(midpoint, -1, binary16_format) == 0x3C00);  // below y: down
  // y = 1 + 3·2^-11, the midpoint of 0x3C01 (odd) and 0x3C02 (1 + 2^-9, even).
  const double odd_midpoint = 1 + 3 * std::ldexp(1.0, -11);
  CHECK(correctly_rounded_bits(odd_midpoint, 0, binary16_format) == 0x3C02);
  CHECK(correctly_rounded_bits(odd_midpoint, -1, binary16_format) == 0x3C01);
  // bfloat16 (8-bit significand): 1 + 2^-8 is the midpoint of 0x3F80 and 0x3F81 (1 + 2^-7).
  const double bf_midpoint = 1 + std::ldexp(1.0, -8);
  CHECK(correctly_rounded_bits(bf_midpoint, 0, bfloat16_format) == 0x3F80);
  CHECK(correctly_rounded_bits(bf_midpoint, +1, bfloat16_format) == 0x3F81);
  // binary32 (24 bits): 1 + 2^-24 is the midpoint of 0x3F800000 and 0x3F800001 (1 + 2^-23).
  const double f32_midpoint = 1 + std::ldexp(1.0, -24);
  CHECK(correctly_rounded_bits(f32_midpoint, 0, binary32_format) == 0x3F800000);
  CHECK(correctly_rounded_bits(f32_midpoint, +1, binary32_format) == 0x3F800001);
  CHECK(correctly_rounded_bits(f32_midpoint, -1, binary32_format) == 0x3F800000);
}

TEST_CASE("ulp: away from a midpoint the residual sign changes nothing") {
  // 1 + 2^-12 is a quarter of binary16's spacing above 1: it rounds to 1 whichever side the exact
  // value lies on (the nudge is 2^-200 relative, far below a quarter spacing).
  const double near_one = 1 + std::ldexp(1.0, -12);
  CHECK(correctly_rounded_bits(near_one, +1, binary16_format) == 0x3C00);
  CHECK(correctly_rounded_bits(near_one, -1, binary16_format) == 0x3C00);
  // In binary64 itself y is already the correctly rounded value: its own bits, any sign.
  CHECK(correctly_rounded_bits(0.1, +1, binary64_format) == std::bit_cast<std::uint64_t>(0.1));
  CHECK(correctly_rounded_bits(0.1, -1, binary64_format) == std::bit_cast<std::uint64_t>(0.1));
  // y = 0: the exact value is below binary64's half-spacing at 0, so below every narrower
  // format's too; +0 whatever the sign.
  CHECK(correctly_rounded_bits(0.0, +1, binary16_format) == 0x0000);
  // A negative midpoint mirrors the positive one: −(1 + 2^-11) with the exact value below y
  // (more negative) rounds away from zero to −(1 + 2^-10), 0xBC01; a true tie goes to even, −1.
  const double negative_midpoint = -(1 + std::ldexp(1.0, -11));
  CHECK(correctly_rounded_bits(negative_midpoint, -1, binary16_format) == 0xBC01);
  CHECK(correctly_rounded_bits(negative_midpoint, 0, binary16_format) == 0xBC00);
}
