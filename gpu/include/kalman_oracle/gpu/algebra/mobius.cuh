// Möbius maps in binary32 as the kernels compute them (docs/math.md §8; docs/kernels.md).
//
// M = [[a, b], [c, d]] acts by x -> (a x + b) / (c x + d); compose(later, earlier) is the matrix
// product later · earlier. Each entry of the product is one FMA over one rounded product,
//     z_ij = fl(x_i1 y_1j + fl(x_i2 y_2j)),
// so with non-negative entries each of its two monomials carries at most two roundings, the count
// r = 2 of the scans' rounding bound (docs/math.md, "Rounding in the scans"). The product is then
// rescaled by 2^-e, e the binade of its largest |entry| (fact 3: M and c M act alike), which is
// exact while no entry becomes subnormal and keeps a long product from overflowing. The reference's
// mobius_monoid<float> with rescale_mode::power_of_two rounds each entry twice without the FMA:
// the same bound, different bits; the twins use this monoid so that they match the kernels.
#pragma once

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/float_ops.cuh"

namespace kalman_oracle::gpu {

/// One 2×2 map; 16 bytes, so a kernel moves it as one float4.
struct alignas(16) mobius_f32 {
  float a, b, c, d;
};

KALMAN_ORACLE_HD bool same_bits(const mobius_f32& x, const mobius_f32& y) {
  // Bitwise, so that -0 and +0 differ and NaNs compare: the twin test's notion of agreement.
  auto bits = [](float v) {
    unsigned int u = 0;
    static_assert(sizeof(u) == sizeof(v));
    __builtin_memcpy(&u, &v, sizeof(u));
    return u;
  };
  return bits(x.a) == bits(y.a) && bits(x.b) == bits(y.b) && bits(x.c) == bits(y.c) && bits(x.d) == bits(y.d);
}

/// later · earlier, each entry one FMA over one rounded product.
KALMAN_ORACLE_HD mobius_f32 mobius_product(const mobius_f32& l, const mobius_f32& e) {
  return {fma_rn(l.a, e.a, mul_rn(l.b, e.c)), fma_rn(l.a, e.b, mul_rn(l.b, e.d)),  //
          fma_rn(l.c, e.a, mul_rn(l.d, e.c)), fma_rn(l.c, e.b, mul_rn(l.d, e.d))};
}

/// M · 2^-e with e the binade of M's largest |entry| (largest entry then in [1, 2)); the zero
/// matrix, and a matrix whose largest |entry| is infinite (or every entry NaN), is returned unchanged
/// (fmax passes over a NaN entry: the others are scaled and the NaN stays NaN, on host and device alike).
KALMAN_ORACLE_HD mobius_f32 mobius_rescale_power_of_two(const mobius_f32& m) {
  const float largest = max_rn(max_rn(abs_rn(m.a), abs_rn(m.b)), max_rn(abs_rn(m.c), abs_rn(m.d)));
#if defined(__CUDA_ARCH__)
  // The rescale is most of a compose's instructions, and the scans are issue-bound (docs/kernels.md,
  // "The batched Möbius scan"): ilogbf and four ldexpf calls (a clamp and four multiplications an
  // entry) cost about 45 of a compose's 60. For a normal `largest` with exponent field E, 2^e =
  // 2^(127 − E) is a binary32 number (field 254 − E; for E = 254 the subnormal 2^-127), so one
  // multiplication an entry gives RN(x · 2^e): ldexp's correctly rounded value, the host's (the
  // twins') std::ldexp, bit for bit (gpu/tests/mobius_scan_gpu_test.cpp walks every binade). Zero,
  // subnormal and non-finite `largest` (field 0 or 255, or a NaN that fmax let through) take the
  // general path below, one unsigned comparison away.
  const unsigned field = __float_as_uint(largest) >> 23;  // largest >= 0 or NaN: field in [0, 511]
  if (field - 1u < 254u) {
    const float factor = __uint_as_float(field == 254u ? 0x00400000u : (254u - field) << 23);
    return {__fmul_rn(m.a, factor), __fmul_rn(m.b, factor), __fmul_rn(m.c, factor), __fmul_rn(m.d, factor)};
  }
  if (!(largest > 0.0f) || !(largest <= 3.4028234663852886e38f)) return m;
  const int e = -binade(largest);
  return {scale_by_power_of_two(m.a, e), scale_by_power_of_two(m.b, e), scale_by_power_of_two(m.c, e),
          scale_by_power_of_two(m.d, e)};
#else
  if (!(largest > 0.0f) || !(largest <= 3.4028234663852886e38f)) return m;
  const int e = -binade(largest);
  // The planted bug (twin meta-test, gpu/CMakeLists.txt) leaves entry d unscaled: a different map.
  return {scale_by_power_of_two(m.a, e), scale_by_power_of_two(m.b, e), scale_by_power_of_two(m.c, e),
          KALMAN_ORACLE_MUTANT(gpu_mobius_rescale_skips_entry, scale_by_power_of_two(m.d, e), m.d)};
#endif
}

/// The scan operation of every Möbius kernel: product, then power-of-two rescale.
KALMAN_ORACLE_HD mobius_f32 mobius_compose(const mobius_f32& later, const mobius_f32& earlier) {
  return mobius_rescale_power_of_two(mobius_product(later, earlier));
}

/// The same operation as a scan monoid (reference/include/kalman_oracle/scan/monoid.hpp), for the
/// CPU twins that run the reference's schedules over it.
struct mobius_f32_monoid {
  using value_type = mobius_f32;
  KALMAN_ORACLE_HD value_type identity() const { return {1.0f, 0.0f, 0.0f, 1.0f}; }
  KALMAN_ORACLE_HD value_type compose(const value_type& later, const value_type& earlier) const {
    return mobius_compose(later, earlier);
  }
};

}  // namespace kalman_oracle::gpu
