// What the PyTorch ops (kla_op.cpp, delta_rule_op.cpp, kdn_gain_op.cpp) share: a tensor's dtype as the
// kernels name it, a tensor as the kernels read it (a strided view, broadcast by strides, nothing
// materialised), and cu_seqlens as the kernels take it.
#pragma once

#include <torch/extension.h>

#include <cstddef>
#include <string>

#include <initializer_list>
#include <optional>
#include <vector>

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

/// An input by name; `tensor` null where an optional input is absent.
struct named_input {
  const char* name;
  const at::Tensor* tensor;
};

inline named_input input(const char* name, const at::Tensor& x) { return {name, &x}; }
inline named_input input(const char* name, const std::optional<at::Tensor>& x) {
  return {name, x.has_value() ? &*x : nullptr};
}

/// Every present input is a CUDA tensor on `first`'s device with `first`'s dtype (the first input is
/// the reference); the error names the tensor and the rule it breaks. Checked before a device guard is
/// taken (a guard on a CPU device is PyTorch's internal assertion, not a message) and before any
/// pointer reaches a kernel (a tensor on another GPU is a foreign pointer there).
inline void require_same_device_and_dtype(std::initializer_list<named_input> inputs, const char* op) {
  const named_input& first = *inputs.begin();
  TORCH_CHECK(first.tensor->is_cuda(), op, ": ", first.name, " is on ", first.tensor->device(),
              "; rule: inputs must be CUDA tensors");
  for (const named_input& x : inputs) {
    if (x.tensor == nullptr) continue;
    TORCH_CHECK(x.tensor->device() == first.tensor->device(), op, ": ", x.name, " is on ", x.tensor->device(),
                "; rule: every input must be on ", first.name, "'s device ", first.tensor->device());
    TORCH_CHECK(x.tensor->scalar_type() == first.tensor->scalar_type(), op, ": ", x.name, " has dtype ",
                x.tensor->scalar_type(), "; rule: every input must have ", first.name, "'s dtype ",
                first.tensor->scalar_type());
  }
}

/// "[2, 130, 4, 8]": a shape spelled for an error message. Messages use this, never an IntArrayRef
/// passed to TORCH_CHECK: in extensions built against the GPU machine's torch that crashes the
/// process (segmentation fault while formatting; seen 2026-12-04 with a probe extension whose
/// TORCH_CHECK(false, "...", x.sizes()) crashed where the same check with a plain string raised
/// RuntimeError), so a bad shape would kill the caller instead of naming the input. Numbers go in as
/// std::to_string too: a check formatting an int64_t crashed the same way (2026-12-05, the op's
/// "cu_seqlens needs B = 1"), while strings and a ScalarType formatted.
inline std::string shape_string(at::IntArrayRef sizes) {
  std::string out = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

/// x expanded to `shape` (numpy broadcasting, strides 0 along broadcast axes), as the kernels read it.
inline strided_input view(const at::Tensor& x, at::IntArrayRef shape, const char* op, const char* name) {
  TORCH_CHECK(x.is_cuda(), op, ": ", name, " must be a CUDA tensor");
  // Named here: torch's own expand error names neither the op nor the input.
  bool broadcasts = x.dim() <= static_cast<int64_t>(shape.size());
  for (int64_t i = 1; broadcasts && i <= x.dim(); ++i) {
    const int64_t have = x.size(x.dim() - i), want = shape[shape.size() - i];
    broadcasts = have == want || have == 1;
  }
  TORCH_CHECK(broadcasts, op, ": ", name, " must broadcast to ", shape_string(shape), ", got ",
              shape_string(x.sizes()));
  const at::Tensor e = x.expand(shape);
  strided_input out;
  out.data = e.data_ptr();
  // An axis of extent 1 is never stepped along: stride 0, as for a broadcast one (the kernels'
  // layout rules read it so).
  for (int64_t axis = 0; axis < e.dim(); ++axis) out.stride[axis] = e.size(axis) == 1 ? 0 : e.stride(axis);
  return out;
}

/// cu_seqlens (fla's) as the kernels take it: int64 offsets in host memory (the grids follow the
/// sequences' lengths, so a CUDA cu_seqlens costs one device-to-host copy and the stream's sync). Checked
/// here for what the kernels' own check (sequence_offsets.hpp: non-decreasing, 0 … T, named there)
/// cannot see: rank, dtype, count, and B = 1.
inline std::vector<long long> sequence_offsets(const at::Tensor& cu_seqlens, int64_t batch, const char* op) {
  TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2, op,
              ": cu_seqlens must be [N + 1] with N >= 1 sequences, got ", shape_string(cu_seqlens.sizes()));
  TORCH_CHECK(cu_seqlens.scalar_type() == at::kInt || cu_seqlens.scalar_type() == at::kLong, op,
              ": cu_seqlens has dtype ", cu_seqlens.scalar_type(), "; rule: int32 or int64 token offsets");
  TORCH_CHECK(batch == 1, op,
              ": cu_seqlens needs B = 1 (the sequences packed in one row), got B = ", std::to_string(batch));
  const at::Tensor host = cu_seqlens.to(at::kCPU, at::kLong).contiguous();
  const int64_t* from = host.data_ptr<int64_t>();
  return std::vector<long long>(from, from + host.size(0));
}

}  // namespace kalman_oracle::gpu::torch_ops
