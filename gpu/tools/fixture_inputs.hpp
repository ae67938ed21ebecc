// A fixture's input tensors as the GPU kernels read them (plain C++, no MPFR): each safetensors
// entry kept as its bytes, with the strides of its numpy broadcast to the shape the kernel indexes
// (gpu/include/kalman_oracle/gpu/strided_input.cuh). Errors (kalman_oracle::input_error, exit 2) name the tensor and the rule
// it breaks.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kalman_oracle/gpu/input_element.cuh"
#include "kalman_oracle/gpu/strided_input.cuh"
#include "kalman_oracle/io/safetensors.hpp"
#include "kalman_oracle/tensor/input_error.hpp"

namespace kalman_oracle::gpu::tools {

/// The fixture's model, from its metadata (fixtures/lib/fixture_file.cpp writes it as "model").
inline std::string fixture_model(const safetensors::file& f, const std::string& source) {
  const auto it = f.metadata.find("kalman_oracle");
  if (it == f.metadata.end()) throw input_error(source + ": no kalman_oracle metadata (not a fixture)");
  const auto meta = nlohmann::json::parse(it->second, nullptr, false);
  if (!meta.is_object() || !meta.contains("model") || !meta["model"].is_string())
    throw input_error(source + ": the kalman_oracle metadata has no \"model\" string");
  return meta["model"].get<std::string>();
}

/// The input dtype shared by the named tensors (the kernels read one dtype).
inline input_dtype common_input_dtype(const safetensors::file& f, const std::vector<std::string>& names,
                                      const std::string& source) {
  std::string first;
  safetensors::dtype type = safetensors::dtype::f32;
  for (const std::string& name : names) {
    const safetensors::tensor_entry* e = f.find(name);
    if (e == nullptr) continue;
    if (first.empty()) {
      first = name;
      type = e->type;
    } else if (e->type != type) {
      throw input_error(source + ": tensor " + name + " is " + std::string(safetensors::dtype_name(e->type)) + " but " +
                        first + " is " + std::string(safetensors::dtype_name(type)) +
                        "; rule: the GPU kernels read every input in one dtype");
    }
  }
  switch (type) {
    case safetensors::dtype::f32: return input_dtype::f32;
    case safetensors::dtype::bf16: return input_dtype::bf16;
    case safetensors::dtype::f16: return input_dtype::f16;
    default:
      throw input_error(source + ": inputs are " + std::string(safetensors::dtype_name(type)) +
                        "; rule: the GPU kernels read F32, BF16 or F16 inputs");
  }
}

/// `entry` read through numpy broadcasting to `full` (its shape right-aligned; each axis equal or
/// 1). The view points into entry's bytes, which must outlive it.
inline strided_input broadcast_to(const safetensors::tensor_entry& entry, const std::vector<long long>& full,
                                  const std::string& source) {
  const auto& shape = entry.shape;
  const auto describe = [&] {
    std::string s = "[";
    for (std::size_t i = 0; i < full.size(); ++i) s += (i ? ", " : "") + std::to_string(full[i]);
    return s + "]";
  };
  if (shape.size() > full.size() || full.size() > 4)
    throw input_error(source + ": tensor " + entry.name + " has rank " + std::to_string(shape.size()) +
                      "; rule: it must broadcast to " + describe());
  strided_input view;
  view.data = entry.bytes.data();
  long long stride = 1;
  const std::size_t pad = full.size() - shape.size();
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    const long long have = static_cast<long long>(shape[axis]), want = full[pad + axis];
    if (have != want && have != 1)
      throw input_error(source + ": tensor " + entry.name + " axis " + std::to_string(axis) + " has size " +
                        std::to_string(have) + "; rule: it must broadcast to " + describe() + " (size " +
                        std::to_string(want) + " or 1)");
    view.stride[pad + axis] = have == 1 ? 0 : stride;
    stride *= have;
  }
  return view;
}

/// `view` moved to element `offset` of its own data (a sequence's first token, say).
inline strided_input advanced(strided_input view, long long offset, input_dtype dtype) {
  if (view.data != nullptr)
    view.data = static_cast<const char*>(view.data) + offset * (dtype == input_dtype::f32 ? 4 : 2);
  return view;
}

/// The sequences a fixture's kernels run, as [start, end) token ranges: the batch rows (one range
/// [0, T), run for all B rows at once), or with cu_seqlens (B = 1) its offsets, each sequence with its
/// own prior.
inline std::pair<std::vector<long long>, std::vector<long long>> sequences(const safetensors::file& f, long long B,
                                                                           long long T, const std::string& source) {
  std::vector<long long> starts{0}, ends{T};
  if (const auto* cu = f.find("cu_seqlens")) {
    if (B != 1) throw input_error(source + ": cu_seqlens needs B = 1");
    const std::vector<std::int64_t> offsets = safetensors::to_int64s(*cu);
    starts.clear();
    ends.clear();
    for (std::size_t n = 0; n + 1 < offsets.size(); ++n) {
      if (offsets[n] < 0 || offsets[n + 1] < offsets[n] || offsets[n + 1] > T)
        throw input_error(source + ": cu_seqlens must rise from 0 to at most T");
      starts.push_back(offsets[n]);
      ends.push_back(offsets[n + 1]);
    }
  }
  return {starts, ends};
}

/// The fixture's cotangent `name` widened to binary32 into `to`, or null where the fixture has none (a
/// zero cotangent).
inline const float* fixture_cotangent(const safetensors::file& f, const char* name, std::vector<float>& to) {
  const safetensors::tensor_entry* e = f.find(name);
  if (e == nullptr) return nullptr;
  for (const double x : safetensors::to_doubles(*e)) to.push_back(static_cast<float>(x));
  return to.data();
}

/// Each kernel gradient that the fixture certifies, under the fixture's name and shape, into `out`
/// (input_error where the element counts differ: the kernels read inputs broadcast to full shapes and
/// do not sum their gradients back over broadcast axes).
inline void add_fixture_gradients(safetensors::file& out, const safetensors::file& f, const std::string& source,
                                  std::initializer_list<std::pair<const char*, const std::vector<float>*>> gradients) {
  for (const auto& [name, values] : gradients) {
    const safetensors::tensor_entry* want = f.find(name);
    if (want == nullptr) continue;  // e.g. no initial state's gradient where the fixture has none
    if (element_count(want->shape) != values->size())
      throw input_error(source + ": gradient " + name + " has shape " + to_string(want->shape) +
                        " but the kernel's has " + std::to_string(values->size()) + " elements");
    out.tensors.push_back(safetensors::make_f32(name, want->shape, *values));
  }
}

}  // namespace kalman_oracle::gpu::tools
