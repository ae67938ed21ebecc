// division.cuh's claim (label `twin`): divide(x, d) is the IEEE quotient RN(x / d),
// bit for bit, for every pair of binary32 numbers, so kernels that share one reciprocal between
// several quotients keep the rounding counts of the proven bounds and the bits of their twins.
// The host runs the same operations as the device (float_ops.cuh), so this checks the device's
// arithmetic too; gpu/tests/division_gpu_test.cpp compares the device's value with div.rn.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/division.cuh"

using namespace kalman_oracle::gpu;

namespace {

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

/// Same binary32 datum (NaNs: any NaN, as the host's division may pick either operand's payload).
bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

std::string describe(float x, float d, float got) {
  std::ostringstream out;
  out << std::hexfloat << "x = " << x << ", d = " << d << ": divide " << got << ", x / d " << x / d;
  return out.str();
}

/// Counts the pairs where divide(x, d) differs from x / d (and, separately, where the uncorrected
/// first quotient RN(x · RN(1/d)) would), keeping the first difference's description.
struct tally {
  std::size_t pairs = 0, wrong = 0, uncorrected_wrong = 0;
  std::string first;
  void check(float x, float d) {
    const float got = divide(x, d);
    ++pairs;
    if (!same_bits(got, x / d) && wrong++ == 0) first = describe(x, d, got);
    if (!same_bits(mul_rn(x, reciprocal_in_range(d)), x / d)) ++uncorrected_wrong;
  }
};

}  // namespace

TEST_SUITE("twin") {
  TEST_CASE("twin: divide equals IEEE division for every divisor significand") {
    // Markstein's correction does not depend on the exponents inside the range, so every divisor
    // significand (all 2^23, in [1, 2)) against sixteen dividend significands covers the pairs'
    // significands the way an exhaustive test over exponents could not: 1, its successor, the
    // largest below 2, 1.5, and twelve drawn ones.
    std::vector<float> dividends{1.0f, std::nextafter(1.0f, 2.0f), std::nextafter(2.0f, 1.0f), 1.5f};
    std::mt19937 rng(20261204);
    std::uniform_int_distribution<std::uint32_t> significand(0, (1u << 23) - 1);
    while (dividends.size() < 16) dividends.push_back(from_bits(0x3f800000u | significand(rng)));
    tally all;
    for (std::uint32_t bits = 0; bits < (1u << 23); ++bits) {
      const float d = from_bits(0x3f800000u | bits);
      for (float x : dividends) all.check(x, d);
    }
    INFO(all.first);
    CHECK(all.wrong == 0);
    // The check has power: without the correction step the quotient is wrong on many of these pairs.
    CHECK(all.uncorrected_wrong > all.pairs / 100);
    MESSAGE(all.pairs << " pairs; the uncorrected quotient differs on " << all.uncorrected_wrong);
  }

  TEST_CASE("twin: divide equals IEEE division across exponents and at the edges of the range and outside it") {
    std::mt19937 rng(4);
    std::uniform_int_distribution<std::uint32_t> any_bits(0, 0xffffffffu), significand(0, (1u << 23) - 1);
    std::uniform_int_distribution<int> in_range_binade(-62, 62), coin(0, 1);
    tally all;
    // Random exponents inside the range, random signs.
    for (int i = 0; i < 1'000'000; ++i) {
      auto draw = [&] {
        const float v = std::ldexp(from_bits(0x3f800000u | significand(rng)), in_range_binade(rng));
        return coin(rng) ? v : -v;
      };
      all.check(draw(), draw());
    }
    // Every binary32 bit pattern class, uniformly: zeros, subnormals, infinities, NaNs and extreme
    // exponents (the fallback), and the pairs whose quotient overflows or underflows.
    for (int i = 0; i < 1'000'000; ++i) all.check(from_bits(any_bits(rng)), from_bits(any_bits(rng)));
    // The range's edges: 2^-62 and 2^63, their neighbours on both sides, against each other and
    // against 1 and random in-range values.
    std::vector<float> edges;
    for (float edge : {0x1p-62f, 0x1p63f})
      for (float v : {std::nextafter(edge, 0.0f), edge, std::nextafter(edge, HUGE_VALF)}) {
        edges.push_back(v);
        edges.push_back(-v);
      }
    for (float special : {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::max(), HUGE_VALF, -HUGE_VALF,
                          std::numeric_limits<float>::quiet_NaN(), 1.0f, -3.0f})
      edges.push_back(special);
    for (float x : edges)
      for (float d : edges) all.check(x, d);
    for (float e : edges)
      for (int i = 0; i < 1000; ++i) {
        const float v = std::ldexp(from_bits(0x3f800000u | significand(rng)), in_range_binade(rng));
        all.check(e, v);
        all.check(v, e);
      }
    INFO(all.first);
    CHECK(all.wrong == 0);
    MESSAGE(all.pairs << " pairs");
  }

  TEST_CASE("twin: the range test admits magnitudes from 2^-62 up to 2^63 exclusive") {
    CHECK(in_markstein_range(0x1p-62f));
    CHECK(in_markstein_range(-std::nextafter(0x1p63f, 0.0f)));
    CHECK_FALSE(in_markstein_range(std::nextafter(0x1p-62f, 0.0f)));
    CHECK_FALSE(in_markstein_range(0x1p63f));
    CHECK_FALSE(in_markstein_range(0.0f));
    CHECK_FALSE(in_markstein_range(std::numeric_limits<float>::quiet_NaN()));
    CHECK_FALSE(in_markstein_range(HUGE_VALF));
  }
  TEST_CASE("twin: a divisor in the square range has its square in the shared-reciprocal range") {
    // markstein_division::by_with_square checks d alone and divides by RN(d · d) too: the claim is
    // that |d| in [2^-31, 2^31) puts both d and RN(d²) in [2^-62, 2^63). It can only fail at the
    // ends, so every binary32 of both signs in the binades around them (exponents −33 … −30 and
    // 29 … 32: 2^27 values) is checked, and whether each lies in the square range decides nothing
    // else: a value outside it must merely not be claimed.
    std::size_t claimed = 0, wrong = 0;
    std::string first;
    for (const int exponent : {-33, -32, -31, -30, 29, 30, 31, 32})
      for (std::uint32_t sign = 0; sign < 2; ++sign)
        for (std::uint32_t significand = 0; significand < (1u << 23); ++significand) {
          const float d = from_bits(sign << 31 | static_cast<std::uint32_t>(exponent + 127) << 23 | significand);
          if (!in_markstein_square_range(d)) continue;
          ++claimed;
          if ((!in_markstein_range(d) || !in_markstein_range(mul_rn(d, d))) && wrong++ == 0) {
            std::ostringstream out;
            out << std::hexfloat << "d = " << d << ": in the square range, but d * d = " << mul_rn(d, d)
                << " is not in the shared-reciprocal range";
            first = out.str();
          }
        }
    INFO(first);
    CHECK(wrong == 0);
    // Both ends bind: the smallest claimed value squares to exactly 2^-62, the largest to just under 2^62.
    CHECK(in_markstein_square_range(0x1p-31f));
    CHECK_FALSE(in_markstein_square_range(std::nextafter(0x1p-31f, 0.0f)));
    CHECK(in_markstein_square_range(std::nextafter(0x1p31f, 0.0f)));
    CHECK_FALSE(in_markstein_square_range(0x1p31f));
    CHECK(claimed == 2u * 2u * (1u << 23) * 2u);  // exponents −31, −30, 29, 30, both signs
  }
}
