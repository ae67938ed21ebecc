// The benchmarks gpu_bench runs (docs/kernels.md, "Measured"): each prints JSON lines on stdout,
// with a device-to-device copy of the same bytes measured in the same run as the baseline.
#pragma once

#include <cuda_runtime.h>

namespace kalman_oracle::gpu::bench {

void mobius_scan_bench(int repeats, const cudaDeviceProp& prop);
void kla_bench(int repeats, const cudaDeviceProp& prop);
void kdn_gain_bench(int repeats, const cudaDeviceProp& prop);
void delta_rule_bench(int repeats, const cudaDeviceProp& prop);

}  // namespace kalman_oracle::gpu::bench
