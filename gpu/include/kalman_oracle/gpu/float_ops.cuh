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

}  // namespace kalman_oracle::gpu
