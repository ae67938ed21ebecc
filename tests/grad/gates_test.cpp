// grad/gates.hpp: the adjoint of the gate rule of models/gates.hpp.
#include <doctest/doctest.h>

#include "kalman_oracle/grad/gates.hpp"
#include "kalman_oracle/scalar/types.hpp"

using namespace kalman_oracle;
using R = rational;

TEST_CASE("grad: log gates multiply by alpha, linear gates pass through") {
  // α = e^g: dL/dg = (dα/dg) dL/dα = α dL/dα; with dL/dα = 3 and α = 1/2 that is 3/2.
  CHECK(gate_cotangent(R(3), R(1, 2), gate_space::log) == R(3, 2));
  // A linear gate is α itself: dL/dα passes unchanged.
  CHECK(gate_cotangent(R(3), R(1, 2), gate_space::linear) == 3);
}
