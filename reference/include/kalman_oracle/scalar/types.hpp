// The scalar types the reference runs over (docs/math.md, "Scalar layer"). Expression templates are
// off so that `auto x = a * b;` holds a value in generic code, never a lazy expression.
#pragma once

#include <boost/multiprecision/gmp.hpp>
#include <boost/multiprecision/mpfi.hpp>
#include <boost/multiprecision/mpfr.hpp>

namespace kalman_oracle {

namespace mp = boost::multiprecision;

/// MPFR with the precision chosen at run time (see precision_scope.hpp).
using mpfr_real = mp::number<mp::mpfr_float_backend<0>, mp::et_off>;
/// MPFI interval with the precision chosen at run time.
using mpfi_interval = mp::number<mp::mpfi_float_backend<0>, mp::et_off>;
/// Exact rationals (GMP mpq_t).
using rational = mp::number<mp::gmp_rational, mp::et_off>;
/// Arbitrary-size integers (GMP mpz_t), for exact bit manipulation.
using integer = mp::number<mp::gmp_int, mp::et_off>;

}  // namespace kalman_oracle
