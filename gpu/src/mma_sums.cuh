// The register-tiled sums of tiled_sums.cuh on the tensor cores (docs/kernels.md, "Tensor-core
// products"): the same runs of terms A.at(r, k) B.at(c, k) over shared-memory operands, the same
// begin / end per output, but each warp computes 16 × 16 tiles of outputs by mma.sync m16n8k8 with
// TF32 operands (each loaded value rounded by tf32_rn, nearest even) and binary32 accumulators,
// started from begin(r, c). The tensor cores' order of accumulation is not specified, so an element is
// not the twin's fma chain bit for bit: the twin (product_sum, models/delta_rule_backward.cuh) sums the
// same rounded operands in index order, and kernel and twin are held to the `tf32-tc` tier's budget.
// Operands past a run's last term or past the output's rows and columns enter as zeros and are never
// read (a poisoned or stale value there would make a zero product NaN). Inside a tile a row's terms
// outside the triangle of terms::from_row / through_row are zeros in A, while B's value at that k is
// read for the tile's other rows: a non-finite B there makes that zero product NaN where the twin skips
// the term (non-finite operands are outside the tier anyway). Private to gpu/src.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kalman_oracle/gpu/float_ops.cuh"
#include "kalman_oracle/gpu/warp_mma.cuh"
#include "tiled_sums.cuh"

namespace kalman_oracle::gpu {
namespace {

/// The TF32 bits of x (tf32_rn), or of 0 where the term is not in the run.
__device__ __forceinline__ std::uint32_t tf32_operand(bool in_run, const shared_operand& m, int row, int k) {
  return in_run ? __float_as_uint(tf32_rn(m.at(row, k))) : 0u;
}

/// Adds one run's terms to a warp's 16 × 8·NT tile (rows r0 …, columns c0 …).
template <int NT, terms Terms>
__device__ __forceinline__ void mma_run(const sum_run<Terms>& s, int r0, int c0, int rows, int cols,
                                        float (&acc)[NT][4]) {
  const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, q = lane & 3;
  const int first = Terms == terms::from_row ? r0 : 0,
            last = Terms == terms::through_row ? min(s.count - 1, min(rows - 1, r0 + 15)) : s.count - 1;
  const int ra = r0 + g, rb = ra + 8;
  // Whether (row, k) is one of the run's terms for that output row.
  const auto term = [&](int row, int k) {
    return row < rows && k <= last && (Terms == terms::all || (Terms == terms::from_row ? k >= row : k <= row));
  };
#pragma unroll 2
  for (int k0 = first; k0 <= last; k0 += 8) {
    const int ka = k0 + q, kb = ka + 4;
    const std::uint32_t a[4] = {tf32_operand(term(ra, ka), s.a, ra, ka), tf32_operand(term(rb, ka), s.a, rb, ka),
                                tf32_operand(term(ra, kb), s.a, ra, kb), tf32_operand(term(rb, kb), s.a, rb, kb)};
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int c = c0 + 8 * n + g;
      const std::uint32_t b[2] = {tf32_operand(c < cols && ka <= last, s.b, c, ka),
                                  tf32_operand(c < cols && kb <= last, s.b, c, kb)};
      warp_mma::mma_tf32_16x8x8(acc[n], a, b);
    }
  }
}

/// acc += the 16 terms k = 0 … 15 of A.at(r, k) B.at(c, k) into a warp's 16 × 8·NT tile (rows r0 …,
/// columns c0 …), A and B read at p[row · stride + k]: the operations mma_run performs for a run of
/// terms::all with count 16, the same fragments in the same order (k0 = 0 then 8, column tiles n
/// rising), so the same bits, without its per-term tests (every k is a term). Rows from `rows` and
/// columns from `cols` on enter as zeros, never read.
template <int NT>
__device__ __forceinline__ void mma_slice16(const float* A, const float* B, int stride, int r0, int c0, int rows,
                                            int cols, float (&acc)[NT][4]) {
  const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, q = lane & 3;
  const int ra = r0 + g, rb = ra + 8;
  const bool in_a = ra < rows, in_b = rb < rows;
  const float *a_row = A + ra * stride + q, *b_row = A + rb * stride + q;
#pragma unroll
  for (int k0 = 0; k0 < 16; k0 += 8) {
    const std::uint32_t a[4] = {
        in_a ? __float_as_uint(tf32_rn(a_row[k0])) : 0u, in_b ? __float_as_uint(tf32_rn(b_row[k0])) : 0u,
        in_a ? __float_as_uint(tf32_rn(a_row[k0 + 4])) : 0u, in_b ? __float_as_uint(tf32_rn(b_row[k0 + 4])) : 0u};
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int c = c0 + 8 * n + g;
      const float* column = B + c * stride + q + k0;
      const std::uint32_t b[2] = {c < cols ? __float_as_uint(tf32_rn(column[0])) : 0u,
                                  c < cols ? __float_as_uint(tf32_rn(column[4])) : 0u};
      warp_mma::mma_tf32_16x8x8(acc[n], a, b);
    }
  }
}

/// For every output (r, c), r < rows, c < cols: acc = begin(r, c), then each run's terms (operands
/// rounded to TF32, summed on the tensor cores), then end(r, c, acc). Warp w of the block takes the
/// tiles w, w + Threads / 32, … of 16 rows × 8·NT columns, row tiles outermost; each output is one
/// lane's, as in tiled_sums. Threads: the block's (a multiple of 32; every thread must call it).
template <int Threads, int NT = 2, class Begin, class End, terms... Terms>
__device__ __forceinline__ void mma_sums(int rows, int cols, Begin&& begin, End&& end, const sum_run<Terms>&... runs) {
  constexpr int warps = Threads / 32, width = 8 * NT;
  const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, q = lane & 3;
  const int RT = (rows + 15) / 16, CT = (cols + width - 1) / width;
  for (int tile = static_cast<int>(threadIdx.x) >> 5; tile < RT * CT; tile += warps) {
    const int r0 = (tile / CT) * 16, c0 = (tile % CT) * width;
    float acc[NT][4];
    // Output e of tile n of this lane: row r0 + g (+ 8 for e >= 2), column c0 + 8n + 2q (+ 1 for odd e).
    const auto row_of = [&](int e) { return r0 + g + (e >= 2 ? 8 : 0); };
    const auto col_of = [&](int n, int e) { return c0 + 8 * n + 2 * q + (e & 1); };
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[n][e] = row_of(e) < rows && col_of(n, e) < cols ? begin(row_of(e), col_of(n, e)) : 0.0f;
    (mma_run<NT>(runs, r0, c0, rows, cols, acc), ...);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (row_of(e) < rows && col_of(n, e) < cols) end(row_of(e), col_of(n, e), acc[n][e]);
  }
}

/// tiled_sums<TR, TC, Threads> (binary32, the twin's order: kernel = twin bit for bit), or with
/// `tensor_cores` mma_sums<Threads> (TF32 operands): the backward's products take either from its
/// problem's delta_rule_backward_operands.
template <int TR, int TC, int Threads, class Begin, class End, terms... Terms>
__device__ __forceinline__ void product_sums(bool tensor_cores, int rows, int cols, Begin&& begin, End&& end,
                                             const sum_run<Terms>&... runs) {
  if (tensor_cores)
    mma_sums<Threads>(rows, cols, begin, end, runs...);
  else
    tiled_sums<TR, TC, Threads>(rows, cols, begin, end, runs...);
}

}  // namespace
}  // namespace kalman_oracle::gpu
