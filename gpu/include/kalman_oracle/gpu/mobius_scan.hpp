// Batched Möbius prefix scans on the GPU: many independent lanes (KLA's precision per (m, s),
// diagonal KDN's covariance per channel, isotropic KDN's per head), each the inclusive scan
// out_t = x_t ∘ … ∘ x_0 of its T maps with power-of-two rescaling (docs/kernels.md). Plain C++:
// callable from code that nvcc never sees; the kernels are in gpu/src/mobius_scan.cu.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/algebra/mobius.cuh"
#include "kalman_oracle/gpu/device.hpp"
#include "kalman_oracle/gpu/mobius_scan_path.hpp"

namespace kalman_oracle::gpu {

/// Scratch bytes tiled_three_pass needs for `lanes` lanes of T maps (0 for the other paths).
std::size_t mobius_scan_scratch_bytes(mobius_scan_path path, mobius_scan_shape shape, int lanes, int T);

/// Device pointers in, device pointers out (asynchronous on the default stream). `scratch` holds
/// mobius_scan_scratch_bytes(...) bytes. Throws std::invalid_argument for a shape that is not
/// compiled in or sizes out of range, std::runtime_error for a CUDA error.
void mobius_scan_device(const mobius_f32* leaves, mobius_f32* out, void* scratch, int lanes, int T,
                        mobius_scan_path path, mobius_scan_shape shape);

/// Host vectors in and out, for tests: copies in, poisons the output with NaN, runs, copies back.
std::vector<mobius_f32> mobius_scan_host(const std::vector<mobius_f32>& leaves, int lanes, int T, mobius_scan_path path,
                                         mobius_scan_shape shape);

/// Host vectors in and out, for tests: out[i] = mobius_compose(later[i], earlier[i]) computed on
/// the device (product and power-of-two rescale; the rescale's device path is not the host's
/// std::ldexp, and must give the same bits: gpu/tests/mobius_scan_gpu_test.cpp).
std::vector<mobius_f32> mobius_compose_host(const std::vector<mobius_f32>& later,
                                            const std::vector<mobius_f32>& earlier);

}  // namespace kalman_oracle::gpu
