// Tensor-core operand rounding (scalar/operand_rounding.hpp): round to nearest-even at the format's
// precision, the identity without a scope, and the running error's operand term.
#include "kalman_oracle/scalar/operand_rounding.hpp"

#include <doctest/doctest.h>

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
