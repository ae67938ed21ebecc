// The kernels of the batched Möbius scan and their layouts, shared by the launchers
// (mobius_scan.hpp), the twins (twin/mobius_scan_twin.hpp), tests and benchmarks.
#pragma once

#include <string>

namespace kalman_oracle::gpu {

/// Which kernel, and the layout it reads and writes.
enum class mobius_scan_path {
  /// One thread a lane, the sequential fold; time-major [T][lanes] (KLA's [B, T, M, S] order):
  /// coalesced, and the right choice whenever there are tens of thousands of lanes.
  sequential_lanes,
  /// One block a lane walking its tiles with a running carry; lane-major [lanes][T].
  tiled_running,
  /// Split T: one block a (lane, tile), an exclusive scan of the tile totals, then every tile
  /// composed with its carry (map/carry/emit); lane-major [lanes][T]. For few lanes and long T.
  tiled_three_pass,
};

inline std::string to_string(mobius_scan_path path) {
  switch (path) {
    case mobius_scan_path::sequential_lanes: return "sequential_lanes";
    case mobius_scan_path::tiled_running: return "tiled_running";
    case mobius_scan_path::tiled_three_pass: return "tiled_three_pass";
  }
  return "unknown";
}

inline constexpr mobius_scan_path all_mobius_scan_paths[] = {
    mobius_scan_path::sequential_lanes, mobius_scan_path::tiled_running, mobius_scan_path::tiled_three_pass};

/// A block shape that is compiled in (items per thread, warps per block; 32 lanes a warp).
struct mobius_scan_shape {
  int items_per_thread = 4;
  int warps_per_block = 4;
};

/// The shapes compiled into the kernels (gpu/src/mobius_scan.cu instantiates exactly these), for
/// tests and benchmarks to iterate over.
inline constexpr mobius_scan_shape compiled_mobius_scan_shapes[] = {{1, 1}, {2, 4}, {4, 4}, {8, 8}};

inline std::string to_string(mobius_scan_shape shape) {
  return std::to_string(shape.items_per_thread) + "x32x" + std::to_string(shape.warps_per_block);
}

}  // namespace kalman_oracle::gpu
