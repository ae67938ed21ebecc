// What every reference adjoint (grad/*.hpp) shares: named sets of tensors for cotangents and
// gradients, the checks of given cotangents, and the broadcasting rule for gradients. The gate rule
// is grad/gates.hpp, the memory (delta-rule) adjoint of the fixed-gain family and both KDN models
// grad/memory.hpp. docs/gradients.md derives everything.
//
// Conventions (docs/math.md §9):
//   * The loss is L = Σ_outputs ⟨output, cotangent⟩: Σ_t ⟨o_t, do_t⟩ + ⟨S_T, dS_T⟩ + the other
//     outputs a model has (final covariance / λ_T, η_T, readout variances, ...), as fla's tests do.
//     A cotangent is given per output name ("o", "final_state", ...), in the output's full shape;
//     an output without a cotangent contributes nothing (a zero cotangent).
//   * The gradient of L is returned for EVERY input of the model's inputs struct, under the
//     field's name ("q", "k", "v", "g", "beta", ...; "scale" for τ, a rank-0 tensor).
//   * Broadcasting: an input given in a shape that broadcasts to its full shape is read many times;
//     its gradient is the sum over the broadcast axes, shaped like the tensor given.
//   * An optional input that is absent (a default prior, S_0 = 0, ...) gets the gradient of L with
//     respect to that default, in the input's FULL shape (so a caller can always read it).
//   * Gates: with gate_space::log the input is g and α = e^g, so dL/dg = α dL/dα; with
//     gate_space::linear the input is α itself (grad/gates.hpp).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "kalman_oracle/tensor/validate.hpp"

namespace kalman_oracle {

/// An ordered set of tensors looked up by name: cotangents (by output name) and gradients (by
/// input name).
template <class T>
class named_tensors {
 public:
  named_tensors() = default;
  named_tensors(std::initializer_list<tensor<T>> items) : items_(items) {}

  /// Adds x under x.name(), replacing a tensor of the same name.
  void set(tensor<T> x) {
    for (auto& item : items_)
      if (item.name() == x.name()) {
        item = std::move(x);
        return;
      }
    items_.push_back(std::move(x));
  }
  const tensor<T>* find(std::string_view name) const {
    for (const auto& item : items_)
      if (item.name() == name) return &item;
    return nullptr;
  }
  tensor<T>* find(std::string_view name) {
    for (auto& item : items_)
      if (item.name() == name) return &item;
    return nullptr;
  }
  const tensor<T>& at(std::string_view name) const {
    if (const tensor<T>* x = find(name)) return *x;
    throw std::out_of_range("no tensor named '" + std::string(name) + "'");
  }
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  const std::vector<tensor<T>>& items() const { return items_; }
  std::vector<tensor<T>>& items() { return items_; }

 private:
  std::vector<tensor<T>> items_;
};

/// Cotangents of a model's outputs, by output name (missing: zero).
template <class T>
using cotangents = named_tensors<T>;
/// Gradients of the loss, by input name (the field names of the model's inputs struct).
template <class T>
using gradients = named_tensors<T>;

namespace detail::grad {

/// The cotangent of output `name` with the output's shape `shape`, or nullptr when none is given.
/// A given cotangent must have exactly that shape and be finite.
template <class T>
const tensor<T>* cotangent(const cotangents<T>& cot, const std::string& name, const shape_t& shape) {
  const tensor<T>* c = cot.find(name);
  if (c == nullptr) return nullptr;
  if (c->shape() != shape)
    throw input_error("cotangent " + name + ": shape " + to_string(c->shape()) + ", expected the output's shape " +
                      to_string(shape));
  require_finite(*c);
  return c;
}

/// Every cotangent names an output of the model (a misspelt name would silently be a zero).
template <class T>
void require_known_cotangents(const cotangents<T>& cot, std::initializer_list<std::string_view> outputs,
                              const std::string& model) {
  for (const auto& c : cot.items()) {
    bool known = false;
    for (std::string_view name : outputs) known = known || c.name() == name;
    if (!known) {
      std::ostringstream os;
      os << "cotangent " << c.name() << ": " << model << " has no output of that name; outputs:";
      for (std::string_view name : outputs) os << ' ' << name;
      throw input_error(os.str());
    }
  }
}

/// The cotangent's element, or zero.
template <class T, class... I>
T cotangent_at(const tensor<T>* c, I... index) {
  return c ? (*c)(index...) : T(0);
}

}  // namespace detail::grad

/// A gradient being accumulated for an input given in shape `given` and read through a broadcast
/// view of shape `full`: add(x, full index) adds x to the element that index reads, so broadcast
/// axes are summed (numpy's rule reversed). The result has the given shape and the given name.
template <class T>
class broadcast_accumulator {
 public:
  broadcast_accumulator(std::string name, const shape_t& given, const shape_t& full)
      : result_(std::move(name), given, T(0)), strides_(full.size(), 0) {
    if (given.size() > full.size())
      throw input_error(result_.name() + ": shape " + to_string(given) + " has more dimensions than " +
                        to_string(full));
    const std::size_t pad = full.size() - given.size();
    std::size_t stride = 1;
    for (std::size_t axis = full.size(); axis-- > pad;) {
      const std::size_t have = given[axis - pad];
      if (have != full[axis] && have != 1)
        throw input_error(result_.name() + ": shape " + to_string(given) + " cannot broadcast to " + to_string(full));
      strides_[axis] = have == 1 ? 0 : stride;
      stride *= have;
    }
  }

  template <class... I>
  void add(const T& x, I... index) {
    static_assert(sizeof...(I) > 0);
    const std::size_t idx[] = {static_cast<std::size_t>(index)...};
    std::size_t off = 0;
    for (std::size_t axis = 0; axis < sizeof...(I); ++axis) off += idx[axis] * strides_[axis];
    // Broadcast axes are summed (planted bug grad_broadcast_overwrites: the last read wins).
    T& slot = result_.data()[off];
    slot = KALMAN_ORACLE_MUTANT(grad_broadcast_overwrites, T(slot + x), x);
  }

  tensor<T>& result() { return result_; }
  tensor<T> take() { return std::move(result_); }

 private:
  tensor<T> result_;
  std::vector<std::size_t> strides_;
};

}  // namespace kalman_oracle
