// Warp-level tensor-core primitives for kernels that keep a matrix in registers across products
// (docs/kernels.md, "Chunked delta-rule memory", the state launch): the m16n8k16 bfloat16 product with
// binary32 accumulation (mma.sync, sm_80 and later; and the m16n8k8 TF32 one of the tf32 backward's
// mma_sums) and the shared-memory loads of its operand
// fragments (ldmatrix). WMMA hides its fragments' layouts; these name them, so that an accumulator
// fragment can be rounded in registers and fed back as the next product's operand (as
// FlashAttention-2 feeds its scores), without a trip through shared memory.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane L, g = L / 4, c = L % 4:
//   accumulator D (16 x 8, binary32): d[0], d[1] at row g, columns 2c, 2c + 1; d[2], d[3] at row g + 8;
//   operand A (16 x 16, bfloat16 pairs): a[0] row g, columns 2c, 2c + 1; a[1] row g + 8, the same
//     columns; a[2] row g, columns 2c + 8, 2c + 9; a[3] row g + 8, those columns;
//   operand B (16 x 8, bfloat16 pairs): b[0] rows 2c, 2c + 1 of column g; b[1] rows 2c + 8, 2c + 9.
// So the accumulators of two adjacent 16 x 8 tiles, (d[0], d[1]), (d[2], d[3]) of the left tile and the
// same of the right one, are the four pairs of an A operand 16 x 16: accumulator_pairs_as_a below.
// Each pair is packed low half first (the lower column or row index), as bfloat16 pairs lie in memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace kalman_oracle::gpu::warp_mma {

/// d = a b + d for one 16 x 8 tile: a 16 x 16 (row), b 16 x 8 (column), bfloat16 operands, binary32
/// accumulation in the tensor cores' order.
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// d = a b + d for one 16 x 8 tile: a 16 x 8 (row), b 8 x 8 (column), TF32 operands given as their
/// binary32 bits (already rounded), binary32 accumulation. Fragments (PTX ISA, "Matrix Fragments for
/// mma.m16n8k8", .tf32), lane L, g = L / 4, q = L % 4: a[0] (g, q), a[1] (g + 8, q), a[2] (g, q + 4),
/// a[3] (g + 8, q + 4); b[0] (row q, column g), b[1] (q + 4, g); d[0], d[1] (g, 2q), (g, 2q + 1),
/// d[2], d[3] the same columns of row g + 8.
__device__ __forceinline__ void mma_tf32_16x8x8(float (&d)[4], const std::uint32_t (&a)[4],
                                                const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// The shared-memory address of a generic pointer, as ldmatrix takes it.
__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

/// Four 8 x 8 bfloat16 matrices from shared memory: lane L gives the address of row L % 8 of matrix
/// L / 8 (16 contiguous bytes), and receives in r[m] the pair at row L / 4, columns 2 (L % 4), +1 of
/// matrix m (transposed: of matrix m's transpose).
template <bool Transposed>
__device__ __forceinline__ void load_matrices_x4(std::uint32_t (&r)[4], const void* row) {
  if constexpr (Transposed)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

/// lo and hi rounded to bfloat16 (nearest, ties to even: the hardware's conversion), packed lo first.
__device__ __forceinline__ std::uint32_t bf16_pair(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  std::uint32_t bits;
  __builtin_memcpy(&bits, &pair, sizeof(bits));
  return bits;
}

/// The A operand (16 x 16) whose left 8 columns are the accumulator tile `left` and right 8 `right`,
/// each entry rounded to bfloat16.
__device__ __forceinline__ void accumulator_pairs_as_a(std::uint32_t (&a)[4], const float (&left)[4],
                                                       const float (&right)[4]) {
  a[0] = bf16_pair(left[0], left[1]);
  a[1] = bf16_pair(left[2], left[3]);
  a[2] = bf16_pair(right[0], right[1]);
  a[3] = bf16_pair(right[2], right[3]);
}

}  // namespace kalman_oracle::gpu::warp_mma
