// The compile-time knobs of a scan kernel, one traits struct per kernel (docs/kernels.md). The
// same shape, as the runtime tiled_policy of scan/tiled.hpp, drives the CPU twin
// (twin/mobius_scan_twin.hpp). Device code is C++17, so this header does not include the
// reference's C++20 schedules.
#pragma once

namespace kalman_oracle::gpu {

/// Items each thread folds, warps per block; 32 lanes a warp (every NVIDIA GPU).
template <int ItemsPerThread, int WarpsPerBlock>
struct scan_traits {
  static_assert(ItemsPerThread >= 1 && WarpsPerBlock >= 1 && WarpsPerBlock <= 32,
                "one warp scans the warp totals, so at most 32 warps");
  static constexpr int items_per_thread = ItemsPerThread;
  static constexpr int warp_size = 32;
  static constexpr int warps_per_block = WarpsPerBlock;
  static constexpr int threads_per_block = warp_size * warps_per_block;
  static constexpr int tile_items = items_per_thread * threads_per_block;
};

}  // namespace kalman_oracle::gpu
