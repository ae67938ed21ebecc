// The checks of docs/gradients.md, one function each, for any model object (grad/truth.hpp):
// the properties (properties/grad_*.cpp) call them on generated problems, and a fixture generator
// can call them to certify the gradients it writes. Each returns a verdict: ok, a one-line report,
// and log2(observed / allowed) (−∞ when the observed difference is 0; ≤ 0 when ok).
//
//   adjoint_equals_tape_exact       exact scalars: Model::backward == the tape over model.forward,
//                                   entry for entry (model.forward may be a parallel form)
//   adjoint_within_bound_of_tape    MPFR: max |adjoint − tape| ≤ 2^bound_exp · max |tape|, over every
//                                   entry of every input (norm-wise)
//   inner_product_matches_dual      |⟨adjoint, u⟩ − dL[u]| ≤ 2^bound_exp · Σ|adjoint||u| (dual numbers
//                                   over model.forward); exact scalars: equality
//   central_difference_agrees       |⟨adjoint, u⟩ − (L(x+hu) − L(x−hu))/2h| ≤ 2^bound_exp ·
//                                   (Σ|adjoint||u| + |L(x)|), h = 2^step_exp
// The precision is the caller's (open a precision_scope first).
#pragma once

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "kalman_oracle/grad/compare.hpp"
#include "kalman_oracle/grad/truth.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

struct gradient_verdict {
  bool ok = false;
  std::string report;
  double log2_ratio = -std::numeric_limits<double>::infinity();  // log2(observed / allowed)
};

namespace detail::grad {
template <class B>
double log2_ratio(const B& observed, const B& allowed) {
  if (observed == 0) return -std::numeric_limits<double>::infinity();
  if (allowed == 0) return std::numeric_limits<double>::infinity();
  using std::log2;
  if constexpr (scalar_traits<B>::is_exact) {
    return std::log2(to_double(observed)) - std::log2(to_double(allowed));
  } else {
    return to_double(B(log2(observed) - log2(allowed)));
  }
}
}  // namespace detail::grad

template <class Model, class B>
gradient_verdict adjoint_equals_tape_exact(const Model& model, const typename Model::template inputs_type<B>& in,
                                           const cotangents<B>& cot) {
  static_assert(scalar_traits<B>::is_exact, "exact comparison needs exact scalars");
  const gradients<B> adjoint = Model::backward(in, cot);
  const gradients<B> taped = tape_gradients(model, in, cot);
  gradient_verdict v;
  v.ok = same_gradients(adjoint, taped);
  if (!v.ok) {
    const auto d = compare_gradients(adjoint, taped);
    std::ostringstream os;
    os << "adjoint != tape: "
       << (d.shapes_match ? "largest difference in " + d.worst : "missing/misshapen " + d.missing) << " ("
       << to_double(d.max_abs_difference) << ")";
    v.report = os.str();
  }
  return v;
}

template <class Model, class B>
gradient_verdict adjoint_within_bound_of_tape(const Model& model, const typename Model::template inputs_type<B>& in,
                                              const cotangents<B>& cot, long bound_exp) {
  const gradients<B> adjoint = Model::backward(in, cot);
  const gradients<B> taped = tape_gradients(model, in, cot);
  const auto d = compare_gradients(adjoint, taped);
  const B allowed = scalar_traits<B>::ldexp(d.scale, bound_exp);
  gradient_verdict v;
  v.ok = d.shapes_match && d.max_abs_difference <= allowed;
  v.log2_ratio = detail::grad::log2_ratio(d.max_abs_difference, allowed);
  std::ostringstream os;
  os << "max |adjoint - tape| = " << to_double(d.max_abs_difference) << " (in " << d.worst << "), allowed 2^"
     << bound_exp << " * " << to_double(d.scale) << (d.shapes_match ? "" : ", missing/misshapen " + d.missing);
  v.report = os.str();
  return v;
}

template <class Model, class B>
gradient_verdict inner_product_matches_dual(const Model& model, const typename Model::template inputs_type<B>& in,
                                            const named_tensors<B>& direction, const cotangents<B>& cot,
                                            long bound_exp) {
  const gradients<B> adjoint = Model::backward(in, cot);
  const B predicted = inner_product(adjoint, direction);
  const B derivative = directional_derivative(model, in, direction, cot);
  using std::abs;
  const B diff = abs(B(predicted - derivative));
  const B allowed =
      scalar_traits<B>::is_exact ? B(0) : scalar_traits<B>::ldexp(abs_inner_product(adjoint, direction), bound_exp);
  gradient_verdict v;
  v.ok = diff <= allowed;
  v.log2_ratio = detail::grad::log2_ratio(diff, allowed);
  std::ostringstream os;
  os << "<adjoint, u> = " << to_double(predicted) << ", dual dL[u] = " << to_double(derivative)
     << ", |difference| = " << to_double(diff) << ", allowed " << to_double(allowed);
  v.report = os.str();
  return v;
}

template <class Model, class B>
gradient_verdict central_difference_agrees(const Model& model, const typename Model::template inputs_type<B>& in,
                                           const named_tensors<B>& direction, const cotangents<B>& cot, long step_exp,
                                           long bound_exp) {
  const gradients<B> adjoint = Model::backward(in, cot);
  const B predicted = inner_product(adjoint, direction);
  const B step = scalar_traits<B>::ldexp(B(1), step_exp);
  const B difference = central_difference(model, in, direction, cot, step);
  using std::abs;
  const B diff = abs(B(predicted - difference));
  const B allowed =
      scalar_traits<B>::ldexp(B(abs_inner_product(adjoint, direction) + abs(loss(model, in, cot))), bound_exp);
  gradient_verdict v;
  v.ok = diff <= allowed;
  v.log2_ratio = detail::grad::log2_ratio(diff, allowed);
  std::ostringstream os;
  os << "<adjoint, u> = " << to_double(predicted) << ", central difference = " << to_double(difference)
     << ", |difference| = " << to_double(diff) << ", allowed " << to_double(allowed);
  v.report = os.str();
  return v;
}

}  // namespace kalman_oracle
