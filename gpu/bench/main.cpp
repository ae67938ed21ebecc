// gpu_bench: the GPU kernels' benchmarks (docs/kernels.md, "Measured"). JSON lines on stdout.
//
//   gpu_bench [--repeats N] [--only mobius_scan|kla|kdn_gain|delta_rule]
//
// Each time is the median of N timed runs (CUDA events) after 3 warm-ups; default N = 20.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "benches.hpp"
#include "kalman_oracle/gpu/device.hpp"
#include "timing.hpp"

using namespace kalman_oracle::gpu;

int main(int argc, char** argv) {
  int repeats = 20;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
      if (repeats < 1) {
        std::fprintf(stderr, "gpu_bench: --repeats must be at least 1\n");
        return 2;
      }
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
      if (only != "mobius_scan" && only != "kla" && only != "kdn_gain" && only != "delta_rule") {
        std::fprintf(stderr, "gpu_bench: --only %s: known benchmarks are mobius_scan, kla, kdn_gain and delta_rule\n",
                     only.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "gpu_bench: unknown argument %s (known: --repeats N, --only NAME)\n", arg.c_str());
      return 2;
    }
  }
  std::string why;
  if (!cuda_device_available(why)) {
    std::fprintf(stderr, "gpu_bench: %s\n", why.c_str());
    return 1;
  }
  try {
    cudaDeviceProp prop{};
    bench::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    if (only.empty() || only == "kla") bench::kla_bench(repeats, prop);
    if (only.empty() || only == "mobius_scan") bench::mobius_scan_bench(repeats, prop);
    if (only.empty() || only == "kdn_gain") bench::kdn_gain_bench(repeats, prop);
    if (only.empty() || only == "delta_rule") bench::delta_rule_bench(repeats, prop);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
