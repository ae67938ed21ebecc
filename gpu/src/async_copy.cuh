// Asynchronous copies from global to shared memory (cp.async, sm_80 and later): a thread issues a
// copy and goes on; the data lands in shared memory without passing through its registers, so a block
// has all of a stage's loads in flight at once instead of one a thread at a time. Private to gpu/src.
#pragma once

#include <cuda_runtime.h>

namespace kalman_oracle::gpu {
namespace {

/// Starts copying one binary32 value from global memory into shared memory (4 bytes; the cache
/// operator .ca keeps it in L1 too, where other blocks of the SM may read it).
__device__ __forceinline__ void copy_async(float* to, const float* from) {
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared), "l"(from));
}
/// Starts copying a rows × cols block of binary32 values, row r from from + r · from_stride into
/// to + r · to_stride, the block's Threads threads together (every one must call it, with the same
/// arguments): 16 bytes a copy (cp.async.cg, through L2 only) where cols and both strides are multiples
/// of 4 and both blocks start 16-byte aligned, else 4 bytes a copy. The 16-byte copies issue a quarter of
/// the instructions, and the index arithmetic (a division by the row's length) once per four values.
template <int Threads>
__device__ __forceinline__ void copy_rows_async(float* to, int to_stride, const float* from, long long from_stride,
                                                int rows, int cols) {
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  const bool vector = cols % 4 == 0 && to_stride % 4 == 0 && from_stride % 4 == 0 && (shared & 15u) == 0 &&
                      (reinterpret_cast<unsigned long long>(from) & 15u) == 0;
  if (vector) {
    const int quads = cols / 4;
    for (int x = static_cast<int>(threadIdx.x); x < rows * quads; x += Threads) {
      const int r = x / quads, c = (x - r * quads) * 4;
      asm volatile(
          "cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared + 4u * static_cast<unsigned>(r * to_stride + c)),
          "l"(from + r * from_stride + c));
    }
  } else {
    for (int x = static_cast<int>(threadIdx.x); x < rows * cols; x += Threads) {
      const int r = x / cols, c = x - r * cols;
      copy_async(to + r * to_stride + c, from + r * from_stride + c);
    }
  }
}
/// Closes the group of this thread's copies issued since the last commit.
__device__ __forceinline__ void stage_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits until at most `Pending` committed groups are still in flight (this thread's copies: a
/// __syncthreads after it makes every thread's visible to the block).
template <int Pending>
__device__ __forceinline__ void stage_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

}  // namespace
}  // namespace kalman_oracle::gpu
