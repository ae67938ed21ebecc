// Several IEEE quotients by one divisor for the price of one reciprocal (docs/kernels.md,
// "Division by a shared reciprocal").
//
// Why. The KLA kernels divide twice by each denominator (λ/den and ā/den; qη/λ and q²/λ), and
// div.rn.f32 costs an SFU reciprocal, an SFU range check (FCHK), five FMAs and a branch around a
// slow-path call each: the forward spent 8.6 of its 93 instructions a warp-step on the SFU pipe
// (docs/kernels.md, "KLA"). The proven error bounds count one rounding a quotient and the twins
// must repeat the kernels' bits, so the quotient has to stay the correctly rounded x/d.
//
// How. r = RN(1/d) once, then for each dividend x
//     q₀ = RN(x r),   ρ = RN(x − d q₀) = x − d q₀ exactly (fma),   q = RN(q₀ + ρ r) (fma).
// Markstein's theorem (P. Markstein, IBM J. Res. Dev. 34(1), 1990; Muller et al., Handbook of
// Floating-Point Arithmetic, the division chapter): in binary round-to-nearest arithmetic without
// underflow or overflow, if r is within half an ulp of 1/d and q₀ within one ulp of x/d, then
// q = RN(x/d). Both hold: r is correctly rounded, so |x r − x/d| ≤ 2^-24 |x/d|, and one more
// rounding keeps q₀ within one ulp of x/d. The remainder x − d q₀ is a binary32 number when
// e_d + e_q₀ ≥ e_min + p − 1 = −103, and the fma then computes it exactly.
//
// The range. Both |x| and |d| in [2^-62, 2^63) (exponent fields 65 to 189): then r, x r and x/d
// lie in (2^-126, 2^126), all normal, nothing overflows, and e_d + e_q₀ ≥ e_x − 1 ≥ −63.
//
// The reciprocal. On the device r = fma(fma(−d, r₀, 1), r₀, r₀) with r₀ the SFU's approximate
// reciprocal (rcp.approx.ftz.f32): one Newton step, as CUDA's own rcp.rn fast path, without its
// range branch. It equals RN(1/d) for every d in the range: checked exhaustively on the H200 (all
// 2 × 125 × 2^23 values; gpu/tests/division_gpu_test.cpp). The host computes 1.0f / d, the same bits.
//
// The check. `markstein_division` computes quotients this way and records whether every dividend
// and divisor it saw lay in the range; `ieee_division` divides with div_rn. A kernel computes a
// step with the first and, where the record says a value left the range (zeros, subnormals,
// infinities, NaN, extreme exponents), recomputes the step with the second: one branch a step
// instead of one a division, and the step's bits are the IEEE ones either way. A divisor and its
// square share one (tighter) check: in_markstein_square_range. division_twin_test.cpp checks the
// quotient exhaustively over the divisor's significand (all 2^23, against sixteen dividend
// significands), across the range's edges, and shows that the uncorrected q₀ would fail (and a
// meta-test plants exactly that: gpu/CMakeLists.txt); the GPU test compares the device's quotients
// with div.rn.
#pragma once

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/float_ops.cuh"

namespace kalman_oracle::gpu {

/// A divisor d with its reciprocal (RN(1/d) inside the range; unspecified outside it).
struct divisor {
  float value, reciprocal;
};

/// Whether |x| lies in [2^-62, 2^63), where the shared-reciprocal quotient is exact (above). NaN: no.
KALMAN_ORACLE_HD bool in_markstein_range(float x) {
  const float magnitude = abs_rn(x);
  return magnitude >= 0x1p-62f && magnitude < 0x1p63f;
}

/// Whether |x| lies in [2^-31, 2^31): then x and RN(x · x) both lie in the range above (x² lies in
/// [2^-62, 2^62) and rounding to nearest is monotone and keeps both ends), so one check covers a
/// divisor and its square (markstein_division::by_with_square).
KALMAN_ORACLE_HD bool in_markstein_square_range(float x) {
  const float magnitude = abs_rn(x);
#if defined(__CUDA_ARCH__)
  return magnitude >= 0x1p-31f && magnitude < 0x1p31f;
#else
  // The planted bug of the square range's meta-test (gpu/CMakeLists.txt): one binade too wide.
  return KALMAN_ORACLE_MUTANT(gpu_division_square_range_too_wide, magnitude >= 0x1p-31f && magnitude < 0x1p31f,
                              magnitude >= 0x1p-32f && magnitude < 0x1p32f);
#endif
}

/// RN(1/d) for |d| in the range (above).
KALMAN_ORACLE_HD float reciprocal_in_range(float d) {
#if defined(__CUDA_ARCH__)
  float approximate;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(approximate) : "f"(d));
  return fma_rn(fma_rn(-d, approximate, 1.0f), approximate, approximate);
#else
  return 1.0f / d;
#endif
}

/// RN(x / d) for x and d in the range (Markstein's correction of RN(x · RN(1/d))).
KALMAN_ORACLE_HD float quotient_in_range(float x, const divisor& d) {
  const float first = mul_rn(x, d.reciprocal);
  const float remainder = fma_rn(-first, d.value, x);  // exact in the range
#if defined(__CUDA_ARCH__)
  return fma_rn(remainder, d.reciprocal, first);
#else
  // The planted bug of the division meta-test: Markstein's correction skipped.
  return KALMAN_ORACLE_MUTANT(gpu_division_skips_correction, fma_rn(remainder, d.reciprocal, first), first);
#endif
}

/// Quotients through a shared reciprocal; `in_range` false once a dividend or divisor left the
/// range, after which the quotients are not to be used.
struct markstein_division {
  bool in_range = true;
  KALMAN_ORACLE_HD divisor by(float d) {
    in_range &= in_markstein_range(d);
    return {d, reciprocal_in_range(d)};
  }
  KALMAN_ORACLE_HD float operator()(float x, const divisor& d) {
    in_range &= in_markstein_range(x);
    return quotient_in_range(x, d);
  }
  /// The divisors d and RN(d · d) with one range check for both (in_markstein_square_range: a
  /// tighter check of d, which implies its square's).
  KALMAN_ORACLE_HD void by_with_square(float d, divisor& root, divisor& square) {
    in_range &= in_markstein_square_range(d);
    const float d_squared = mul_rn(d, d);
    root = {d, reciprocal_in_range(d)};
    square = {d_squared, reciprocal_in_range(d_squared)};
  }
  /// x / d for a dividend whose range the caller has checked and folded into in_range already (a
  /// loop-invariant ā, or a state the previous step checked as a divisor: models/kla.cuh).
  KALMAN_ORACLE_HD float checked_dividend(float x, const divisor& d) const { return quotient_in_range(x, d); }
};

/// IEEE quotients, div_rn (no reciprocal formed).
struct ieee_division {
  KALMAN_ORACLE_HD divisor by(float d) const { return {d, 0.0f}; }
  KALMAN_ORACLE_HD void by_with_square(float d, divisor& root, divisor& square) const {
    root = {d, 0.0f};
    square = {mul_rn(d, d), 0.0f};
  }
  KALMAN_ORACLE_HD float operator()(float x, const divisor& d) const { return div_rn(x, d.value); }
  KALMAN_ORACLE_HD float checked_dividend(float x, const divisor& d) const { return div_rn(x, d.value); }
};

/// RN(x / d) for every binary32 x and d, through the shared reciprocal where both are in range.
KALMAN_ORACLE_HD float divide(float x, float d) {
  markstein_division fast;
  const float q = fast(x, fast.by(d));
  return fast.in_range ? q : div_rn(x, d);
}

}  // namespace kalman_oracle::gpu
