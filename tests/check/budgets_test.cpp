// check/budgets.hpp: the rounding-count polynomial, its text, and γ_n / u (docs/error-model.md,
// "Budgets"). The budgets themselves are data on the model cards (fixtures/lib/cards/, tested in
// tests/fixtures/lib/model_card_test.cpp). Every expected value is derived in the comment next to it.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "kalman_oracle/check/budgets.hpp"

using namespace kalman_oracle::check;

TEST_CASE("budgets: the rounding count is c0 + cT T + cK K + cKT K T + cT2 T² + cKT2 K T²") {
  // {2, 32, 1, 4, 32, 0} at T = 4, K = 2: 2 + 32·4 + 1·2 + 4·2·4 + 32·16 + 0 = 2 + 128 + 2 + 32 + 512.
  CHECK(budget_formula{2, 32, 1, 4, 32, 0}.rounding_count(4, 2) == 676);
  // Every coefficient once, T = 10, K = 3: 1 + 20 + 9 + 120 + 500 + 1800.
  CHECK(budget_formula{1, 2, 3, 4, 5, 6}.rounding_count(10, 3) == 2450);
  // Only the K T² term: 6 · 3 · 100.
  CHECK(budget_formula{0, 0, 0, 0, 0, 6}.rounding_count(10, 3) == 1800);
  CHECK(budget_formula{}.rounding_count(4096, 64) == 0);
}

TEST_CASE("budgets: the formula's text lists the non-zero terms in order") {
  CHECK(budget_formula{2, 32, 1, 4, 32, 0}.text() == "2 + 32 T + 1 K + 4 K T + 32 T^2");
  CHECK(budget_formula{0, 16, 0, 4, 0, 0}.text() == "16 T + 4 K T");  // no leading " + "
  CHECK(budget_formula{0, 0, 0, 0, 0, 0.5}.text() == "0.5 K T^2");    // %g: no trailing zeros
  CHECK(budget_formula{}.text() == "0");
}

TEST_CASE("budgets: gamma_over_u is n / (1 − n u), infinite (vacuous) once n u >= 1") {
  // n = 4, u = 1/8: 4 / (1 − 1/2) = 8, exact in binary64.
  CHECK(gamma_over_u(4, 0.125) == 8);
  // n = 8, u = 1/8: n u = 1, the bound promises nothing.
  CHECK(gamma_over_u(8, 0.125) == std::numeric_limits<double>::infinity());
  CHECK(gamma_over_u(0, 0.125) == 0);
  // n = 1, u = 2^-53: 1 / (1 − 2^-53) = 1 + 2^-53 + 2^-106 + …, just above the midpoint 1 + 2^-53
  // of 1 and 1 + 2^-52; the correctly rounded division gives 1 + 2^-52.
  CHECK(gamma_over_u(1, std::ldexp(1.0, -53)) == std::nextafter(1.0, 2.0));
}
