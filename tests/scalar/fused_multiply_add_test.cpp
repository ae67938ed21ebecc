// binary32 with fused multiply-add (scalar/fused_multiply_add.hpp): a product that meets a sum or a
// difference is one correctly rounded fma; anywhere else it is the rounded binary32 product; the rest
// is binary32 arithmetic.
#include "kalman_oracle/scalar/fused_multiply_add.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

using kalman_oracle::fused_binary32;

namespace {

/// Random binary32 values in [-2, 2) with 24 significant bits (a linear congruential generator).
struct uniform_floats {
  std::uint32_t state = 12345;
  float operator()() {
    state = state * 1664525u + 1013904223u;
    return std::ldexp(static_cast<float>(state >> 8), -24) * 4 - 2;
  }
};

}  // namespace

TEST_CASE("fused multiply-add: x * y + c is rounded once, where binary32 rounds twice") {
  // (1 + 2^-13)(1 − 2^-13) − 1 = −2^-26: the product rounds to 1 in binary32, so the unfused
  // difference is 0 and the fused one exact.
  const float x = 1 + 0x1p-13f, y = 1 - 0x1p-13f;
  const float unfused = x * y - 1.0f;
  CHECK(unfused == 0.0f);
  CHECK((fused_binary32(x) * fused_binary32(y) - fused_binary32(1)).value() == -0x1p-26f);
  CHECK((fused_binary32(-1) + fused_binary32(x) * fused_binary32(y)).value() == -0x1p-26f);
  fused_binary32 s(-1);
  s += fused_binary32(x) * fused_binary32(y);
  CHECK(s.value() == -0x1p-26f);
}

TEST_CASE("fused multiply-add: every contraction is std::fma; every other use of a product is binary32's") {
  uniform_floats next;
  for (int i = 0; i < 20000; ++i) {
    const float x = next(), y = next(), c = next(), z = next();
    const fused_binary32 fx(x), fy(y), fc(c), fz(z);
    REQUIRE((fx * fy + fc).value() == std::fma(x, y, c));
    REQUIRE((fc + fx * fy).value() == std::fma(x, y, c));
    REQUIRE((fx * fy - fc).value() == std::fma(x, y, -c));
    REQUIRE((fc - fx * fy).value() == std::fma(-x, y, c));
    // x y + c z: one product rounded, the other fused.
    REQUIRE((fx * fy + fc * fz).value() == std::fma(x, y, c * z));
    // Not meeting a sum: rounded as binary32 rounds it.
    REQUIRE(fused_binary32(fx * fy).value() == x * y);
    REQUIRE(((fx * fy) / fz).value() == (x * y) / z);
    REQUIRE(fused_binary32(fx * fy * fz).value() == (x * y) * z);
    REQUIRE(sqrt(abs(fused_binary32(fx * fy))).value() == std::sqrt(std::fabs(x * y)));
    REQUIRE((fx + fy).value() == x + y);
    REQUIRE((fx / fy).value() == x / y);
  }
}
