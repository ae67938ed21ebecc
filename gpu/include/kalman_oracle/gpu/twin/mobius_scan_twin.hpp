// The CPU twin of the batched Möbius scans (mobius_scan.hpp): the reference's schedules
// (scan/sequential.hpp, scan/tiled.hpp) run over the kernels' own binary32 arithmetic
// (algebra/mobius.cuh), lane by lane. Each kernel follows its schedule operation for operation, so
// the twin computes the kernel's bits; gpu/tests/mobius_scan_gpu_test.cpp checks that on the GPU,
// and CI checks the twin against the exact scan (gpu/tests/mobius_scan_twin_test.cpp).
#pragma once

#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/algebra/mobius.cuh"
#include "kalman_oracle/gpu/mobius_scan_path.hpp"
#include "kalman_oracle/scan/sequential.hpp"
#include "kalman_oracle/scan/tiled.hpp"

namespace kalman_oracle::gpu {

/// The twin of mobius_scan_device: same layouts, same results bit for bit.
inline std::vector<mobius_f32> mobius_scan_twin(const std::vector<mobius_f32>& leaves, int lanes, int T,
                                                mobius_scan_path path, mobius_scan_shape shape) {
  if (lanes < 0 || T < 0 || leaves.size() != static_cast<std::size_t>(lanes) * static_cast<std::size_t>(T))
    throw std::invalid_argument("mobius_scan_twin: leaves has " + std::to_string(leaves.size()) +
                                " maps, want lanes * T = " + std::to_string(lanes) + " * " + std::to_string(T));
  const mobius_f32_monoid monoid;
  std::vector<mobius_f32> out(leaves.size());
  const auto L = static_cast<std::size_t>(lanes), n = static_cast<std::size_t>(T);
  if (path == mobius_scan_path::sequential_lanes) {
    std::vector<mobius_f32> lane(n);
    for (std::size_t l = 0; l < L; ++l) {
      for (std::size_t t = 0; t < n; ++t) lane[t] = leaves[t * L + l];
      const auto scanned = sequential_inclusive_scan(monoid, std::span<const mobius_f32>(lane));
      for (std::size_t t = 0; t < n; ++t) out[t * L + l] = scanned[t];
    }
    return out;
  }
  const tiled_policy policy{static_cast<std::size_t>(shape.items_per_thread), 32,
                            static_cast<std::size_t>(shape.warps_per_block),
                            path == mobius_scan_path::tiled_running ? tile_carry::running : tile_carry::three_pass};
  for (std::size_t l = 0; l < L; ++l) {
    const auto scanned = tiled_inclusive_scan(monoid, std::span<const mobius_f32>(leaves).subspan(l * n, n), policy);
    std::copy(scanned.begin(), scanned.end(), out.begin() + static_cast<std::ptrdiff_t>(l * n));
  }
  return out;
}

}  // namespace kalman_oracle::gpu
