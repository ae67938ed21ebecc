// The benchmark runner shared by `gpu_bench` and `kalman-oracle-gpu bench` (docs/kernels.md,
// "Benchmarks"): JSON lines on stdout, each kernel's time the median of `repeats` timed runs (CUDA
// events) after 3 warm-ups, beside a device-to-device copy of the same bytes measured in the same run.
#pragma once

#include <string>

namespace kalman_oracle::gpu::bench {

/// The benchmark names `only` may take ("" runs them all).
inline bool known_bench(const std::string& name) {
  return name.empty() || name == "mobius_scan" || name == "kla" || name == "kdn_gain" || name == "delta_rule";
}

/// Runs the benchmarks (`only`: one of them, or "" for all). Exit code: 0 done, 1 no CUDA device or
/// a CUDA error (the reason on stderr, prefixed with `who`).
int run_benches(const std::string& only, int repeats, const char* who);

}  // namespace kalman_oracle::gpu::bench
