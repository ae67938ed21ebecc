// The independent truths the reference adjoints (grad/*.hpp) are checked against, for any model
// described by a "model" object (fixed_gain_model, kla_model, ... in the grad/ headers):
//
//   tape_gradients(model, in, cot)             reverse mode: the model template run over
//                                              tape_scalar<B> (grad/tape.hpp), one reverse sweep of L
//   directional_derivative(model, in, u, cot)  forward mode: the model run over dual<B>
//                                              (scalar/dual.hpp), inputs' tangents = u; returns dL[u]
//   central_difference(model, in, u, cot, h)   (L(x + h u) − L(x − h u)) / 2h in B (a crude witness:
//                                              use many bits, e.g. 512, and h = 2^-120)
//   loss(model, in, cot)                       L = Σ_outputs ⟨output, cotangent⟩ in B
//   inner_product(g, u)                        ⟨g, u⟩ over the names both hold
//
// A model object provides (see grad/fixed_gain.hpp for the simplest one):
//   template <class T> using inputs_type = ...;          the model's inputs struct
//   template <class T> auto forward(const inputs_type<T>&) const;      the forward form to
//                                                        differentiate (sequential or parallel)
//   template <class T> static gradients<T> backward(const inputs_type<T>&, const cotangents<T>&);
//   template <class U, class T, class F> static inputs_type<U> transform(const inputs_type<T>&, F&& f);
//        every tensor input x (and the query scale, as a rank-0 tensor "scale") replaced by
//        f(role, x), a tensor<U> of x's shape; role = the field name; other fields copied
//   template <class T, class F> static void for_each_output(const outputs&, F&& f);  f(name, tensor)
//   template <class T> static void canonicalise(gradients<T>&, const inputs_type<T>&);   e.g. symmetrise the gradient of a
//        symmetric matrix input (dense: P_0 and a full Ω), so that gradients are comparable
//        whatever the model's code reads of such an input
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/tape.hpp"
#include "kalman_oracle/scalar/dual.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle {

namespace detail::grad {
/// The cotangent of output `name` if given, checked to have the output's shape.
template <class B, class Y>
const tensor<B>* matching_cotangent(const cotangents<B>& cot, const std::string& name, const tensor<Y>& output) {
  const tensor<B>* c = cot.find(name);
  if (c && c->shape() != output.shape())
    throw input_error("cotangent " + name + ": shape " + to_string(c->shape()) + ", expected the output's shape " +
                      to_string(output.shape()));
  return c;
}
}  // namespace detail::grad

/// Calls f(role, tensor) for every tensor input (and "scale" when given), in the struct's order.
template <class Model, template <class> class Inputs, class T, class F>
void for_each_input(const Inputs<T>& in, F&& f) {
  (void)Model::template transform<T>(in, [&](const std::string& role, const tensor<T>& x) {
    f(role, x);
    return x;
  });
}

/// L = Σ_outputs ⟨output, cotangent⟩ (outputs without a cotangent contribute nothing).
template <class Model, class B>
B loss(const Model& model, const typename Model::template inputs_type<B>& in, const cotangents<B>& cot) {
  const auto out = model.forward(in);
  B total(0);
  Model::for_each_output(out, [&](const std::string& name, const tensor<B>& y) {
    if (const tensor<B>* c = detail::grad::matching_cotangent(cot, name, y))
      for (std::size_t i = 0; i < y.size(); ++i) total += y.data()[i] * c->data()[i];
  });
  return total;
}

/// Reverse mode over the model template: the gradient of L for every input given (absent optional
/// inputs are constants of the model and get no entry), canonicalised as the model says.
template <class Model, class B>
gradients<B> tape_gradients(const Model& model, const typename Model::template inputs_type<B>& in,
                            const cotangents<B>& cot) {
  using S = tape_scalar<B>;
  tape<B> record;
  std::vector<std::pair<std::string, std::pair<shape_t, std::vector<std::size_t>>>> variables;
  const auto lifted = Model::template transform<S>(in, [&](const std::string& role, const tensor<B>& x) {
    tensor<S> y(x.name(), x.shape());
    std::vector<std::size_t> ids(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      y.data()[i] = record.variable(x.data()[i]);
      ids[i] = y.data()[i].id();
    }
    variables.push_back({role, {x.shape(), std::move(ids)}});
    return y;
  });
  const auto out = model.forward(lifted);
  S total(0);
  Model::for_each_output(out, [&](const std::string& name, const tensor<S>& y) {
    if (const tensor<B>* c = detail::grad::matching_cotangent(cot, name, y))
      for (std::size_t i = 0; i < y.size(); ++i) total += y.data()[i] * S(c->data()[i]);
  });
  const std::vector<B> adj = record.adjoints(total);
  gradients<B> g;
  for (const auto& [role, var] : variables) {
    tensor<B> d(role, var.first);
    for (std::size_t i = 0; i < d.size(); ++i) d.data()[i] = adj[var.second[i]];
    g.set(std::move(d));
  }
  Model::canonicalise(g, in);
  return g;
}

/// Forward mode over the model template: dL[u], the derivative of L along the direction u (a
/// tensor per input name, each of that input's shape; a missing name is a zero direction).
template <class Model, class B>
B directional_derivative(const Model& model, const typename Model::template inputs_type<B>& in,
                         const named_tensors<B>& direction, const cotangents<B>& cot) {
  using D = dual<B>;
  const auto lifted = Model::template transform<D>(in, [&](const std::string& role, const tensor<B>& x) {
    const tensor<B>* u = direction.find(role);
    if (u && u->shape() != x.shape())
      throw input_error("direction " + role + ": shape " + to_string(u->shape()) + ", expected " +
                        to_string(x.shape()));
    tensor<D> y(x.name(), x.shape());
    for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = u ? D(x.data()[i], u->data()[i]) : D(x.data()[i]);
    return y;
  });
  const auto out = model.forward(lifted);
  B total(0);
  Model::for_each_output(out, [&](const std::string& name, const tensor<D>& y) {
    if (const tensor<B>* c = detail::grad::matching_cotangent(cot, name, y))
      for (std::size_t i = 0; i < y.size(); ++i) total += y.data()[i].tangent() * c->data()[i];
  });
  return total;
}

/// The inputs moved along u: x + step·u for every input u names.
template <class Model, class B>
typename Model::template inputs_type<B> shifted_inputs(const typename Model::template inputs_type<B>& in,
                                                       const named_tensors<B>& direction, const B& step) {
  return Model::template transform<B>(in, [&](const std::string& role, const tensor<B>& x) {
    tensor<B> y = x;
    if (const tensor<B>* u = direction.find(role)) {
      if (u->shape() != x.shape())
        throw input_error("direction " + role + ": shape " + to_string(u->shape()) + ", expected " +
                          to_string(x.shape()));
      for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] += step * u->data()[i];
    }
    return y;
  });
}

/// (L(x + h u) − L(x − h u)) / (2h): error h² |L'''| / 6 (truncation) plus the rounding of the two
/// losses divided by 2h.
template <class Model, class B>
B central_difference(const Model& model, const typename Model::template inputs_type<B>& in,
                     const named_tensors<B>& direction, const cotangents<B>& cot, const B& step) {
  const B up = loss(model, shifted_inputs<Model>(in, direction, step), cot);
  const B down = loss(model, shifted_inputs<Model>(in, direction, B(-step)), cot);
  return (up - down) / (2 * step);
}

/// ⟨g, u⟩ over the names both hold (shapes must agree).
template <class B>
B inner_product(const named_tensors<B>& g, const named_tensors<B>& u) {
  B total(0);
  for (const tensor<B>& x : g.items())
    if (const tensor<B>* y = u.find(x.name())) {
      if (y->shape() != x.shape())
        throw input_error("inner_product " + x.name() + ": shapes " + to_string(x.shape()) + " and " +
                          to_string(y->shape()));
      for (std::size_t i = 0; i < x.size(); ++i) total += x.data()[i] * y->data()[i];
    }
  return total;
}

}  // namespace kalman_oracle
