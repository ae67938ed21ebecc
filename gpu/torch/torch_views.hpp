// What the PyTorch ops (kla_op.cpp, delta_rule_op.cpp) share: a tensor's dtype as the kernels name it,
// and a tensor as the kernels read it (a strided view, broadcast by strides, nothing materialised).
#pragma once

#include <torch/extension.h>

#include "kalman_oracle/gpu/input_element.cuh"
#include "kalman_oracle/gpu/strided_input.cuh"

namespace kalman_oracle::gpu::torch_ops {

/// The kernels' name for x's dtype; `op` names the operation in the error.
inline input_dtype dtype_of(const at::Tensor& x, const char* op) {
  switch (x.scalar_type()) {
    case at::kFloat: return input_dtype::f32;
    case at::kBFloat16: return input_dtype::bf16;
    case at::kHalf: return input_dtype::f16;
    default: TORCH_CHECK(false, op, ": inputs must be float32, bfloat16 or float16, got ", x.scalar_type());
  }
}

/// x expanded to `shape` (numpy broadcasting, strides 0 along broadcast axes), as the kernels read it.
inline strided_input view(const at::Tensor& x, at::IntArrayRef shape, const char* op, const char* name) {
  TORCH_CHECK(x.is_cuda(), op, ": ", name, " must be a CUDA tensor");
  const at::Tensor e = x.expand(shape);
  strided_input out;
  out.data = e.data_ptr();
  // An axis of extent 1 is never stepped along: stride 0, as for a broadcast one (the kernels'
  // layout rules read it so).
  for (int64_t axis = 0; axis < e.dim(); ++axis) out.stride[axis] = e.size(axis) == 1 ? 0 : e.stride(axis);
  return out;
}

}  // namespace kalman_oracle::gpu::torch_ops
