// Register-tiled sums of products over shared-memory operands, each output element one binary32
// chain of fused multiply-adds in a fixed order (docs/kernels.md, "The chunked delta-rule memory
// (backward, binary32)"). A thread owns a TR × TC tile of outputs and, for each term index k, loads
// TR row operands and TC column operands once and issues TR · TC fused multiply-adds: the loads a
// term fall from two to (TR + TC) / (TR · TC). Which thread sums an element, and how many it sums at
// once, does not change the element's sum: acc = begin, then acc = fma(A(r, k), B(c, k), acc) run by
// run, k rising, exactly the chain the twin writes with fma_sum and fnma_sum (fma(x, y, z) =
// fma(y, x, z): the exact product is symmetric; −x is exact). So kernel and twin stay bit-identical
// at any tile shape. Private to gpu/src.
#pragma once

#include <cuda_runtime.h>

#include "kalman_oracle/gpu/float_ops.cuh"

namespace kalman_oracle::gpu {
namespace {

/// A matrix read from shared memory: element (row, k) at p[row · row_stride + k · k_stride], negated
/// where `negate` (the fnma_sum terms).
struct shared_operand {
  const float* p;
  int row_stride;
  int k_stride;
  bool negate = false;
  __device__ __forceinline__ float at(int row, int k) const {
    const float x = p[row * row_stride + k * k_stride];
    return negate ? -x : x;
  }
};

/// Which terms of a run output (r, c) sums: every k < count; k from r, its row, to count − 1 (the
/// sums over a ≥ t of 𝒯_at x_a, or of σ_tm from t = m); or k from 0 through r (the sums over m ≤ t
/// of 𝒯_tm x_m). 𝒯 is lower triangular and the twin sums only its triangle, so the kernel must not
/// add the zeros outside it either: their products with an infinite or NaN operand would not be zero.
enum class terms { all, from_row, through_row };

/// One run of terms: A.at(r, k) B.at(c, k) for the k of Terms below count.
template <terms Terms>
struct sum_run {
  shared_operand a, b;
  int count;
};

template <terms Terms>
__device__ __forceinline__ sum_run<Terms> run_of(shared_operand a, shared_operand b, int count) {
  return {a, b, count};
}

/// Adds one run's terms to a tile (rows r[a], columns c[b]; tr its smallest row, RT the row step).
template <int TR, int TC, terms Terms>
__device__ __forceinline__ void add_run(const sum_run<Terms>& s, const int (&r)[TR], const int (&c)[TC],
                                        float (&acc)[TR][TC], int rows, int cols, int tr, int RT) {
  const int first = Terms == terms::from_row ? tr : 0,
            last = Terms == terms::through_row ? min(s.count - 1, min(rows - 1, tr + (TR - 1) * RT)) : s.count - 1;
#pragma unroll 4
  for (int k = first; k <= last; ++k) {
    float av[TR], bv[TC];
#pragma unroll
    for (int a = 0; a < TR; ++a) av[a] = r[a] < rows ? s.a.at(r[a], k) : 0.0f;
#pragma unroll
    for (int b = 0; b < TC; ++b) bv[b] = c[b] < cols ? s.b.at(c[b], k) : 0.0f;
#pragma unroll
    for (int a = 0; a < TR; ++a)
#pragma unroll
      for (int b = 0; b < TC; ++b)
        if (Terms == terms::all || (Terms == terms::from_row ? k >= r[a] : k <= r[a]))
          acc[a][b] = fma_rn(av[a], bv[b], acc[a][b]);
  }
}

/// For every output (r, c), r < rows, c < cols: acc = begin(r, c), then each run's terms in order
/// (within a run, k rising), then end(r, c, acc). Thread x of the block (x = threadIdx.x,
/// x + Threads, …) owns rows tr + a · RT (a < TR) and columns tc + b · CT (b < TC), RT = ⌈rows / TR⌉,
/// CT = ⌈cols / TC⌉, tr = x / CT, tc = x % CT: consecutive threads take consecutive columns, so a
/// warp's column loads fall in different banks where B's rows are padded to an odd stride (or B is
/// read along its rows), and its row loads are few addresses, broadcast.
template <int TR, int TC, int Threads, class Begin, class End, terms... Terms>
__device__ __forceinline__ void tiled_sums(int rows, int cols, Begin&& begin, End&& end,
                                           const sum_run<Terms>&... runs) {
  const int RT = (rows + TR - 1) / TR, CT = (cols + TC - 1) / TC;
  for (int x = static_cast<int>(threadIdx.x); x < RT * CT; x += Threads) {
    const int tr = x / CT, tc = x % CT;
    int r[TR], c[TC];
    float acc[TR][TC];
#pragma unroll
    for (int a = 0; a < TR; ++a) r[a] = tr + a * RT;
#pragma unroll
    for (int b = 0; b < TC; ++b) c[b] = tc + b * CT;
#pragma unroll
    for (int a = 0; a < TR; ++a)
#pragma unroll
      for (int b = 0; b < TC; ++b) acc[a][b] = r[a] < rows && c[b] < cols ? begin(r[a], c[b]) : 0.0f;
    (add_run<TR, TC>(runs, r, c, acc, rows, cols, tr, RT), ...);
#pragma unroll
    for (int a = 0; a < TR; ++a)
#pragma unroll
      for (int b = 0; b < TC; ++b)
        if (r[a] < rows && c[b] < cols) end(r[a], c[b], acc[a][b]);
  }
}

}  // namespace
}  // namespace kalman_oracle::gpu
