// Warp level of the tiled scan (reference/include/kalman_oracle/scan/tiled.hpp, step 2): a
// Kogge–Stone inclusive scan by shuffles. At stride d every lane reads lane l-d's value of the
// previous stride (a shuffle reads registers before anyone writes: the snapshot the twin keeps),
// and a lane with a value composes: v_l <- v_l ∘ v_{l-d}. Lanes without a value (a suffix) only
// take part in the shuffles. Device code only.
#pragma once

#include "kalman_oracle/gpu/algebra/mobius.cuh"

namespace kalman_oracle::gpu {

__device__ __forceinline__ mobius_f32 shuffle_up(const mobius_f32& m, int delta) {
  constexpr unsigned all_lanes = 0xffffffffu;
  return {__shfl_up_sync(all_lanes, m.a, delta), __shfl_up_sync(all_lanes, m.b, delta),
          __shfl_up_sync(all_lanes, m.c, delta), __shfl_up_sync(all_lanes, m.d, delta)};
}

__device__ __forceinline__ mobius_f32 shuffle_from(const mobius_f32& m, int source_lane) {
  constexpr unsigned all_lanes = 0xffffffffu;
  return {__shfl_sync(all_lanes, m.a, source_lane), __shfl_sync(all_lanes, m.b, source_lane),
          __shfl_sync(all_lanes, m.c, source_lane), __shfl_sync(all_lanes, m.d, source_lane)};
}

/// Inclusive Kogge–Stone over the first `lanes` lanes (strides d < lanes); every lane of the warp
/// must call it. `present`: this lane has a value.
__device__ __forceinline__ mobius_f32 warp_inclusive_scan(mobius_f32 v, bool present, int lane, int lanes) {
  for (int d = 1; d < lanes; d *= 2) {
    const mobius_f32 source = shuffle_up(v, d);
    if (present && lane >= d) v = mobius_compose(v, source);
  }
  return v;
}

}  // namespace kalman_oracle::gpu
