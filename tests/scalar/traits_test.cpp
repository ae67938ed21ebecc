// scalar_traits and precision_scope: precision granted, unit roundoff, exact conversions, exponents.
#include <doctest/doctest.h>

#include <cmath>

#include "kalman_oracle/scalar/traits.hpp"

using namespace kalman_oracle;

TEST_CASE("scalar: IEEE types report their precision and unit roundoff") {
  CHECK(scalar_traits<float>::precision_bits() == 24);
  CHECK(scalar_traits<double>::precision_bits() == 53);
  CHECK(scalar_traits<float>::unit_roundoff() == std::ldexp(1.0f, -24));
  CHECK(scalar_traits<double>::unit_roundoff() == std::ldexp(1.0, -53));
  CHECK(scalar_traits<double>::exponent(0.75) == -1);
  CHECK(scalar_traits<double>::exponent(std::ldexp(1.0, -1074)) == -1074);  // subnormal: ilogb is exact
}

TEST_CASE("scalar: a precision request is granted the smallest Boost precision at or above it") {
  // Boost 1.74 maps d decimal digits to floor(1000 d / 301) + 2 bits (+1 when 301 divides 1000 d):
  // 76 digits -> 252 + 2 = 254 bits, 77 digits -> 255 + 2 = 257 bits. So 256 -> 257.
  CHECK(digits10_for_bits(256) == 77);
  CHECK(granted_bits(256) == 257);
  CHECK(granted_bits(257) == 257);
  CHECK(granted_bits(53) >= 53);
  CHECK_THROWS_WITH_AS(digits10_for_bits(1), "precision: need at least 2 bits, got 1", std::invalid_argument);
  const unsigned before = precision_scope::bits();
  {
    precision_scope scope(256);
    CHECK(scalar_traits<mpfr_real>::precision_bits() == 257);
    const mpfr_real x = scalar_traits<mpfr_real>::from_double(1.0);
    CHECK(mpfr_get_prec(x.backend().data()) == 257);
    CHECK(scalar_traits<mpfr_real>::unit_roundoff() == scalar_traits<mpfr_real>::ldexp(mpfr_real(1), -257));
    {
      precision_scope inner(1000);
      CHECK(scalar_traits<mpfr_real>::precision_bits() >= 1000);
    }
    CHECK(scalar_traits<mpfr_real>::precision_bits() == 257);
  }
  CHECK(precision_scope::bits() == before);
}

TEST_CASE("scalar: doubles convert exactly into MPFR, MPFI and rationals") {
  precision_scope scope(128);
  const double third = 1.0 / 3.0;  // a 53-bit dyadic rational, not 1/3
  CHECK(scalar_traits<rational>::from_double(third) == rational(6004799503160661LL) / rational(18014398509481984LL));
  CHECK(scalar_traits<mpfr_real>::to_double(scalar_traits<mpfr_real>::from_double(third)) == third);
  CHECK(scalar_traits<rational>::to_double(scalar_traits<rational>::from_double(third)) == third);
  CHECK(scalar_traits<mpfi_interval>::to_double(scalar_traits<mpfi_interval>::from_double(third)) == third);
  const double tiny = std::ldexp(1.0, -1074);
  CHECK(scalar_traits<rational>::from_double(tiny) == scalar_traits<rational>::ldexp(rational(1), -1074));
  CHECK_THROWS_AS(scalar_traits<rational>::from_double(INFINITY), std::domain_error);
}

TEST_CASE("scalar: exact binary exponents of rationals") {
  using R = scalar_traits<rational>;
  CHECK(R::exponent(rational(1)) == 0);
  CHECK(R::exponent(rational(2)) == 1);
  CHECK(R::exponent(rational(3)) == 1);
  CHECK(R::exponent(rational(-4)) == 2);
  CHECK(R::exponent(rational(1, 2)) == -1);
  CHECK(R::exponent(rational(1, 3)) == -2);      // 1/4 <= 1/3 < 1/2
  CHECK(R::exponent(rational(255, 256)) == -1);  // just below 1
  CHECK(R::exponent(rational(257, 256)) == 0);   // just above 1
  CHECK(R::exponent(R::ldexp(rational(1), -300)) == -300);
  CHECK(R::ldexp(rational(3, 5), 4) == rational(48, 5));
  CHECK(R::ldexp(rational(3, 5), -4) == rational(3, 80));
  CHECK_THROWS_AS(R::exponent(rational(0)), std::domain_error);
}

TEST_CASE("scalar: MPFR and MPFI exponents and scaling") {
  precision_scope scope(100);
  using M = scalar_traits<mpfr_real>;
  CHECK(M::exponent(mpfr_real(1)) == 0);
  CHECK(M::exponent(mpfr_real(0.75)) == -1);
  CHECK(M::ldexp(mpfr_real(3), -2) == mpfr_real(0.75));
  using I = scalar_traits<mpfi_interval>;
  CHECK(I::exponent(I::from_double(-6.0)) == 2);
  CHECK(I::to_double(I::ldexp(I::from_double(3.0), 3)) == 24.0);
}
