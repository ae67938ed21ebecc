// Block level of the tiled scan: one tile of Traits::tile_items maps scanned by one block in
// exactly the order of reference/include/kalman_oracle/scan/tiled.hpp (steps 1–3 and the running
// carry), so that the CPU twin (twin/mobius_scan_twin.hpp) computes the same bits. Device code.
//
//   load   the tile into shared memory, coalesced (thread t loads items t, t + threads, …; directly,
//          or through registers while the previous tile is scanned: tile_load_registers);
//   thread thread t folds items [t·I, t·I + I) in order (p_j = x_j ∘ p_{j-1});
//   warp   Kogge–Stone of the thread totals by shuffles (scan/warp.cuh);
//   block  warp 0 scans the warp totals (each warp's last lane with items) the same way;
//   carry  incoming = (lane exclusive ∘ warp exclusive) ∘ carry, each factor only if present,
//          never a compose with the identity; out_j = p_j ∘ incoming;
//   store  coalesced again. Returns the tile's total (without the carry), the same in every thread.
#pragma once

#include "kalman_oracle/gpu/algebra/mobius.cuh"
#include "kalman_oracle/gpu/scan/warp.cuh"

namespace kalman_oracle::gpu {

template <class Traits>
struct tile_storage {
  mobius_f32 items[Traits::tile_items];
  mobius_f32 warp_totals[Traits::warps_per_block];
};

/// a ∘ b where either may be absent; `present_a`/`present_b` say which are there.
__device__ __forceinline__ mobius_f32 compose_present(const mobius_f32& a, bool present_a, const mobius_f32& b,
                                                      bool present_b) {
  if (!present_a) return b;
  if (!present_b) return a;
  return mobius_compose(a, b);
}

/// Thread t's share of a tile's coalesced load (items t, t + threads, …), held in registers so that
/// a kernel can load the next tile while it scans this one (tiled_running_kernel; docs/kernels.md).
template <class Traits>
struct tile_registers {
  mobius_f32 item[Traits::items_per_thread];
};

template <class Traits>
__device__ __forceinline__ void tile_load_registers(const mobius_f32* __restrict__ in, int count,
                                                    tile_registers<Traits>& r) {
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int j = 0; j < Traits::items_per_thread; ++j) {
    const int i = t + j * Traits::threads_per_block;
    if (i < count) r.item[j] = in[i];
  }
}

/// The registers into the tile's shared storage; the caller synchronises before the scan reads it.
template <class Traits>
__device__ __forceinline__ void tile_stage_registers(const tile_registers<Traits>& r, int count,
                                                     tile_storage<Traits>& s) {
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int j = 0; j < Traits::items_per_thread; ++j) {
    const int i = t + j * Traits::threads_per_block;
    if (i < count) s.items[i] = r.item[j];
  }
}

/// Steps thread … store of a tile already in `s.items` (staged and synchronised by the caller).
template <class Traits>
__device__ mobius_f32 tile_block_scan_staged(mobius_f32* __restrict__ out, int count, bool has_carry,
                                             const mobius_f32& carry, tile_storage<Traits>& s) {
  constexpr int I = Traits::items_per_thread, W = Traits::warp_size, B = Traits::warps_per_block;
  constexpr int threads = Traits::threads_per_block;
  const int t = static_cast<int>(threadIdx.x), lane = t % W, warp = t / W;

  // Thread: the sequential fold of this thread's items.
  const int begin = t * I;
  const int n_items = max(0, min(I, count - begin));
  const bool present = n_items > 0;
  mobius_f32 p[I];
  mobius_f32 total{0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < I; ++j) {
    if (j < n_items) {
      p[j] = j == 0 ? s.items[begin] : mobius_compose(s.items[begin + j], p[j - 1]);
      total = p[j];
    }
  }

  // Warp: Kogge–Stone of the thread totals; the warp's total is its last lane with items.
  const mobius_f32 inclusive = warp_inclusive_scan(total, present, lane, W);
  const mobius_f32 lane_exclusive = shuffle_up(inclusive, 1);
  const int present_threads = (count + I - 1) / I;
  const int last_lane = min(W - 1, present_threads - 1 - warp * W);  // < 0: a warp without items
  const mobius_f32 warp_total = shuffle_from(inclusive, max(last_lane, 0));
  if (lane == 0 && last_lane >= 0) s.warp_totals[warp] = warp_total;
  __syncthreads();

  // Block: warp 0 scans the warp totals.
  const int present_warps = (present_threads + W - 1) / W;
  if (warp == 0) {
    const mobius_f32 v = lane < present_warps ? s.warp_totals[lane] : mobius_f32{0.0f, 0.0f, 0.0f, 0.0f};
    const mobius_f32 scanned = warp_inclusive_scan(v, lane < present_warps, lane, B);
    __syncwarp();
    if (lane < present_warps) s.warp_totals[lane] = scanned;
  }
  __syncthreads();
  const mobius_f32 tile_total = s.warp_totals[present_warps - 1];

  // Each thread's incoming prefix, then its outputs (into shared memory, over its own inputs).
  if (present) {
    const mobius_f32 warp_exclusive = warp > 0 ? s.warp_totals[warp - 1] : mobius_f32{};
    const mobius_f32 block_exclusive = compose_present(lane_exclusive, lane > 0, warp_exclusive, warp > 0);
    const bool has_block_exclusive = lane > 0 || warp > 0;
    const mobius_f32 incoming = compose_present(block_exclusive, has_block_exclusive, carry, has_carry);
    const bool has_incoming = has_block_exclusive || has_carry;
#pragma unroll
    for (int j = 0; j < I; ++j)
      if (j < n_items) s.items[begin + j] = has_incoming ? mobius_compose(p[j], incoming) : p[j];
  }
  __syncthreads();
  for (int i = t; i < count; i += threads) out[i] = s.items[i];
  __syncthreads();  // the next tile reuses the storage
  return tile_total;
}

/// Load, then every step above.
template <class Traits>
__device__ mobius_f32 tile_block_scan(const mobius_f32* __restrict__ in, mobius_f32* __restrict__ out, int count,
                                      bool has_carry, const mobius_f32& carry, tile_storage<Traits>& s) {
  for (int i = static_cast<int>(threadIdx.x); i < count; i += Traits::threads_per_block) s.items[i] = in[i];
  __syncthreads();
  return tile_block_scan_staged<Traits>(out, count, has_carry, carry, s);
}

}  // namespace kalman_oracle::gpu
