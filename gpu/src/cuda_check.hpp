// A CUDA error as an exception naming the call (private to gpu/src).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace kalman_oracle::gpu {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(status));
}

}  // namespace kalman_oracle::gpu
