// run_benches.hpp's runner: checks for a device, then runs the benchmarks asked for.
#include "run_benches.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <exception>

#include "benches.hpp"
#include "kalman_oracle/gpu/device.hpp"
#include "timing.hpp"

namespace kalman_oracle::gpu::bench {

int run_benches(const std::string& only, int repeats, const char* who) {
  std::string why;
  if (!cuda_device_available(why)) {
    std::fprintf(stderr, "%s: %s\n", who, why.c_str());
    return 1;
  }
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    if (only.empty() || only == "kla") kla_bench(repeats, prop);
    if (only.empty() || only == "mobius_scan") mobius_scan_bench(repeats, prop);
    if (only.empty() || only == "kdn_gain") kdn_gain_bench(repeats, prop);
    if (only.empty() || only == "delta_rule") delta_rule_bench(repeats, prop);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who, e.what());
    return 1;
  }
  return 0;
}

}  // namespace kalman_oracle::gpu::bench
