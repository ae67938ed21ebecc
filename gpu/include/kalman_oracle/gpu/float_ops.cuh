// The binary32 operations the kernels are written in, one spelling for host and device, so that a
// kernel and its CPU twin (docs/kernels.md, "Twins") round at the same points.
//
// On the device nvcc contracts a*b + c into an FMA unless told otherwise (--fmad=true is its
// default), which would make the kernel's rounding depend on the compiler. Every operation here is
// therefore an explicit round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fmaf_rn: never
// contracted). On the host the same operations are IEEE binary32 operations: C++ * and + on float
// (GCC does not contract in ISO C++ mode, -std=c++20, and this file never relies on it either way:
// each product is its own expression) and std::fma, which is correctly rounded. Both sides then
// compute the same bits.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define KALMAN_ORACLE_HD __host__ __device__ __forceinline__
#else
#define KALMAN_ORACLE_HD inline
#endif
// `#pragma unroll` in a function both sides compile: the device's loop unrolled, the host compiler (which
// warns of pragmas it does not know) given nothing.
#if defined(__CUDA_ARCH__)
#define KALMAN_ORACLE_DEVICE_UNROLL _Pragma("unroll")
#else
#define KALMAN_ORACLE_DEVICE_UNROLL
#endif

namespace kalman_oracle::gpu {

/// fl(x · y), round to nearest even.
KALMAN_ORACLE_HD float mul_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  volatile float product = x * y;  // volatile: a product that no optimiser may fuse with an add
  return product;
#endif
}

/// fl(x + y), round to nearest even.
KALMAN_ORACLE_HD float add_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, y);
#else
  return x + y;
#endif
}

/// fl(x · y + z) with one rounding.
KALMAN_ORACLE_HD float fma_rn(float x, float y, float z) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(x, y, z);
#else
  return std::fma(x, y, z);
#endif
}

/// fl(x / y), round to nearest even (the device's IEEE division, not the approximate one that
/// --use_fast_math would give; host: C++ / on float, which GCC never turns into a reciprocal
/// multiply without -freciprocal-math).
KALMAN_ORACLE_HD float div_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(x, y);
#else
  return x / y;
#endif
}

/// |x| (exact).
KALMAN_ORACLE_HD float abs_rn(float x) {
#if defined(__CUDA_ARCH__)
  return fabsf(x);
#else
  return std::fabs(x);
#endif
}

/// The larger of x and y (exact; a NaN argument loses, as fmax does).
KALMAN_ORACLE_HD float max_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return fmaxf(x, y);
#else
  return std::fmax(x, y);
#endif
}

/// x · 2^e, exact while the result is a normal number (the kernels' rescaling, docs/math.md §8
/// fact 3).
KALMAN_ORACLE_HD float scale_by_power_of_two(float x, int e) {
#if defined(__CUDA_ARCH__)
  return ldexpf(x, e);
#else
  return std::ldexp(x, e);
#endif
}

/// The e with 2^e <= x < 2^(e+1) for finite x > 0 (ilogb).
KALMAN_ORACLE_HD int binade(float x) {
#if defined(__CUDA_ARCH__)
  return ilogbf(x);
#else
  return std::ilogb(x);
#endif
}

/// x rounded to TF32 (11 significand bits, binary32's exponent range), nearest, ties to even, as a
/// binary32 value, spelled on the bits: add 2^12 − 1 plus the kept part's last bit below the 13
/// dropped bits and clear them (a carry into the exponent is the rounding up to the next binade, or to
/// infinity). Non-finite x unchanged. The reference's round_operand under operand_format::tf32
/// (scalar/operand_rounding.hpp) and the device's cvt.rn.tf32.f32 give the same bits (tested: CI on
/// the host, every binary32 on the GPU).
KALMAN_ORACLE_HD float tf32_rn_by_bits(float x) {
#if defined(__CUDA_ARCH__)
  unsigned bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;
  bits = (bits + 0xfffu + ((bits >> 13) & 1u)) & ~0x1fffu;
  return __uint_as_float(bits);
#else
  if (!std::isfinite(x)) return x;
  unsigned bits;
  __builtin_memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0xfffu + ((bits >> 13) & 1u)) & ~0x1fffu;
  float rounded;
  __builtin_memcpy(&rounded, &bits, sizeof bits);
  return rounded;
#endif
}

/// x rounded to TF32 as a tensor core multiplies it when given tf32_rn(x): on the device the
/// hardware's conversion (cvt.rn.tf32.f32, sm_90; one instruction), on the host tf32_rn_by_bits.
KALMAN_ORACLE_HD float tf32_rn(float x) {
#if defined(__CUDA_ARCH__)
  unsigned bits;
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
  return __uint_as_float(bits);
#else
  return tf32_rn_by_bits(x);
#endif
}

namespace detail {

// Binary64 operations spelled as the binary32 ones above: explicit roundings, never contracted.
KALMAN_ORACLE_HD double mul_rn_f64(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(x, y);
#else
  volatile double product = x * y;
  return product;
#endif
}

KALMAN_ORACLE_HD double fma_rn_f64(double x, double y, double z) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(x, y, z);
#else
  return std::fma(x, y, z);
#endif
}

}  // namespace detail

/// e^x rounded to binary32 within one ulp (docs/kernels.md, "KDN gains"), the same bits on host and
/// device. The error bounds of the KDN fixtures count the decay α = e^g as "exp within 1 ulp"
/// (check/diagonal_kdn_bound.hpp); CUDA's expf promises 2 ulp, and the host's std::exp may differ
/// from the device's, which would break the twins. So e^x is computed here in binary64 with
/// explicit roundings only: n = rint(x / ln 2), r = x − n ln 2 (ln 2 in two parts, two FMAs: r is
/// within 2^-60 |r| of the exact reduced argument for |x| <= 104), e^r by the Taylor series to r^12
/// in Horner form (|r| <= 0.347: truncation below 2^-52, the 12 FMAs' roundings below 2^-49
/// relative), scaled by 2^n exactly. The binary64 value is within 2^-48 relative of e^x, and one
/// rounding to binary32 adds at most half an ulp: within 0.5 + 2^-24 ulp, so within one ulp
/// (float_ops_test.cpp checks it against MPFR's correctly rounded exp). Arguments below -104 give
/// +0 (e^x < 2^-150 rounds to 0); above 89, +inf; NaN stays NaN.
KALMAN_ORACLE_HD float exp_within_one_ulp(float x) {
  if (!(x == x)) return x;
  if (x < -104.0f) return 0.0f;
  if (x > 89.0f) return HUGE_VALF;
  constexpr double inv_ln2 = 0x1.71547652b82fep+0, ln2_hi = 0x1.62e42fefa39efp-1, ln2_lo = 0x1.abc9e3b39803fp-56;
  const double xd = x;
#if defined(__CUDA_ARCH__)
  const double n = rint(detail::mul_rn_f64(xd, inv_ln2));
#else
  const double n = std::nearbyint(detail::mul_rn_f64(xd, inv_ln2));  // round half to even, as rint
#endif
  double r = detail::fma_rn_f64(-n, ln2_hi, xd);
  r = detail::fma_rn_f64(-n, ln2_lo, r);
  // Horner: 1 + r(1 + r/2(1 + r/3(... (1 + r/12)))), as coefficients 1/k!.
  constexpr double c[13] = {1.0,
                            1.0,
                            0x1p-1,
                            0x1.5555555555555p-3,
                            0x1.5555555555555p-5,
                            0x1.1111111111111p-7,
                            0x1.6c16c16c16c17p-10,
                            0x1.a01a01a01a01ap-13,
                            0x1.a01a01a01a01ap-16,
                            0x1.71de3a556c734p-19,
                            0x1.27e4fb7789f5cp-22,
                            0x1.ae64567f544e4p-26,
                            0x1.1eed8eff8d898p-29};
  double p = c[12];
  for (int k = 11; k >= 0; --k) p = detail::fma_rn_f64(p, r, c[k]);
  const int e = static_cast<int>(n);
#if defined(__CUDA_ARCH__)
  return __double2float_rn(scalbn(p, e));
#else
  return static_cast<float>(std::scalbn(p, e));
#endif
}

}  // namespace kalman_oracle::gpu
