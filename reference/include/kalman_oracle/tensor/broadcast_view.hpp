// Broadcast views: a tensor given in a smaller shape, read as if it had the full one.
//
// Broadcasting follows numpy: a parameter given with fewer dimensions is padded with 1s on the
// left, and a dimension of size 1 stretches to any size. So a static KLA decay ā of shape [M, S]
// is read as [1, 1, M, S] and broadcast over [B, T, M, S]; a per-head noise [H] over [B, T, H].
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle {

/// A read-only view of a tensor broadcast to a larger shape (stride 0 along stretched axes).
template <class T>
class broadcast_view {
 public:
  broadcast_view(const tensor<T>& source, const shape_t& target) : source_(&source), shape_(target) {
    const shape_t& s = source.shape();
    if (s.size() > target.size())
      throw input_error(source.name() + ": shape " + to_string(s) + " has more dimensions than the expected " +
                        to_string(target));
    strides_.assign(target.size(), 0);
    const std::size_t pad = target.size() - s.size();
    std::size_t stride = 1;
    for (std::size_t axis = target.size(); axis-- > pad;) {
      const std::size_t have = s[axis - pad];
      if (have != target[axis] && have != 1)
        throw input_error(source.name() + ": shape " + to_string(s) + " cannot broadcast to " + to_string(target) +
                          " (dimension " + std::to_string(axis) + " is " + std::to_string(have) + ", expected " +
                          std::to_string(target[axis]) + " or 1)");
      strides_[axis] = have == 1 ? 0 : stride;
      stride *= have;
    }
  }

  const shape_t& shape() const { return shape_; }
  const std::string& name() const { return source_->name(); }
  template <class... I>
  const T& operator()(I... index) const {
    static_assert(sizeof...(I) > 0);
    const std::size_t idx[] = {static_cast<std::size_t>(index)...};
    std::size_t off = 0;
    for (std::size_t axis = 0; axis < sizeof...(I); ++axis) off += idx[axis] * strides_[axis];
    return source_->data()[off];
  }

 private:
  const tensor<T>* source_;
  shape_t shape_;
  std::vector<std::size_t> strides_;
};

}  // namespace kalman_oracle
