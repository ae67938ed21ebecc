// Named, row-major tensors of any scalar type, and broadcast views of them (MATH.md conventions:
// token-major [B, T, H, D], states [B, H, K, V]).
//
// Broadcasting follows numpy: a parameter given with fewer dimensions is padded with 1s on the
// left, and a dimension of size 1 stretches to any size. So a static KLA decay ā of shape [M, S]
// is read as [1, 1, M, S] and broadcast over [B, T, M, S]; a per-head noise [H] over [B, T, H].
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kalman_oracle {

using shape_t = std::vector<std::size_t>;

inline std::string to_string(const shape_t& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

inline std::size_t element_count(const shape_t& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

/// Thrown for any input that breaks a rule; the message names the tensor, the index and the rule.
class input_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

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
  T& operator()(I... index) { return data_[offset(index...)]; }
  template <class... I>
  const T& operator()(I... index) const { return data_[offset(index...)]; }

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
