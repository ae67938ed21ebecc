// The GPU tests' skip: without a usable CUDA device a test prints "SKIP: <why>" (CTest's
// SKIP_REGULAR_EXPRESSION, gpu/CMakeLists.txt) and returns.
#pragma once

#include <cstdio>
#include <string>

#include "kalman_oracle/gpu/device.hpp"

namespace kalman_oracle::gpu::testing {

inline bool skip_without_device() {
  std::string why;
  if (cuda_device_available(why)) return false;
  std::printf("SKIP: %s: the GPU tests need a CUDA device (CI runs the twins instead)\n", why.c_str());
  return true;
}

}  // namespace kalman_oracle::gpu::testing
