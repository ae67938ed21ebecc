// An input tensor as a kernel reads it: a pointer and the strides of its numpy broadcast to the
// problem's full shape, one spelling for host and device (the kernels and their twins read the same
// elements).
#pragma once

#include "kalman_oracle/gpu/input_element.cuh"

namespace kalman_oracle::gpu {

/// Element (i0, i1, i2[, i3]) of the full shape is data[Σ stride_j i_j] (in elements; 0 along a
/// broadcast axis). `data` points to elements of the problem's input dtype.
struct strided_input {
  const void* data = nullptr;
  long long stride[4] = {0, 0, 0, 0};
};

KALMAN_ORACLE_HD long long offset_of(const strided_input& x, long long i0, long long i1, long long i2,
                                     long long i3 = 0) {
  return i0 * x.stride[0] + i1 * x.stride[1] + i2 * x.stride[2] + i3 * x.stride[3];
}

/// A view of `data` with the given strides (in elements), for host code that lays out its own inputs
/// (validate, the benchmarks).
inline strided_input strided_view(const void* data, long long s0, long long s1, long long s2, long long s3 = 0) {
  strided_input x;
  x.data = data;
  x.stride[0] = s0;
  x.stride[1] = s1;
  x.stride[2] = s2;
  x.stride[3] = s3;
  return x;
}

/// The element at `offset`, widened to binary32 (exact).
template <class In>
KALMAN_ORACLE_HD float load_widened(const strided_input& x, long long offset) {
  return widen(static_cast<const In*>(x.data)[offset]);
}

}  // namespace kalman_oracle::gpu
