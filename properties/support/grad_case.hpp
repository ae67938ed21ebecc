// One generated instance of a gradient problem ("case"), and what every model family's generator
// (properties/support/grad_problems/*.hpp) builds it with: a random non-empty subset of the
// cotangents, a direction u in each input's own space, and the exact lift of a case drawn over
// doubles to MPFR. The laws that consume cases are in properties/grad_exact.cpp and grad_mpfr.cpp.
#pragma once

#include <rapidcheck.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grad_generators.hpp"
#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/truth.hpp"
#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle::testing {

/// The forward form a case's model runs, i.e. the form the tape and the dual numbers differentiate
/// (the adjoint under test is always the model's sequential `backward`): the sequential recursion,
/// or the problem's parallel form (chunked WY, scan) with options the problem draws.
enum class forward_form { sequential, parallel };

/// A model (with its forward form), inputs over T, the cotangents that define L = Σ⟨output,
/// cotangent⟩ (docs/math.md §9), a direction u for the directional laws, and a label naming what was
/// drawn (rule, variant, schedule) for failure reports.
template <class Model, class T>
struct gradient_case {
  Model model;
  typename Model::template inputs_type<T> inputs;
  cotangents<T> cot;
  named_tensors<T> direction;
  std::string label;
};

/// An output that a case may give a cotangent for.
struct output_shape {
  std::string name;
  shape_t shape;
};

/// A random non-empty subset of the outputs' cotangents: every output's adjoint path is exercised
/// alone and together with the others.
template <class T>
cotangents<T> gen_cotangents(const std::vector<output_shape>& outputs, const rc::Gen<T>& entry) {
  const auto pick = *rc::gen::inRange<std::uint64_t>(1, std::uint64_t{1} << outputs.size());
  cotangents<T> cot;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if ((pick >> i) & 1) cot.set(gen_tensor<T>(outputs[i].name, outputs[i].shape, entry));
  return cot;
}

/// Entries of the direction u: small rationals, or doubles in [−1, 1] for the MPFR laws.
template <class T>
rc::Gen<T> gen_direction_entry() {
  if constexpr (scalar_traits<T>::is_exact)
    return gen_small_rational(-3, 3);
  else
    return gen_double(-1, 1);
}

/// A direction u: one tensor per input, of its shape, projected by Model::canonicalise onto the
/// input's own space (dL along a non-symmetric perturbation of a symmetric input such as the dense
/// P_0 is not defined: grad/dense.hpp).
template <class Model, class T>
named_tensors<T> gen_direction(const typename Model::template inputs_type<T>& in) {
  named_tensors<T> u;
  for_each_input<Model>(in, [&](const std::string& role, const tensor<T>& x) {
    u.set(gen_tensor<T>(role, x.shape(), gen_direction_entry<T>()));
  });
  Model::canonicalise(u, in);
  return u;
}

/// A case of `model` on `inputs`: cotangents for a random subset of `outputs`, then a direction.
template <class T, class Model>
gradient_case<Model, T> make_gradient_case(const Model& model, typename Model::template inputs_type<T> inputs,
                                           const std::vector<output_shape>& outputs, const rc::Gen<T>& cotangent_entry,
                                           std::string label) {
  gradient_case<Model, T> c{
      model, std::move(inputs), gen_cotangents<T>(outputs, cotangent_entry), {}, std::move(label)};
  c.direction = gen_direction<Model, T>(c.inputs);
  return c;
}

/// Doubles to B (exact: every double is a B value at >= 53 bits).
template <class B>
tensor<B> to_scalar(const tensor<double>& x) {
  tensor<B> y(x.name(), x.shape());
  for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = from_double<B>(x.data()[i]);
  return y;
}
template <class B>
named_tensors<B> to_scalar(const named_tensors<double>& xs) {
  named_tensors<B> ys;
  for (const auto& x : xs.items()) ys.set(to_scalar<B>(x));
  return ys;
}
/// A case drawn over doubles, exactly in B (MPFR at the precision in scope).
template <class B, class Model>
gradient_case<Model, B> to_scalar(const gradient_case<Model, double>& c) {
  return {c.model,
          Model::template transform<B>(c.inputs,
                                       [](const std::string&, const tensor<double>& x) { return to_scalar<B>(x); }),
          to_scalar<B>(c.cot), to_scalar<B>(c.direction), c.label};
}

}  // namespace kalman_oracle::testing
