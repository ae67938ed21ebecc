// Correctly rounded conversion from MPFR to the IEEE 754 binary formats the GPU kernels use
// (binary64, binary32, bfloat16, binary16): round to nearest, ties to even, with subnormals,
// overflow to infinity, signed zeros and NaN.
//
// Why not mpfr_get_d / mpfr_get_flt: there is no MPFR function for bfloat16 or binary16, and
// going through double first would round twice (x -> double -> half can land on the wrong side of
// a half-format tie). So one routine rounds once, straight to any binary_format, and the binary64
// and binary32 cases are checked against MPFR's own conversions by the properties.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scalar/types.hpp"

namespace kalman_oracle {

/// An IEEE 754 binary interchange format (or bfloat16, which follows the same rules). The code
/// below assumes precision <= 53 (significands pass through a double) and a total width <= 64.
struct binary_format {
  int precision;      ///< significand bits, the implicit bit included
  int emin;           ///< exponent of the smallest normal number
  int emax;           ///< exponent of the largest finite number
  int exponent_bits;  ///< width of the biased exponent field
  const char* name;
};

inline constexpr binary_format binary64_format{53, -1022, 1023, 11, "binary64"};
inline constexpr binary_format binary32_format{24, -126, 127, 8, "binary32"};
inline constexpr binary_format bfloat16_format{8, -126, 127, 8, "bfloat16"};
inline constexpr binary_format binary16_format{11, -14, 15, 5, "binary16"};

namespace detail {

/// An mpfr_t that frees itself (the rounding below allocates scratch values).
class scratch_mpfr {
 public:
  explicit scratch_mpfr(mpfr_prec_t prec) { mpfr_init2(v_, prec); }
  scratch_mpfr(const scratch_mpfr&) = delete;
  scratch_mpfr& operator=(const scratch_mpfr&) = delete;
  ~scratch_mpfr() { mpfr_clear(v_); }
  mpfr_ptr get() { return v_; }

 private:
  mpfr_t v_;
};

/// Field layout of a format: sign | biased exponent | trailing significand (precision - 1 bits).
struct format_layout {
  int fraction_bits;
  std::uint64_t sign_bit;
  std::uint64_t exponent_all_ones;  // the biased exponent of inf and NaN, already shifted in place
  int bias;

  constexpr explicit format_layout(const binary_format& f)
      : fraction_bits(f.precision - 1),
        sign_bit(std::uint64_t{1} << (f.exponent_bits + f.precision - 1)),
        exponent_all_ones(((std::uint64_t{1} << f.exponent_bits) - 1) << (f.precision - 1)),
        bias(f.emax) {}  // IEEE 754: bias = emax
};

}  // namespace detail

/// The bit pattern (in the low bits) of x rounded to f, round to nearest, ties to even.
inline std::uint64_t round_to_format_bits(mpfr_srcptr x, const binary_format& f) {
  const detail::format_layout layout(f);
  const std::uint64_t sign = mpfr_signbit(x) ? layout.sign_bit : 0;

  // NaN: one canonical quiet NaN (sign 0, top trailing-significand bit set), as the GPU formats
  // produce; the payload of an MPFR NaN means nothing.
  if (mpfr_nan_p(x)) return layout.exponent_all_ones | (std::uint64_t{1} << (layout.fraction_bits - 1));
  if (mpfr_inf_p(x)) return sign | layout.exponent_all_ones;
  if (mpfr_zero_p(x)) return sign;  // -0 stays -0

  // x = m * 2^e with 0.5 <= |m| < 1, so |x| lies in [2^(e-1), 2^e).
  const mpfr_exp_t e = mpfr_get_exp(x);
  // The quantum (weight of the last significand bit) of the format numbers around x: 2^(e-p) in
  // the normal binade [2^(e-1), 2^e), and the fixed subnormal quantum 2^(emin+1-p) below 2^emin.
  // max(e, emin+1) - p covers both, and the binade boundary e = emin+1 agrees on either side.
  const mpfr_exp_t q = std::max<mpfr_exp_t>(e, f.emin + 1) - f.precision;

  // N = x * 2^-q exactly: scaling by a power of two is exact when the target keeps prec(x) bits
  // (and N's exponent, at most p, cannot leave MPFR's exponent range). |N| < 2^p.
  // The same variable then receives the rounded integer, so it also needs p + 1 bits for a carry up
  // to 2^p; with p + 2 bits or more every integer of magnitude <= 2^p is representable, so
  // mpfr_rint's single rounding is the whole rounding: no second, double, rounding to precision.
  const mpfr_prec_t work_prec = std::max<mpfr_prec_t>(mpfr_get_prec(x), f.precision + 2);
  detail::scratch_mpfr scaled(work_prec), n(work_prec);
  mpfr_mul_2si(scaled.get(), x, -q, MPFR_RNDN);  // exact
  // Ties to even on the integer N is ties to even on the significand: N's parity is the parity of
  // the last significand bit. The planted bug rounds halfway cases away from zero instead.
  KALMAN_ORACLE_MUTANT(round_ties_away, mpfr_rint(n.get(), scaled.get(), MPFR_RNDN), mpfr_round(n.get(), scaled.get()));

  // |N| <= 2^p <= 2^53 is an integer a double holds exactly (mpfr_get_uj would need <stdint.h>
  // before <mpfr.h>, which the include order here cannot promise).
  mpfr_abs(n.get(), n.get(), MPFR_RNDN);
  std::uint64_t magnitude = static_cast<std::uint64_t>(mpfr_get_d(n.get(), MPFR_RNDN));
  mpfr_exp_t quantum = q;
  const std::uint64_t hidden = std::uint64_t{1} << layout.fraction_bits;  // 2^(p-1)
  if (magnitude == 0) return sign;  // below half the smallest subnormal, or exactly half (0 is even)
  if (magnitude == 2 * hidden) {    // the round-up carried out of the binade: 2^p * 2^q = 2^(p-1) * 2^(q+1)
    magnitude = hidden;
    ++quantum;
  }
  if (magnitude < hidden) return sign | magnitude;  // subnormal: biased exponent 0, significand N
  // Normal, value N * 2^quantum in [2^(quantum+p-1), 2^(quantum+p)). A subnormal that rounded up
  // to 2^(p-1) lands here with exponent emin, biased exponent 1: the smallest normal.
  const mpfr_exp_t exponent = quantum + f.precision - 1;
  // The rounded value exceeds the largest finite (2 - 2^(1-p)) 2^emax exactly when its exponent
  // exceeds emax (its significand is at most 2^p - 1 after the renormalisation above). Rounding to
  // the unbounded-exponent format first and then overflowing is IEEE 754's rule: the threshold is
  // max + ulp/2, and the tie there goes to infinity because max's significand is odd.
  if (exponent > f.emax) return sign | layout.exponent_all_ones;
  const auto biased = static_cast<std::uint64_t>(exponent + layout.bias);
  return sign | (biased << layout.fraction_bits) | (magnitude - hidden);
}

inline std::uint64_t round_to_format_bits(const mpfr_real& x, const binary_format& f) {
  return round_to_format_bits(x.backend().data(), f);
}

inline std::uint64_t to_binary64_bits(const mpfr_real& x) { return round_to_format_bits(x, binary64_format); }
inline std::uint32_t to_binary32_bits(const mpfr_real& x) {
  return static_cast<std::uint32_t>(round_to_format_bits(x, binary32_format));
}
inline std::uint16_t to_bfloat16_bits(const mpfr_real& x) {
  return static_cast<std::uint16_t>(round_to_format_bits(x, bfloat16_format));
}
inline std::uint16_t to_binary16_bits(const mpfr_real& x) {
  return static_cast<std::uint16_t>(round_to_format_bits(x, binary16_format));
}
inline double to_binary64(const mpfr_real& x) { return std::bit_cast<double>(to_binary64_bits(x)); }
inline float to_binary32(const mpfr_real& x) { return std::bit_cast<float>(to_binary32_bits(x)); }

/// The exact value of the bit pattern `bits` of format f (any NaN decodes to an MPFR NaN). The
/// result has at least f.precision bits, so it is exact whatever the current default precision.
inline mpfr_real from_format_bits(std::uint64_t bits, const binary_format& f) {
  const detail::format_layout layout(f);
  mpfr_real r;
  mpfr_ptr out = r.backend().data();
  if (mpfr_get_prec(out) < f.precision) mpfr_set_prec(out, f.precision);
  const bool negative = (bits & layout.sign_bit) != 0;
  const std::uint64_t biased = (bits & layout.exponent_all_ones) >> layout.fraction_bits;
  const std::uint64_t fraction = bits & ((std::uint64_t{1} << layout.fraction_bits) - 1);
  const std::uint64_t all_ones = layout.exponent_all_ones >> layout.fraction_bits;
  if (biased == all_ones) {
    if (fraction != 0)
      mpfr_set_nan(out);
    else
      mpfr_set_inf(out, negative ? -1 : 1);
    return r;
  }
  if (biased == 0 && fraction == 0) {
    mpfr_set_zero(out, negative ? -1 : 1);
    return r;
  }
  // Normal: (2^(p-1) + fraction) 2^(biased - bias - (p-1)); subnormal: fraction 2^(emin - (p-1)),
  // i.e. the same formula with the biased exponent read as 1 and no implicit bit.
  const std::uint64_t significand = biased == 0 ? fraction : (std::uint64_t{1} << layout.fraction_bits) | fraction;
  const long exponent = (biased == 0 ? 1L : static_cast<long>(biased)) - layout.bias - layout.fraction_bits;
  mpfr_set_d(out, static_cast<double>(significand), MPFR_RNDN);  // exact: significand < 2^p <= 2^53
  mpfr_mul_2si(out, out, exponent, MPFR_RNDN);                   // exact: a power-of-two scaling
  if (negative) mpfr_neg(out, out, MPFR_RNDN);
  return r;
}

inline mpfr_real from_bfloat16_bits(std::uint16_t bits) { return from_format_bits(bits, bfloat16_format); }
inline mpfr_real from_binary16_bits(std::uint16_t bits) { return from_format_bits(bits, binary16_format); }

}  // namespace kalman_oracle
