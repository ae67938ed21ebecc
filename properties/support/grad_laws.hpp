// The law family "grad" (docs/gradients.md; docs/math.md §9), generic over a gradient problem: what a
// model family's generator provides (properties/support/grad_problems/*.hpp), which problems a law
// applies to, and the runner through which properties/grad_exact.cpp and grad_mpfr.cpp state each
// law once. The runner names the property grad_<problem>_<law> (the name seeds it:
// rapidcheck_doctest.hpp), draws a case per RapidCheck case, fails it with the case's label and the
// check's report, and for the MPFR bounds reports the worst log2(observed / allowed) seen, which
// docs/gradients.md "Bounds" quotes.
#pragma once

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <concepts>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "grad_case.hpp"
#include "kalman_oracle/grad/compare.hpp"
#include "kalman_oracle/grad/verify.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

namespace kalman_oracle::testing {

/// Stands for the checks the laws pass to a problem's with_case (any case in, nothing out).
struct gradient_case_check_archetype {
  template <class Case>
  void operator()(const Case&) const {}
};

/// A model family's gradient problem: `name` (the properties are grad_<name>_<law>) and
/// `with_case<T>(check)`, which draws a case over T (rationals for the exact laws, doubles lifted to
/// MPFR for the bounds) and calls check(case) with a gradient_case of the model it drew.
template <class P>
concept sequential_gradient_problem = requires(const gradient_case_check_archetype& check) {
  { P::name } -> std::convertible_to<std::string_view>;
  P::template with_case<rational>(check);
  P::template with_case<double>(check);
};

/// A problem whose model also has a parallel form (`parallel_form` names it in the properties,
/// e.g. grad_kla_parallel_equals_sequential_exact): with_case<T>(form, check) draws a case of
/// either form.
template <class P>
concept parallel_gradient_problem = requires(const gradient_case_check_archetype& check) {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::parallel_form } -> std::convertible_to<std::string_view>;
  P::template with_case<rational>(forward_form::parallel, check);
  P::template with_case<double>(forward_form::parallel, check);
};

template <class P>
concept gradient_problem = sequential_gradient_problem<P> || parallel_gradient_problem<P>;

/// A problem whose parallel form has an adjoint of its own, parallel_backward(case), beside the
/// sequential one (the fixed gain's chunked WY adjoint; the KDNs' memory-chunked adjoint), and says so
/// with `has_parallel_backward` (its cases' model types differ, so no single signature names it).
template <class P>
concept parallel_adjoint_gradient_problem = parallel_gradient_problem<P> && requires {
  { P::has_parallel_backward } -> std::convertible_to<bool>;
} && P::has_parallel_backward;

template <class P>
struct has_parallel_form : std::bool_constant<parallel_gradient_problem<P>> {};
template <class P>
struct has_parallel_adjoint : std::bool_constant<parallel_adjoint_gradient_problem<P>> {};

/// The problems of a std::tuple that satisfy Keep, as a std::tuple (a doctest type list): a law
/// applies to every problem with the capability it needs, and to no other.
template <template <class> class Keep, class Problems>
struct problems_where;
template <template <class> class Keep, class... Ps>
struct problems_where<Keep, std::tuple<Ps...>> {
  using type =
      decltype(std::tuple_cat(std::declval<std::conditional_t<Keep<Ps>::value, std::tuple<Ps>, std::tuple<>>>()...));
};
template <template <class> class Keep, class Problems>
using problems_where_t = typename problems_where<Keep, Problems>::type;

/// Which forms a law's cases run: the sequential form, the parallel form, or, per case, any form
/// the problem has.
enum class form_choice { sequential, parallel, any };

template <gradient_problem Problem, class T, class Check>
void with_gradient_case(form_choice forms, Check&& check) {
  if constexpr (parallel_gradient_problem<Problem>) {
    const bool parallel = forms == form_choice::parallel || (forms == form_choice::any && *rc::gen::arbitrary<bool>());
    Problem::template with_case<T>(parallel ? forward_form::parallel : forward_form::sequential, check);
  } else {
    Problem::template with_case<T>(check);  // its one form, whatever `forms` asks
  }
}

/// Checks `law` (the property grad_<problem>_<law_name>) on cases over T: `law(case)` returns a
/// gradient_verdict.
template <gradient_problem Problem, class T, class Law>
void check_gradient_law(std::string_view law_name, form_choice forms, Law law) {
  const std::string name = "grad_" + std::string(Problem::name) + "_" + std::string(law_name);
  double worst = -std::numeric_limits<double>::infinity();
  check_property(name, [&] {
    with_gradient_case<Problem, T>(forms, [&](const auto& c) {
      const gradient_verdict v = law(c);
      worst = std::max(worst, v.log2_ratio);
      if (!v.ok) RC_FAIL(c.label + ": " + v.report);
    });
  });
  if constexpr (!scalar_traits<T>::is_exact) MESSAGE(name << ": worst log2(error / bound) = " << worst);
}

/// An exact law: cases over rationals, where every check is an equality.
template <gradient_problem Problem, class Law>
void check_exact_gradient_law(std::string_view law_name, form_choice forms, Law law) {
  check_gradient_law<Problem, rational>(law_name, forms, std::move(law));
}

/// A bound in MPFR at `bits`: cases drawn over doubles (exact in MPFR at any precision, so the
/// adjoint, the tape, the duals and the central differences all see the same inputs), lifted to
/// MPFR inside the precision scope.
template <gradient_problem Problem, class Law>
void check_mpfr_gradient_law(std::string_view law_name, form_choice forms, unsigned bits, Law law) {
  check_gradient_law<Problem, double>(law_name, forms, [&](const auto& c) {
    const precision_scope scope(bits);
    return law(to_scalar<mpfr_real>(c));
  });
}

/// The property name of a law about the problem's parallel form, e.g. chunked_adjoint_exact.
template <parallel_gradient_problem Problem>
std::string parallel_law_name(std::string_view law) {
  return std::string(Problem::parallel_form) + "_" + std::string(law);
}

/// The parallel form's own adjoint against the sequential adjoint of the same L (the case's model
/// and cotangents): the same names and shapes, and equal over exact scalars, else within
/// 2^bound_exp · max|sequential| (norm-wise, as for the tape: docs/gradients.md "Bounds").
template <parallel_adjoint_gradient_problem Problem, class Model, class B>
gradient_verdict parallel_adjoint_matches(const gradient_case<Model, B>& c, long bound_exp) {
  const gradients<B> parallel = Problem::parallel_backward(c);
  const gradients<B> sequential = Model::backward(c.inputs, c.cot);
  const gradient_difference<B> d = compare_gradients(parallel, sequential);
  const B allowed = scalar_traits<B>::is_exact ? B(0) : scalar_traits<B>::ldexp(d.scale, bound_exp);
  const bool same_names = d.shapes_match && parallel.items().size() == sequential.items().size();
  gradient_verdict v;
  v.ok = same_names && d.max_abs_difference <= allowed;
  v.log2_ratio = detail::grad::log2_ratio(d.max_abs_difference, allowed);
  std::ostringstream os;
  os << "max |parallel adjoint - sequential adjoint| = " << to_double(d.max_abs_difference) << " (in " << d.worst
     << "), allowed " << to_double(allowed) << (same_names ? "" : ", names differ (first missing: " + d.missing + ")");
  v.report = os.str();
  return v;
}

}  // namespace kalman_oracle::testing
