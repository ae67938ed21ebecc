// Distances in units in the last place, and correct rounding of a certified binary64 value into a
// narrower format (docs/error-model.md, "ULP distance").
//
// A fixture stores y = RN64(x) and s = sign(x − y) where y is a midpoint of a narrower format. The
// correctly rounded value of x in format F is RN_F(y), except when y is a midpoint of F: then x lies
// on the side s of it (s = 0: x = y, a true tie, to even). No F-midpoint lies strictly between x and
// y (it would be a binary64 number nearer to x than y), so this is exact: no double rounding.
#pragma once

#include <mpfr.h>

#include <cstdint>
#include <cstdlib>

#include "kalman_oracle/scalar/rounding.hpp"

namespace kalman_oracle::check {

/// A monotone integer image of a format's bit patterns: ordinal(next up) = ordinal + 1, and
/// ordinal(+0) = ordinal(−0) = 0. NaNs have no ordinal (callers reject them first).
inline std::int64_t ordinal(std::uint64_t bits, const binary_format& f) {
  const int width = f.exponent_bits + f.precision;  // sign + exponent + (precision − 1)
  const std::uint64_t sign = std::uint64_t{1} << (width - 1);
  const std::int64_t magnitude = static_cast<std::int64_t>(bits & (sign - 1));
  return (bits & sign) ? -magnitude : magnitude;
}

/// |ordinal(a) − ordinal(b)|: how many representable numbers of f lie between a and b, plus one.
inline std::uint64_t ulp_distance(std::uint64_t a, std::uint64_t b, const binary_format& f) {
  const std::int64_t d = ordinal(a, f) - ordinal(b, f);
  return d < 0 ? static_cast<std::uint64_t>(-d) : static_cast<std::uint64_t>(d);
}

/// The bit pattern in f of the correctly rounded exact value, from its binary64 rounding y and
/// the residual sign s = sign(exact − y) (see the top).
inline std::uint64_t correctly_rounded_bits(double y, int residual_sign, const binary_format& f) {
  mpfr_t x;
  mpfr_init2(x, 256);
  mpfr_set_d(x, y, MPFR_RNDN);
  if (residual_sign != 0 && y != 0) {
    // Nudge x by far less than any quantum of f, towards the exact value: RN_F then breaks the
    // tie (if y is an F-midpoint) the way the exact value does, and changes nothing otherwise.
    mpfr_t nudge;
    mpfr_init2(nudge, 256);
    mpfr_set_d(nudge, y, MPFR_RNDN);
    mpfr_mul_2si(nudge, nudge, -200, MPFR_RNDN);
    mpfr_abs(nudge, nudge, MPFR_RNDN);
    if (residual_sign > 0)
      mpfr_add(x, x, nudge, MPFR_RNDN);
    else
      mpfr_sub(x, x, nudge, MPFR_RNDN);
    mpfr_clear(nudge);
  }
  const std::uint64_t bits = round_to_format_bits(x, f);
  mpfr_clear(x);
  return bits;
}

}  // namespace kalman_oracle::check
