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
