// gpu_bench: the GPU kernels' benchmarks (docs/kernels.md, "Measured"). JSON lines on stdout.
//
//   gpu_bench [--repeats N] [--only mobius_scan|kla|kdn_gain|delta_rule]
//
// Each time is the median of N timed runs (CUDA events) after 3 warm-ups; default N = 20. The same
// benchmarks as `kalman-oracle-gpu bench` (run_benches.hpp); this binary links only the CUDA runtime.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "run_benches.hpp"

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
      if (only.empty() || !kalman_oracle::gpu::bench::known_bench(only)) {
        std::fprintf(stderr, "gpu_bench: --only %s: known benchmarks are mobius_scan, kla, kdn_gain and delta_rule\n",
                     only.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "gpu_bench: unknown argument %s (known: --repeats N, --only NAME)\n", arg.c_str());
      return 2;
    }
  }
  return kalman_oracle::gpu::bench::run_benches(only, repeats, "gpu_bench");
}
