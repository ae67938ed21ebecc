// round_to_format_bits against bit patterns worked out by hand, for each of the four formats.
// Notation: p = precision, the quantum (ulp) of [1, 2) is 2^(1-p), the smallest subnormal is
// 2^(emin+1-p), max = (2 - 2^(1-p)) 2^emax = 2^(emax+1) - 2^(emax+1-p) and its ulp is 2^(emax+1-p).
// Every input is built exactly at >= 400 bits, so a tail like 2^-200 is really there.
#include "kalman_oracle/scalar/rounding.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>

#include "kalman_oracle/scalar/precision_scope.hpp"

using namespace kalman_oracle;

namespace {

/// 2^e, exactly.
mpfr_real two(long e) {
  mpfr_real r;
  mpfr_set_ui_2exp(r.backend().data(), 1, e, MPFR_RNDN);
  return r;
}

mpfr_real signed_zero(bool negative) {
  mpfr_real r;
  mpfr_set_zero(r.backend().data(), negative ? -1 : 1);
  return r;
}

mpfr_real infinity(bool negative) {
  mpfr_real r;
  mpfr_set_inf(r.backend().data(), negative ? -1 : 1);
  return r;
}

mpfr_real not_a_number() {
  mpfr_real r;
  mpfr_set_nan(r.backend().data());
  return r;
}

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << std::uppercase << v;
  return s.str();
}

/// One hand-worked case: x rounds to `want` in f.
void expect(const binary_format& f, const char* what, const mpfr_real& x, std::uint64_t want) {
  const std::uint64_t got = round_to_format_bits(x, f);
  CHECK_MESSAGE(got == want, f.name, ": ", what, ": got ", hex(got), ", want ", hex(want));
}

}  // namespace

TEST_CASE("rounding: binary64 against hand-worked bit patterns") {
  const precision_scope scope(400);
  const binary_format& f = binary64_format;
  // 1 = 1.0 * 2^0, biased exponent 0 + 1023 = 0x3FF, fraction 0.
  expect(f, "1", mpfr_real(1), 0x3FF0000000000000);
  expect(f, "-1", mpfr_real(-1), 0xBFF0000000000000);
  expect(f, "+0", signed_zero(false), 0x0000000000000000);
  expect(f, "-0 keeps its sign", signed_zero(true), 0x8000000000000000);
  // 1 + 2^-53 is halfway between 1 (fraction ...0, even) and 1 + 2^-52 (...1): tie -> 1.
  expect(f, "tie to even down", 1 + two(-53), 0x3FF0000000000000);
  // A hair above that tie is nearer 1 + 2^-52.
  expect(f, "just above a tie", 1 + two(-53) + two(-200), 0x3FF0000000000001);
  // 1 + 3*2^-53 is halfway between 1 + 2^-52 (...1, odd) and 1 + 2^-51 (...10, even): tie -> up.
  expect(f, "tie to even up", 1 + 3 * two(-53), 0x3FF0000000000002);
  expect(f, "just below a tie", 1 + 3 * two(-53) - two(-200), 0x3FF0000000000001);
  expect(f, "negative tie to even up", -(1 + 3 * two(-53)), 0xBFF0000000000002);
  // Below 2 the doubles are 2^-52 apart: 2 - 2^-53 is the midpoint of 2 - 2^-52 (fraction all ones,
  // odd) and 2 (even) -> 2 = 0x4000000000000000; N carries to 2^53 and is renormalised.
  expect(f, "tie carries into the next binade", 2 - two(-53), 0x4000000000000000);
  // Smallest subnormal 2^(-1022+1-53) = 2^-1074: bits 1.
  expect(f, "smallest subnormal", two(-1074), 0x1);
  // 2^-1075 is halfway between 0 (even) and 2^-1074 (odd): tie -> 0, keeping the sign.
  expect(f, "half the smallest subnormal", two(-1075), 0x0);
  expect(f, "minus half the smallest subnormal", -two(-1075), 0x8000000000000000);
  expect(f, "a bit more than half the smallest subnormal", two(-1075) + two(-1200), 0x1);
  // 1.5 * 2^-1074 is halfway between 1 and 2 quanta: tie -> 2 (even).
  expect(f, "1.5 smallest subnormals", 3 * two(-1075), 0x2);
  expect(f, "far below the smallest subnormal", -two(-5000), 0x8000000000000000);
  // Largest subnormal (2^52 - 1) 2^-1074: fraction all ones, biased exponent 0.
  expect(f, "largest subnormal", two(-1022) - two(-1074), 0x000FFFFFFFFFFFFF);
  // Smallest normal 2^-1022: biased exponent 1, fraction 0.
  expect(f, "smallest normal", two(-1022), 0x0010000000000000);
  // 2^-1022 - 2^-1075 is halfway between the largest subnormal (odd) and 2^-1022 (even): -> up.
  expect(f, "largest subnormal rounds up into the normals", two(-1022) - two(-1075), 0x0010000000000000);
  expect(f, "just below that tie", two(-1022) - two(-1075) - two(-1200), 0x000FFFFFFFFFFFFF);
  // max = 2^1024 - 2^971: biased exponent 0x7FE, fraction all ones.
  expect(f, "largest finite", two(1024) - two(971), 0x7FEFFFFFFFFFFFFF);
  // max + ulp/2 = 2^1024 - 2^970: tie, max's significand is odd -> inf.
  expect(f, "overflow tie", two(1024) - two(970), 0x7FF0000000000000);
  expect(f, "negative overflow tie", -(two(1024) - two(970)), 0xFFF0000000000000);
  expect(f, "just below the overflow tie", two(1024) - two(970) - two(800), 0x7FEFFFFFFFFFFFFF);
  expect(f, "2^5000", two(5000), 0x7FF0000000000000);
  expect(f, "-2^5000", -two(5000), 0xFFF0000000000000);
  // Canonical quiet NaN: exponent all ones, top fraction bit.
  expect(f, "NaN", not_a_number(), 0x7FF8000000000000);
  expect(f, "+inf", infinity(false), 0x7FF0000000000000);
  expect(f, "-inf", infinity(true), 0xFFF0000000000000);
}

TEST_CASE("rounding: binary32 against hand-worked bit patterns") {
  const precision_scope scope(400);
  const binary_format& f = binary32_format;
  // 1: biased exponent 127 = 0x7F, shifted by 23 -> 0x3F800000.
  expect(f, "1", mpfr_real(1), 0x3F800000);
  expect(f, "-1", mpfr_real(-1), 0xBF800000);
  expect(f, "+0", signed_zero(false), 0x0);
  expect(f, "-0 keeps its sign", signed_zero(true), 0x80000000);
  // Quantum of [1, 2) is 2^-23; 1 + 2^-24 is the midpoint of 1 (even) and 1 + 2^-23: -> 1.
  expect(f, "tie to even down", 1 + two(-24), 0x3F800000);
  expect(f, "just above a tie", 1 + two(-24) + two(-200), 0x3F800001);
  // 1 + 3*2^-24: midpoint of ...1 (odd) and ...10 (even) -> up.
  expect(f, "tie to even up", 1 + 3 * two(-24), 0x3F800002);
  expect(f, "just below a tie", 1 + 3 * two(-24) - two(-200), 0x3F800001);
  expect(f, "negative tie to even up", -(1 + 3 * two(-24)), 0xBF800002);
  // 2 - 2^-24: midpoint of 2 - 2^-23 (fraction all ones) and 2 -> 2 = 0x40000000.
  expect(f, "tie carries into the next binade", 2 - two(-24), 0x40000000);
  // Smallest subnormal 2^(-126+1-24) = 2^-149.
  expect(f, "smallest subnormal", two(-149), 0x1);
  expect(f, "half the smallest subnormal", two(-150), 0x0);
  expect(f, "minus half the smallest subnormal", -two(-150), 0x80000000);
  expect(f, "a bit more than half the smallest subnormal", two(-150) + two(-300), 0x1);
  expect(f, "1.5 smallest subnormals", 3 * two(-150), 0x2);
  // Largest subnormal (2^23 - 1) 2^-149 = 2^-126 - 2^-149.
  expect(f, "largest subnormal", two(-126) - two(-149), 0x007FFFFF);
  expect(f, "smallest normal", two(-126), 0x00800000);
  // 2^-126 - 2^-150: midpoint of the largest subnormal (odd) and 2^-126 (even) -> 2^-126.
  expect(f, "largest subnormal rounds up into the normals", two(-126) - two(-150), 0x00800000);
  expect(f, "just below that tie", two(-126) - two(-150) - two(-300), 0x007FFFFF);
  // max = 2^128 - 2^104 (ulp 2^104): 0x7F7FFFFF.
  expect(f, "largest finite", two(128) - two(104), 0x7F7FFFFF);
  // max + ulp/2 = 2^128 - 2^103: tie, max is odd -> inf.
  expect(f, "overflow tie", two(128) - two(103), 0x7F800000);
  expect(f, "negative overflow tie", -(two(128) - two(103)), 0xFF800000);
  expect(f, "just below the overflow tie", two(128) - two(103) - two(-100), 0x7F7FFFFF);
  expect(f, "2^5000", two(5000), 0x7F800000);
  expect(f, "-2^5000", -two(5000), 0xFF800000);
  expect(f, "NaN", not_a_number(), 0x7FC00000);
  expect(f, "+inf", infinity(false), 0x7F800000);
  expect(f, "-inf", infinity(true), 0xFF800000);
}

TEST_CASE("rounding: bfloat16 against hand-worked bit patterns") {
  const precision_scope scope(400);
  const binary_format& f = bfloat16_format;
  // bfloat16 is the top half of binary32: 1 -> 0x3F80, 7 fraction bits, quantum of [1, 2) 2^-7.
  expect(f, "1", mpfr_real(1), 0x3F80);
  expect(f, "-1", mpfr_real(-1), 0xBF80);
  expect(f, "+0", signed_zero(false), 0x0);
  expect(f, "-0 keeps its sign", signed_zero(true), 0x8000);
  // 1 + 2^-8: midpoint of 1 (even) and 1 + 2^-7 -> 1.
  expect(f, "tie to even down", 1 + two(-8), 0x3F80);
  expect(f, "just above a tie", 1 + two(-8) + two(-200), 0x3F81);
  // 1 + 3*2^-8: midpoint of 0x3F81 (odd) and 0x3F82 (even) -> 0x3F82.
  expect(f, "tie to even up", 1 + 3 * two(-8), 0x3F82);
  expect(f, "just below a tie", 1 + 3 * two(-8) - two(-200), 0x3F81);
  expect(f, "negative tie to even up", -(1 + 3 * two(-8)), 0xBF82);
  // 2 - 2^-8: midpoint of 2 - 2^-7 (0x3FFF) and 2 (0x4000) -> 0x4000.
  expect(f, "tie carries into the next binade", 2 - two(-8), 0x4000);
  // Smallest subnormal 2^(-126+1-8) = 2^-133.
  expect(f, "smallest subnormal", two(-133), 0x1);
  expect(f, "half the smallest subnormal", two(-134), 0x0);
  expect(f, "minus half the smallest subnormal", -two(-134), 0x8000);
  expect(f, "a bit more than half the smallest subnormal", two(-134) + two(-300), 0x1);
  expect(f, "1.5 smallest subnormals", 3 * two(-134), 0x2);
  // Largest subnormal 127 * 2^-133 = 2^-126 - 2^-133.
  expect(f, "largest subnormal", two(-126) - two(-133), 0x007F);
  expect(f, "smallest normal", two(-126), 0x0080);
  // 2^-126 - 2^-134: midpoint of 0x007F (odd) and 0x0080 (even) -> 0x0080.
  expect(f, "largest subnormal rounds up into the normals", two(-126) - two(-134), 0x0080);
  expect(f, "just below that tie", two(-126) - two(-134) - two(-300), 0x007F);
  // max = 255 * 2^120 = 2^128 - 2^120: 0x7F7F.
  expect(f, "largest finite", two(128) - two(120), 0x7F7F);
  // max + ulp/2 = 2^128 - 2^119: tie, max is odd -> inf 0x7F80.
  expect(f, "overflow tie", two(128) - two(119), 0x7F80);
  expect(f, "negative overflow tie", -(two(128) - two(119)), 0xFF80);
  expect(f, "just below the overflow tie", two(128) - two(119) - two(-100), 0x7F7F);
  expect(f, "2^5000", two(5000), 0x7F80);
  expect(f, "-2^5000", -two(5000), 0xFF80);
  expect(f, "NaN", not_a_number(), 0x7FC0);
  expect(f, "+inf", infinity(false), 0x7F80);
  expect(f, "-inf", infinity(true), 0xFF80);
}

TEST_CASE("rounding: binary16 against hand-worked bit patterns") {
  const precision_scope scope(400);
  const binary_format& f = binary16_format;
  // 1: biased exponent 15 = 0b01111, shifted by 10 -> 0x3C00.
  expect(f, "1", mpfr_real(1), 0x3C00);
  expect(f, "-1", mpfr_real(-1), 0xBC00);
  expect(f, "+0", signed_zero(false), 0x0);
  expect(f, "-0 keeps its sign", signed_zero(true), 0x8000);
  // Quantum of [1, 2) is 2^-10; 1 + 2^-11: midpoint of 1 (even) and 1 + 2^-10 -> 1.
  expect(f, "tie to even down", 1 + two(-11), 0x3C00);
  expect(f, "just above a tie", 1 + two(-11) + two(-200), 0x3C01);
  // 1 + 3*2^-11: midpoint of 0x3C01 (odd) and 0x3C02 (even) -> 0x3C02.
  expect(f, "tie to even up", 1 + 3 * two(-11), 0x3C02);
  expect(f, "just below a tie", 1 + 3 * two(-11) - two(-200), 0x3C01);
  expect(f, "negative tie to even up", -(1 + 3 * two(-11)), 0xBC02);
  // 2 - 2^-11: midpoint of 2 - 2^-10 (0x3FFF) and 2 (0x4000) -> 0x4000.
  expect(f, "tie carries into the next binade", 2 - two(-11), 0x4000);
  // Smallest subnormal 2^(-14+1-11) = 2^-24.
  expect(f, "smallest subnormal", two(-24), 0x1);
  expect(f, "half the smallest subnormal", two(-25), 0x0);
  expect(f, "minus half the smallest subnormal", -two(-25), 0x8000);
  expect(f, "a bit more than half the smallest subnormal", two(-25) + two(-300), 0x1);
  expect(f, "1.5 smallest subnormals", 3 * two(-25), 0x2);
  // Largest subnormal 1023 * 2^-24 = 2^-14 - 2^-24.
  expect(f, "largest subnormal", two(-14) - two(-24), 0x03FF);
  expect(f, "smallest normal", two(-14), 0x0400);
  // 2^-14 - 2^-25: midpoint of 0x03FF (odd) and 0x0400 (even) -> 0x0400.
  expect(f, "largest subnormal rounds up into the normals", two(-14) - two(-25), 0x0400);
  expect(f, "just below that tie", two(-14) - two(-25) - two(-300), 0x03FF);
  // max = 65504 = 2^16 - 2^5 (ulp 32): 0x7BFF.
  expect(f, "largest finite", mpfr_real(65504), 0x7BFF);
  // 65520 = 65504 + 16 = max + ulp/2, tie, max's significand is odd -> inf 0x7C00.
  expect(f, "overflow tie", mpfr_real(65520), 0x7C00);
  expect(f, "negative overflow tie", mpfr_real(-65520), 0xFC00);
  expect(f, "just below the overflow tie", 65520 - two(-200), 0x7BFF);
  expect(f, "65519", mpfr_real(65519), 0x7BFF);
  expect(f, "2^5000", two(5000), 0x7C00);
  expect(f, "-2^5000", -two(5000), 0xFC00);
  expect(f, "NaN", not_a_number(), 0x7E00);
  expect(f, "+inf", infinity(false), 0x7C00);
  expect(f, "-inf", infinity(true), 0xFC00);
}

TEST_CASE("rounding: the working precision follows the input, not the default precision") {
  // A 2000-bit input under a 64-bit default: the tail 2^-1500 decides the rounding, so it must not
  // be lost when N = x 2^-q is formed.
  const precision_scope scope(64);
  mpfr_t x, term;
  mpfr_init2(x, 2000);
  mpfr_init2(term, 2);
  mpfr_set_ui(x, 1, MPFR_RNDN);
  mpfr_set_ui_2exp(term, 1, -53, MPFR_RNDN);
  mpfr_add(x, x, term, MPFR_RNDN);
  mpfr_set_ui_2exp(term, 1, -1500, MPFR_RNDN);
  mpfr_add(x, x, term, MPFR_RNDN);                                        // x = 1 + 2^-53 + 2^-1500, exact at 2000 bits
  CHECK(round_to_format_bits(x, binary64_format) == 0x3FF0000000000001);  // above the tie -> up
  // A 2-bit input: 3 * 2^-1075 = 1.5 smallest subnormals, tie -> 2 (even).
  mpfr_set_prec(x, 2);
  mpfr_set_ui_2exp(x, 3, -1075, MPFR_RNDN);
  CHECK(round_to_format_bits(x, binary64_format) == 0x2);
  mpfr_clear(term);
  mpfr_clear(x);
}

TEST_CASE("rounding: typed wrappers") {
  const precision_scope scope(400);
  const mpfr_real above_tie = 1 + two(-53) + two(-200);
  CHECK(to_binary64_bits(above_tie) == 0x3FF0000000000001);
  CHECK(to_binary64(above_tie) == 1.0 + 0x1p-52);
  CHECK(to_binary32_bits(1 + two(-24) + two(-200)) == 0x3F800001u);
  CHECK(to_binary32(1 + two(-24) + two(-200)) == 1.0f + 0x1p-23f);
  CHECK(std::signbit(to_binary64(-two(-1075))));  // rounds to -0.0
  CHECK(to_binary64(two(5000)) == std::numeric_limits<double>::infinity());
  CHECK(std::isnan(to_binary32(not_a_number())));
  CHECK(to_bfloat16_bits(1 + 3 * two(-8)) == 0x3F82);
  CHECK(to_binary16_bits(mpfr_real(65520)) == 0x7C00);
}

TEST_CASE("rounding: decoding bfloat16 and binary16 is exact") {
  const precision_scope scope(400);
  CHECK(from_binary16_bits(0x3C00) == 1);
  CHECK(from_binary16_bits(0x7BFF) == 65504);
  CHECK(from_binary16_bits(0xFBFF) == -65504);
  CHECK(from_binary16_bits(0x0001) == two(-24));         // smallest subnormal
  CHECK(from_binary16_bits(0x03FF) == 1023 * two(-24));  // largest subnormal
  CHECK(from_binary16_bits(0x0400) == two(-14));         // smallest normal
  CHECK(from_binary16_bits(0x3C01) == 1 + two(-10));
  CHECK(from_bfloat16_bits(0x3F80) == 1);
  CHECK(from_bfloat16_bits(0x7F7F) == 255 * two(120));
  CHECK(from_bfloat16_bits(0x0001) == two(-133));
  CHECK(from_bfloat16_bits(0x0080) == two(-126));
  const mpfr_real neg_zero = from_binary16_bits(0x8000);
  CHECK(mpfr_zero_p(neg_zero.backend().data()));
  CHECK(mpfr_signbit(neg_zero.backend().data()));
  CHECK(mpfr_inf_p(from_binary16_bits(0xFC00).backend().data()));
  CHECK(mpfr_sgn(from_binary16_bits(0xFC00).backend().data()) < 0);
  CHECK(mpfr_nan_p(from_bfloat16_bits(0x7FC1).backend().data()));
  // Exact even when the default precision is below the format's: the decoder widens its result.
  const precision_scope narrow(2);
  mpfr_real want;
  mpfr_set_prec(want.backend().data(), 11);
  mpfr_set_ui_2exp(want.backend().data(), 1025, -10, MPFR_RNDN);
  CHECK(mpfr_equal_p(from_binary16_bits(0x3C01).backend().data(), want.backend().data()));
}
