// Benchmark of the batched Möbius scans (docs/kernels.md, "Measured"): JSON lines on stdout, one
// per (shape of problem, path, block shape), each with the kernel's time, its effective bandwidth
// (bytes read + written / time) and its ratio to a device-to-device copy of the same bytes measured
// in the same run (the memory-bound floor of a scan that reads and writes every map once).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/mobius_scan.hpp"
#include "timing.hpp"

namespace kalman_oracle::gpu::bench {

namespace {

struct problem {
  const char* name;
  int lanes, T;
};

}  // namespace

void mobius_scan_bench(int repeats, const cudaDeviceProp& prop) {
  // KLA's precision scan at B = 8, M = 2048, S = 16 has 262144 lanes (T = 1024 here: 4.3 GB a
  // buffer); 4096 lanes of 65536 maps is the same volume in long lanes; a few long lanes is the
  // split-T case.
  const problem problems[] = {{"kla_lanes_B8_M2048_S16_T1024", 262144, 1024},
                              {"lanes_4096_T65536", 4096, 65536},
                              {"few_lanes_64_T65536", 64, 65536},
                              {"one_lane_T1048576", 1, 1048576}};
  for (const problem& p : problems) {
    const std::size_t count = static_cast<std::size_t>(p.lanes) * static_cast<std::size_t>(p.T);
    const std::size_t bytes = count * sizeof(mobius_f32);
    std::vector<mobius_f32> host(count);
    // Positive entries in [1/8, 8) from a cheap hash (4.3 GB of maps: no random engine needed).
    for (std::size_t i = 0; i < count; ++i) {
      auto entry = [i](unsigned k) {
        return 0.125f + static_cast<float>(((i * 2654435761u + k * 40503u) >> 7) % 1000) * 0.0079f;
      };
      host[i] = {entry(0), entry(1), entry(2), entry(3)};
    }
    mobius_f32 *in = nullptr, *out = nullptr;
    void* scratch = nullptr;
    check(cudaMalloc(&in, bytes), "cudaMalloc");
    check(cudaMalloc(&out, bytes), "cudaMalloc");
    std::size_t scratch_bytes = 0;
    for (const auto shape : compiled_mobius_scan_shapes)
      scratch_bytes =
          std::max(scratch_bytes, mobius_scan_scratch_bytes(mobius_scan_path::tiled_three_pass, shape, p.lanes, p.T));
    if (scratch_bytes > 0) check(cudaMalloc(&scratch, scratch_bytes), "cudaMalloc");
    check(cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");

    const double copy_ms =
        median_ms(repeats, [&] { check(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice), "copy"); });
    const double gb = 2.0 * static_cast<double>(bytes) / 1e9;
    std::printf(
        "{\"device\": \"%s\", \"problem\": \"%s\", \"lanes\": %d, \"T\": %d, \"path\": \"device_copy\", \"ms\": %.4f, "
        "\"GB_per_s\": %.1f, \"ratio_to_copy\": 1.0}\n",
        prop.name, p.name, p.lanes, p.T, copy_ms, gb / (copy_ms / 1e3));
    for (const mobius_scan_path path : all_mobius_scan_paths) {
      if (path == mobius_scan_path::tiled_three_pass && p.lanes > 65535) continue;
      for (const auto shape : compiled_mobius_scan_shapes) {
        if (path == mobius_scan_path::sequential_lanes && shape.items_per_thread != 1) continue;
        const double ms = median_ms(repeats, [&] { mobius_scan_device(in, out, scratch, p.lanes, p.T, path, shape); });
        check(cudaGetLastError(), "kernel");
        std::printf(
            "{\"device\": \"%s\", \"problem\": \"%s\", \"lanes\": %d, \"T\": %d, \"path\": \"%s\", \"shape\": \"%s\", "
            "\"ms\": %.4f, \"GB_per_s\": %.1f, \"ratio_to_copy\": %.3f}\n",
            prop.name, p.name, p.lanes, p.T, to_string(path).c_str(),
            path == mobius_scan_path::sequential_lanes ? "thread_per_lane" : to_string(shape).c_str(), ms,
            gb / (ms / 1e3), ms / copy_ms);
      }
    }
    cudaFree(in);
    cudaFree(out);
    cudaFree(scratch);
  }
}

}  // namespace kalman_oracle::gpu::bench
