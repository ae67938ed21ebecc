// The batched Möbius scan kernels and their launchers (include/kalman_oracle/gpu/mobius_scan.hpp;
// docs/kernels.md). Each kernel follows a reference schedule operation for operation:
//   sequential_lanes  scan/sequential.hpp, one thread a lane, time-major;
//   tiled_running     scan/tiled.hpp with tile_carry::running, one block a lane;
//   tiled_three_pass  scan/tiled.hpp with tile_carry::three_pass: map (one block a (lane, tile)),
//                     carry (one thread a lane, sequential over the tile totals), emit.
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cuda_check.hpp"
#include "kalman_oracle/gpu/mobius_scan.hpp"
#include "kalman_oracle/gpu/policy.cuh"
#include "kalman_oracle/gpu/scan/block.cuh"

namespace kalman_oracle::gpu {
namespace {

__global__ void sequential_lanes_kernel(const mobius_f32* __restrict__ leaves, mobius_f32* __restrict__ out, int lanes,
                                        int T) {
  const int lane = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (lane >= lanes || T == 0) return;
  const auto L = static_cast<long long>(lanes);
  mobius_f32 prefix = leaves[lane];
  out[lane] = prefix;
  for (int t = 1; t < T; ++t) {
    prefix = mobius_compose(leaves[t * L + lane], prefix);
    out[t * L + lane] = prefix;
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::threads_per_block)
    tiled_running_kernel(const mobius_f32* __restrict__ leaves, mobius_f32* __restrict__ out, int T) {
  __shared__ tile_storage<Traits> storage;
  const long long base = static_cast<long long>(blockIdx.x) * T;
  mobius_f32 carry{};
  bool has_carry = false;
  // Tile k + 1's loads are issued before tile k's scan and land in registers while it runs (a block
  // otherwise waits a memory latency a tile); the order of the composes is unchanged.
  tile_registers<Traits> next;
  tile_load_registers<Traits>(leaves + base, min(Traits::tile_items, T), next);
  for (int begin = 0; begin < T; begin += Traits::tile_items) {
    const int count = min(Traits::tile_items, T - begin);
    tile_stage_registers<Traits>(next, count, storage);
    __syncthreads();
    const int next_begin = begin + Traits::tile_items;
    if (next_begin < T)
      tile_load_registers<Traits>(leaves + base + next_begin, min(Traits::tile_items, T - next_begin), next);
    const mobius_f32 total = tile_block_scan_staged<Traits>(out + base + begin, count, has_carry, carry, storage);
    carry = compose_present(total, true, carry, has_carry);
    has_carry = true;
  }
}

/// Map: block (tile k, lane l) scans its tile alone and records the tile's total.
template <class Traits>
__global__ void __launch_bounds__(Traits::threads_per_block)
    tiled_map_kernel(const mobius_f32* __restrict__ leaves, mobius_f32* __restrict__ out,
                     mobius_f32* __restrict__ totals, int T, int tiles) {
  __shared__ tile_storage<Traits> storage;
  const int tile = static_cast<int>(blockIdx.x), lane = static_cast<int>(blockIdx.y);
  const long long base = static_cast<long long>(lane) * T + static_cast<long long>(tile) * Traits::tile_items;
  const int count = min(Traits::tile_items, T - tile * Traits::tile_items);
  const mobius_f32 total = tile_block_scan<Traits>(leaves + base, out + base, count, false, mobius_f32{}, storage);
  if (threadIdx.x == 0) totals[static_cast<long long>(lane) * tiles + tile] = total;
}

/// Carry: per lane, totals[k] <- totals[k] ∘ … ∘ totals[0] for k < tiles - 1 (the inclusive
/// prefixes of the first tiles - 1 totals: carry k+1), sequentially, as the twin does.
__global__ void tile_carry_kernel(mobius_f32* __restrict__ totals, int lanes, int tiles) {
  const int lane = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (lane >= lanes) return;
  mobius_f32* row = totals + static_cast<long long>(lane) * tiles;
  for (int k = 1; k < tiles - 1; ++k) row[k] = mobius_compose(row[k], row[k - 1]);
}

/// Emit: every output of tile k >= 1 becomes out ∘ carry, carry = the prefix of tiles 0 … k-1.
template <class Traits>
__global__ void tiled_emit_kernel(mobius_f32* __restrict__ out, const mobius_f32* __restrict__ totals, int T,
                                  int tiles) {
  const int lane = static_cast<int>(blockIdx.y);
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x + Traits::tile_items;
  if (i >= T) return;
  const int tile = static_cast<int>(i / Traits::tile_items);
  const long long at = static_cast<long long>(lane) * T + i;
  out[at] = mobius_compose(out[at], totals[static_cast<long long>(lane) * tiles + tile - 1]);
}

/// out[i] = later[i] ∘ earlier[i]: the compose alone, for the test that it equals the host's.
__global__ void compose_pairs_kernel(const mobius_f32* __restrict__ later, const mobius_f32* __restrict__ earlier,
                                     mobius_f32* __restrict__ out, int count) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < count) out[i] = mobius_compose(later[i], earlier[i]);
}

int tiles_of(int T, int tile_items) { return (T + tile_items - 1) / tile_items; }

template <class Traits>
void launch_tiled(const mobius_f32* leaves, mobius_f32* out, void* scratch, int lanes, int T, mobius_scan_path path) {
  if (path == mobius_scan_path::tiled_running) {
    tiled_running_kernel<Traits><<<lanes, Traits::threads_per_block>>>(leaves, out, T);
    check_cuda(cudaGetLastError(), "tiled_running_kernel");
    return;
  }
  const int tiles = tiles_of(T, Traits::tile_items);
  auto* totals = static_cast<mobius_f32*>(scratch);
  tiled_map_kernel<Traits><<<dim3(tiles, lanes), Traits::threads_per_block>>>(leaves, out, totals, T, tiles);
  check_cuda(cudaGetLastError(), "tiled_map_kernel");
  if (tiles <= 1) return;
  tile_carry_kernel<<<(lanes + 127) / 128, 128>>>(totals, lanes, tiles);
  check_cuda(cudaGetLastError(), "tile_carry_kernel");
  const long long rest = static_cast<long long>(T) - Traits::tile_items;
  tiled_emit_kernel<Traits><<<dim3(static_cast<unsigned>((rest + 255) / 256), lanes), 256>>>(out, totals, T, tiles);
  check_cuda(cudaGetLastError(), "tiled_emit_kernel");
}

template <int I, int B>
bool dispatch_shape(mobius_scan_shape shape, const mobius_f32* leaves, mobius_f32* out, void* scratch, int lanes, int T,
                    mobius_scan_path path) {
  if (shape.items_per_thread != I || shape.warps_per_block != B) return false;
  launch_tiled<scan_traits<I, B>>(leaves, out, scratch, lanes, T, path);
  return true;
}

void require_compiled(mobius_scan_shape shape) {
  for (const auto& s : compiled_mobius_scan_shapes)
    if (s.items_per_thread == shape.items_per_thread && s.warps_per_block == shape.warps_per_block) return;
  throw std::invalid_argument("mobius_scan: shape " + to_string(shape) +
                              " is not compiled in (compiled_mobius_scan_shapes lists the ones that are)");
}

}  // namespace

std::size_t mobius_scan_scratch_bytes(mobius_scan_path path, mobius_scan_shape shape, int lanes, int T) {
  if (path != mobius_scan_path::tiled_three_pass) return 0;
  const int tile = shape.items_per_thread * 32 * shape.warps_per_block;
  return static_cast<std::size_t>(lanes) * static_cast<std::size_t>(tiles_of(T, tile)) * sizeof(mobius_f32);
}

void mobius_scan_device(const mobius_f32* leaves, mobius_f32* out, void* scratch, int lanes, int T,
                        mobius_scan_path path, mobius_scan_shape shape) {
  if (lanes < 0 || T < 0)
    throw std::invalid_argument("mobius_scan: lanes and T must be >= 0, got " + std::to_string(lanes) + " and " +
                                std::to_string(T));
  if (lanes == 0 || T == 0) return;
  if (path == mobius_scan_path::sequential_lanes) {
    sequential_lanes_kernel<<<(lanes + 127) / 128, 128>>>(leaves, out, lanes, T);
    check_cuda(cudaGetLastError(), "sequential_lanes_kernel");
    return;
  }
  if (lanes > 65535 && path == mobius_scan_path::tiled_three_pass)
    throw std::invalid_argument("mobius_scan: tiled_three_pass takes at most 65535 lanes (grid y), got " +
                                std::to_string(lanes));
  require_compiled(shape);
  const bool launched = dispatch_shape<1, 1>(shape, leaves, out, scratch, lanes, T, path) ||
                        dispatch_shape<2, 4>(shape, leaves, out, scratch, lanes, T, path) ||
                        dispatch_shape<4, 4>(shape, leaves, out, scratch, lanes, T, path) ||
                        dispatch_shape<8, 8>(shape, leaves, out, scratch, lanes, T, path);
  if (!launched) throw std::logic_error("mobius_scan: compiled_mobius_scan_shapes and the dispatch disagree");
}

std::vector<mobius_f32> mobius_scan_host(const std::vector<mobius_f32>& leaves, int lanes, int T, mobius_scan_path path,
                                         mobius_scan_shape shape) {
  if (lanes < 0 || T < 0 || leaves.size() != static_cast<std::size_t>(lanes) * static_cast<std::size_t>(T))
    throw std::invalid_argument("mobius_scan_host: leaves has " + std::to_string(leaves.size()) +
                                " maps, want lanes * T = " + std::to_string(lanes) + " * " + std::to_string(T));
  std::vector<mobius_f32> out(leaves.size());
  if (leaves.empty()) return out;
  const std::size_t bytes = leaves.size() * sizeof(mobius_f32);
  const std::size_t scratch_bytes = mobius_scan_scratch_bytes(path, shape, lanes, T);
  mobius_f32 *d_in = nullptr, *d_out = nullptr;
  void* d_scratch = nullptr;
  check_cuda(cudaMalloc(&d_in, bytes), "cudaMalloc");
  check_cuda(cudaMalloc(&d_out, bytes), "cudaMalloc");
  if (scratch_bytes > 0) check_cuda(cudaMalloc(&d_scratch, scratch_bytes), "cudaMalloc");
  try {
    check_cuda(cudaMemcpy(d_in, leaves.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    // Poison: every output the kernel fails to write stays NaN (all bits set) and fails the twin test.
    check_cuda(cudaMemset(d_out, 0xff, bytes), "cudaMemset");
    if (d_scratch != nullptr) check_cuda(cudaMemset(d_scratch, 0xff, scratch_bytes), "cudaMemset");
    mobius_scan_device(d_in, d_out, d_scratch, lanes, T, path, shape);
    check_cuda(cudaDeviceSynchronize(), "mobius_scan kernel");
    check_cuda(cudaMemcpy(out.data(), d_out, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  } catch (...) {
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFree(d_scratch);
    throw;
  }
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_scratch);
  return out;
}

std::vector<mobius_f32> mobius_compose_host(const std::vector<mobius_f32>& later,
                                            const std::vector<mobius_f32>& earlier) {
  if (later.size() != earlier.size() || later.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument("mobius_compose_host: later has " + std::to_string(later.size()) +
                                " maps and earlier " + std::to_string(earlier.size()) +
                                "; want equal counts below 2^31");
  std::vector<mobius_f32> out(later.size());
  if (later.empty()) return out;
  const int count = static_cast<int>(later.size());
  const std::size_t bytes = later.size() * sizeof(mobius_f32);
  mobius_f32 *d_later = nullptr, *d_earlier = nullptr, *d_out = nullptr;
  auto release = [&] {
    cudaFree(d_later);
    cudaFree(d_earlier);
    cudaFree(d_out);
  };
  try {
    check_cuda(cudaMalloc(&d_later, bytes), "cudaMalloc");
    check_cuda(cudaMalloc(&d_earlier, bytes), "cudaMalloc");
    check_cuda(cudaMalloc(&d_out, bytes), "cudaMalloc");
    check_cuda(cudaMemcpy(d_later, later.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    check_cuda(cudaMemcpy(d_earlier, earlier.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    check_cuda(cudaMemset(d_out, 0xff, bytes), "cudaMemset");
    compose_pairs_kernel<<<(count + 255) / 256, 256>>>(d_later, d_earlier, d_out, count);
    check_cuda(cudaGetLastError(), "compose_pairs_kernel");
    check_cuda(cudaDeviceSynchronize(), "compose_pairs_kernel");
    check_cuda(cudaMemcpy(out.data(), d_out, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  } catch (...) {
    release();
    throw;
  }
  release();
  return out;
}

}  // namespace kalman_oracle::gpu
