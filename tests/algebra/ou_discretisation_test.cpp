// OU discretisation (docs/math.md §6): closed form, the a = 0 limit, argument checks.
#include <doctest/doctest.h>

#include <cmath>

#include "kalman_oracle/algebra/ou_discretisation.hpp"

using namespace kalman_oracle;

TEST_CASE("ou: closed form in binary64") {
  // a = -1, Delta = 1/2, p = 2: ā = e^{-1/2}; p̄ = 2 (1 - e^{-1}) / 2 = 1 - e^{-1}.
  const auto s = ou_discretise(-1.0, 0.5, 2.0);
  CHECK(s.decay == doctest::Approx(std::exp(-0.5)).epsilon(1e-15));
  CHECK(s.process_noise == doctest::Approx(1.0 - std::exp(-1.0)).epsilon(1e-15));
}

TEST_CASE("ou: the a = 0 limit is p Delta, and tiny |a| stays close to it") {
  const auto zero = ou_discretise(0.0, 0.25, 8.0);
  CHECK(zero.decay == 1.0);
  CHECK(zero.process_noise == 2.0);
  // a Delta = -1e-300: expm1 keeps every bit (1 - exp would give exactly 0).
  const auto tiny = ou_discretise(-4e-300, 0.25, 8.0);
  CHECK(tiny.process_noise == doctest::Approx(2.0).epsilon(1e-15));
}

TEST_CASE("ou: zero-order hold is not an exact discretisation") {
  precision_scope scope(128);
  const mpfr_real a(-1), delta(1), p(1);
  const auto full = ou_discretise_zero_order_hold(a, delta, p);
  const auto twice =
      ou_compose(ou_discretise_zero_order_hold(a, delta / 2, p), ou_discretise_zero_order_hold(a, delta / 2, p));
  // (e^{-1} + 1) / 2 != 1: two half steps of ZOH give p̄ = 0.684..., one step gives 1.
  CHECK(abs(twice.process_noise - full.process_noise) > mpfr_real(0.3));
  const auto exact = ou_compose(ou_discretise(a, delta / 2, p), ou_discretise(a, delta / 2, p));
  CHECK(abs(exact.process_noise - ou_discretise(a, delta, p).process_noise) < mpfr_real(1e-35));
}

TEST_CASE("ou: bad arguments name the rule they break") {
  CHECK_THROWS_WITH_AS(ou_discretise(1.0, 1.0, 1.0), "ou_discretise: rate a must be <= 0 (a stable OU prior), got 1",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ou_discretise(-1.0, 0.0, 1.0), "ou_discretise: step Delta must be > 0, got 0",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ou_discretise_zero_order_hold(-1.0, 1.0, -2.0),
                       "ou_discretise_zero_order_hold: diffusion p must be >= 0, got -2", std::invalid_argument);
  CHECK_THROWS_AS(ou_discretise(std::nan(""), 1.0, 1.0), std::invalid_argument);
}
