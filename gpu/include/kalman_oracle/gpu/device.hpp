// Whether a CUDA device is there (plain C++; gpu/src/device.cu). The GPU tests and tools skip, or
// refuse, with the reason this gives.
#pragma once

#include <string>

namespace kalman_oracle::gpu {

/// True when a CUDA device is usable; otherwise `why` says why not.
bool cuda_device_available(std::string& why);

/// Device 0's name and compute capability, e.g. "NVIDIA H200 (sm_90)".
std::string cuda_device_name();

}  // namespace kalman_oracle::gpu
