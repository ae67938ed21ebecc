// Named, row-major tensors of any scalar type (docs/math.md conventions: token-major [B, T, H, D],
// states [B, H, K, V]). A tensor given in a smaller shape is read through a broadcast view
// (tensor/broadcast_view.hpp).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"

namespace kalman_oracle {

template <class T>
class tensor {
 public:
  tensor() = default;
  tensor(std::string name, shape_t shape, const T& fill = T(0))
      : name_(std::move(name)), shape_(std::move(shape)), data_(element_count(shape_), fill) {}
  tensor(std::string name, shape_t shape, std::vector<T> data)
      : name_(std::move(name)), shape_(std::move(shape)), data_(std::move(data)) {
    if (data_.size() != element_count(shape_))
      throw input_error(name_ + ": shape " + to_string(shape_) + " holds " + std::to_string(element_count(shape_)) +
                        " elements, got " + std::to_string(data_.size()));
  }

  const std::string& name() const { return name_; }
  const shape_t& shape() const { return shape_; }
  std::size_t rank() const { return shape_.size(); }
  std::size_t dim(std::size_t axis) const { return shape_.at(axis); }
  std::size_t size() const { return data_.size(); }
  std::vector<T>& data() { return data_; }
  const std::vector<T>& data() const { return data_; }

  /// Row-major offset of a full index.
  template <class... I>
  std::size_t offset(I... index) const {
    static_assert(sizeof...(I) > 0);
    const std::size_t idx[] = {static_cast<std::size_t>(index)...};
    std::size_t off = 0;
    for (std::size_t axis = 0; axis < sizeof...(I); ++axis) off = off * shape_[axis] + idx[axis];
    return off;
  }
  template <class... I>
  T& operator()(I... index) {
    return data_[offset(index...)];
  }
  template <class... I>
  const T& operator()(I... index) const {
    return data_[offset(index...)];
  }

  /// The multi-index of a flat offset, for messages.
  shape_t index_of(std::size_t flat) const {
    shape_t idx(shape_.size());
    for (std::size_t axis = shape_.size(); axis-- > 0;) {
      idx[axis] = flat % shape_[axis];
      flat /= shape_[axis];
    }
    return idx;
  }

 private:
  std::string name_;
  shape_t shape_;
  std::vector<T> data_;
};

}  // namespace kalman_oracle
