// Tensor-core operand rounding (scalar/operand_rounding.hpp): round to nearest-even at the format's
// precision, the identity without a scope, the running error's operand term, and the stochastic
// rounding of the tiers' typical ensembles.
#include "kalman_oracle/scalar/operand_rounding.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "inputs.hpp"
#include "kalman_oracle/scalar/running_error.hpp"

using namespace kalman_oracle;

namespace {

/// x rounded to p significand bits by binary64 arithmetic (exact: x has 24 bits), ties to even.
float reference_rounding(float x, int p) {
  if (x == 0 || !std::isfinite(x)) return x;
  const int e = std::ilogb(x);
  const double scaled = std::ldexp(static_cast<double>(x), p - 1 - e);       // p bits before the point
  return static_cast<float>(std::ldexp(std::nearbyint(scaled), e - p + 1));  // nearbyint: ties to even
}

}  // namespace

TEST_CASE(
    "operand rounding: bfloat16 equals the fixture reader's rounding; TF32 and binary16's precision by binary64") {
  std::uint32_t state = 7;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    const float x = std::bit_cast<float>((state & 0x807fffffu) | ((64u + (state >> 24) % 128u) << 23));  // normal
    CHECK(round_to_precision(x, 8) ==
          static_cast<float>(fixtures::round_to_dtype(static_cast<double>(x), safetensors::dtype::bf16)));
    CHECK(round_to_precision(x, 11) == reference_rounding(x, 11));
    CHECK(round_to_precision(x, 8) == reference_rounding(x, 8));
  }
  // Ties go to even: 1 + 2^-8 (halfway between 1 and 1 + 2^-7 at 8 bits) rounds down; 1 + 3 2^-8 up.
  CHECK(round_to_precision(1.0f + 0x1p-8f, 8) == 1.0f);
  CHECK(round_to_precision(1.0f + 3 * 0x1p-8f, 8) == 1.0f + 0x1p-6f);
}

TEST_CASE("operand rounding: only inside a scope, only over float and running_error") {
  const float x = 1.0f + 0x1p-20f;
  CHECK(round_operand(x) == x);
  {
    tensor_core_scope scope(operand_format::bf16);
    CHECK(round_operand(x) == 1.0f);
    CHECK(round_operand(1.0 + 0x1p-20) == 1.0 + 0x1p-20);  // binary64: not a tensor-core type
    CHECK(tensor_core_active<float>());
    CHECK(!tensor_core_active<double>());
    // The running error gains u_op / u |x| = 2^16 |x| (units of u = 2^-24).
    const running_error<double> r(2.0, 3.0);
    CHECK(round_operand(r).error() == 3.0 + 0x1p16 * 2.0);
    CHECK(round_operand(r).value() == 2.0);
  }
  CHECK(round_operand(x) == x);
  CHECK(round_operand(running_error<double>(2.0, 3.0)).error() == 3.0);
}

TEST_CASE("operand rounding: stochastic, to either neighbour with the probabilities that make it unbiased") {
  // x = 1 + 2^-20 at 11 bits: neighbours 1 and 1 + 2^-10, the dropped part 2^-20 / 2^-10 = 1/1024 of an
  // ulp; x = 1 + 0.75 2^-10: up with probability 3/4. Seeds 1..N are N independent draws (splitmix64).
  const struct {
    float x, down, up;
    double p_up;
  } cases[] = {{1.0f + 0x1p-20f, 1.0f, 1.0f + 0x1p-10f, 0x1p-10},
               {1.0f + 0.75f * 0x1p-10f, 1.0f, 1.0f + 0x1p-10f, 0.75},
               {-(3.0f + 0.25f * 0x1p-9f), -3.0f, -(3.0f + 0x1p-9f), 0.25}};
  constexpr int draws = 1 << 16;
  for (const auto& c : cases) {
    int up = 0;
    for (int s = 1; s <= draws; ++s) {
      const float r = round_to_precision_stochastically(c.x, 11, splitmix64_mix(static_cast<std::uint64_t>(s)));
      REQUIRE((r == c.down || r == c.up));
      up += r == c.up;
    }
    // Up with probability p_up (the dropped part over an ulp), which is what makes the mean error zero.
    // The count is binomial(N, p_up): within 6 standard deviations, or 8 draws where that is fewer.
    const double expected = c.p_up * draws, slack = std::max(8.0, 6 * std::sqrt(expected * (1 - c.p_up)));
    CHECK(std::fabs(up - expected) <= slack);
  }
  // Representable values, zero, infinities and NaN are kept; one seed rounds one value one way.
  CHECK(round_to_precision_stochastically(1.5f, 11, 12345) == 1.5f);
  CHECK(round_to_precision_stochastically(0.0f, 8, 12345) == 0.0f);
  CHECK(std::isinf(round_to_precision_stochastically(INFINITY, 8, 12345)));
  CHECK(std::isnan(round_to_precision_stochastically(NAN, 8, 12345)));
  CHECK(round_to_precision_stochastically(1.0f + 0x1p-12f, 8, 99) ==
        round_to_precision_stochastically(1.0f + 0x1p-12f, 8, 99));
  // As round-to-nearest, it commutes with the sign and with powers of two (the draw reads the
  // significand): −x and 2^e x round as x does, whatever the seed.
  for (std::uint64_t s = 1; s <= 256; ++s) {
    const float x = 1.0f + static_cast<float>(s) * 0x1p-20f, r = round_to_precision_stochastically(x, 11, s);
    CHECK(round_to_precision_stochastically(-x, 11, s) == -r);
    CHECK(round_to_precision_stochastically(0x1p-30f * x, 11, s) == 0x1p-30f * r);
  }
}

TEST_CASE("operand rounding: stochastic only inside both scopes, and the seed restored") {
  // x = 1 + 0.5 2^-7 at bfloat16's 8 bits: a tie, which round-to-nearest sends to even (1); seeds 1..64
  // send it up about half the time.
  const float x = 1.0f + 0.5f * 0x1p-7f;
  {
    stochastic_operand_scope seed(1);
    CHECK(round_operand(x) == x);  // no tensor_core_scope: the identity
  }
  tensor_core_scope scope(operand_format::bf16);
  CHECK(round_operand(x) == 1.0f);
  int up = 0;
  for (std::uint64_t s = 1; s <= 64; ++s) {
    stochastic_operand_scope seed(s);
    up += round_operand(x) == 1.0f + 0x1p-7f;
  }
  CHECK(up > 8);
  CHECK(up < 56);
  CHECK(round_operand(x) == 1.0f);  // the seed's scope closed: to nearest again
}
