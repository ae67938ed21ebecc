// Gradients of the diagonal and isotropic Kalman Delta Networks (MATH.md §4, §5, §9;
// grad/diagonal.hpp, grad/isotropic.hpp), law family "grad". Each property draws the model
// (diagonal or isotropic) per case:
//
//   exact (rationals, linear gates α ∈ (0, 1] with 1 included, ω >= 0 with 0 included; every
//   parameter in a random broadcast shape; a random subset of the cotangents o, S_T, the final
//   covariance and the readout variance):
//     grad_kdn_adjoint_equals_tape_exact         adjoint == reverse-mode tape of the sequential form
//     grad_kdn_parallel_equals_sequential_exact  adjoint == tape of the parallel form (covariance
//                                                scan: random schedule, chunk size, rescale mode)
//     grad_kdn_dual_exact                        ⟨adjoint, u⟩ == dual-number dL[u], random u
//   MPFR (log gates g ∈ [−2, −2⁻⁶], ω ∈ [2⁻⁶, 2], r, μ, p_0 ∈ [1/4, 4], values in [−2, 2]):
//     grad_kdn_tape_mpfr256                      |adjoint − tape| ≤ 2⁻²⁰⁰ max|tape| (sequential or
//                                                parallel form)
//     grad_kdn_dual_mpfr256                      |⟨adjoint, u⟩ − dL[u]| ≤ 2⁻²⁰⁰ Σ|adjoint||u|
//     grad_kdn_central_difference_mpfr512        |⟨adjoint, u⟩ − CD(2⁻¹²⁰)| ≤ 2⁻²⁰⁰ (Σ|adjoint||u| + |L|)
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "generators.hpp"
#include "grad_generators.hpp"
#include "kalman_oracle/grad/diagonal.hpp"
#include "kalman_oracle/grad/isotropic.hpp"
#include "kalman_oracle/grad/verify.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

namespace {

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;

// Shared generators: support/grad_generators.hpp.
using namespace kalman_oracle::testing;

struct sizes {
  std::size_t batch, tokens, heads, key_dim, value_dim;
};
sizes gen_sizes(std::size_t max_tokens) {
  return {*rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, max_tokens + 1),
          *rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, 5),
          *rc::gen::inRange<std::size_t>(1, 5)};
}

template <class T>
struct value_gens {
  rc::Gen<T> value;     // q, k, v, S_0, cotangents
  rc::Gen<T> gate;      // g (log) or α (linear)
  rc::Gen<T> noise;     // ω
  rc::Gen<T> positive;  // r, μ, p_0 / b_0, τ
};

/// Both KDN input structs have the same fields; only the shapes of ω and the prior covariance differ.
template <class Inputs, class T>
Inputs gen_inputs(const sizes& n, bool diagonal, gate_space gates, const value_gens<T>& g) {
  Inputs in;
  in.q = gen_tensor<T>("q", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
  in.k = gen_tensor<T>("k", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
  in.v = gen_tensor<T>("v", {n.batch, n.tokens, n.heads, n.value_dim}, g.value);
  in.g = gen_tensor<T>("g", gen_broadcast_shape({n.batch, n.tokens, n.heads, n.key_dim}), g.gate);
  in.gates = gates;
  in.omega = gen_tensor<T>("omega",
                           gen_broadcast_shape(diagonal ? shape_t{n.batch, n.tokens, n.heads, n.key_dim}
                                                        : shape_t{n.batch, n.tokens, n.heads}),
                           g.noise);
  in.r = gen_tensor<T>("r", gen_broadcast_shape({n.batch, n.tokens, n.heads}), g.positive);
  if (*rc::gen::arbitrary<bool>()) in.mu = gen_tensor<T>("mu", gen_broadcast_shape({n.heads}), g.positive);
  if (*rc::gen::arbitrary<bool>())
    in.initial_covariance = gen_tensor<T>(
        "initial_covariance",
        gen_broadcast_shape(diagonal ? shape_t{n.batch, n.heads, n.key_dim} : shape_t{n.batch, n.heads}), g.positive);
  if (*rc::gen::arbitrary<bool>())
    in.initial_state = gen_tensor<T>("initial_state", gen_broadcast_shape({n.batch, n.heads, n.key_dim, n.value_dim}), g.value);
  const bool exact_default_ok = n.key_dim == 1 || n.key_dim == 4;
  if (!(scalar_traits<T>::is_exact && !exact_default_ok) && *rc::gen::arbitrary<bool>()) return in;
  in.scale = *g.positive;
  return in;
}

template <class T>
cotangents<T> gen_cotangents(const sizes& n, bool diagonal, const rc::Gen<T>& gen) {
  cotangents<T> cot;
  const int pick = *rc::gen::inRange(1, 16);
  if (pick & 1) cot.set(gen_tensor<T>("o", {n.batch, n.tokens, n.heads, n.value_dim}, gen));
  if (pick & 2) cot.set(gen_tensor<T>("final_state", {n.batch, n.heads, n.key_dim, n.value_dim}, gen));
  if (pick & 4)
    cot.set(gen_tensor<T>("final_covariance", diagonal ? shape_t{n.batch, n.heads, n.key_dim} : shape_t{n.batch, n.heads},
                          gen));
  if (pick & 8) cot.set(gen_tensor<T>("readout_variance", {n.batch, n.tokens, n.heads}, gen));
  return cot;
}

template <class Model, class Inputs, class T>
named_tensors<T> gen_direction(const Inputs& in, const rc::Gen<T>& gen) {
  named_tensors<T> u;
  for_each_input<Model>(in, [&](const std::string& role, const tensor<T>& x) { u.set(gen_tensor<T>(role, x.shape(), gen)); });
  return u;
}

kdn_scan_options gen_scan(std::size_t tokens) {
  return {*rc::gen::elementOf(all_scan_schedules), *rc::gen::element<std::size_t>(1, 2, 3, tokens + 1),
          *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two)};
}

value_gens<rational> rational_gens() {
  return {gen_small_rational(-6, 6), gen_rational_decay(), gen_small_rational(0, 4), gen_small_rational(1, 8)};
}
value_gens<double> double_gens() {
  return {gen_double(-2, 2), gen_double(-2, -1.0 / 64), gen_double(1.0 / 64, 2), gen_double(0.25, 4)};
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

/// Runs `check(model, inputs, cotangents, direction)` on a problem of the model drawn per case
/// (diagonal or isotropic), generated over T (rationals, or doubles converted to MPFR by `convert`).
template <class T, class Check>
void with_kdn_problem(std::size_t max_tokens, gate_space gates, const value_gens<T>& g, const rc::Gen<T>& direction,
                      bool parallel, Check&& check) {
  const sizes n = gen_sizes(max_tokens);
  const bool diagonal = *rc::gen::arbitrary<bool>();
  const std::optional<kdn_scan_options> scan =
      parallel ? std::optional<kdn_scan_options>(gen_scan(n.tokens)) : std::nullopt;
  const cotangents<T> cot = gen_cotangents<T>(n, diagonal, g.value);
  if (diagonal) {
    const auto in = gen_inputs<diagonal_kdn_inputs<T>>(n, true, gates, g);
    check(diagonal_kdn_model{scan}, in, cot, gen_direction<diagonal_kdn_model>(in, direction));
  } else {
    const auto in = gen_inputs<isotropic_kdn_inputs<T>>(n, false, gates, g);
    check(isotropic_kdn_model{scan}, in, cot, gen_direction<isotropic_kdn_model>(in, direction));
  }
}

/// The MPFR version of a double problem.
template <class Model, class Inputs>
auto to_mpfr(const Inputs& in) {
  return Model::template transform<mpfr_real>(in, [](const std::string&, const tensor<double>& x) {
    return to_scalar<mpfr_real>(x);
  });
}

const char* name_of(const diagonal_kdn_model&) { return "diagonal"; }
const char* name_of(const isotropic_kdn_model&) { return "isotropic"; }

double worst_tape = -INFINITY, worst_dual = -INFINITY, worst_cd = -INFINITY;

}  // namespace

TEST_SUITE("grad") {
  TEST_CASE("grad: KDN adjoints equal the reverse-mode tape exactly (rationals)") {
    check_property("grad_kdn_adjoint_equals_tape_exact", [] {
      with_kdn_problem<rational>(8, gate_space::linear, rational_gens(), gen_small_rational(-3, 3), false,
                                 [](const auto& model, const auto& in, const auto& cot, const auto&) {
                                   const gradient_verdict v = adjoint_equals_tape_exact(model, in, cot);
                                   if (!v.ok) RC_FAIL(std::string(name_of(model)) + ": " + v.report);
                                 });
    });
  }

  TEST_CASE("grad: the KDN parallel forms have the sequential gradients exactly (rationals)") {
    check_property("grad_kdn_parallel_equals_sequential_exact", [] {
      with_kdn_problem<rational>(8, gate_space::linear, rational_gens(), gen_small_rational(-3, 3), true,
                                 [](const auto& model, const auto& in, const auto& cot, const auto&) {
                                   const gradient_verdict v = adjoint_equals_tape_exact(model, in, cot);
                                   if (!v.ok)
                                     RC_FAIL(std::string(name_of(model)) + ", " + to_string(model.parallel->schedule) +
                                             ", " + to_string(model.parallel->rescale) + ": " + v.report);
                                 });
    });
  }

  TEST_CASE("grad: KDN <adjoint, u> equals the dual directional derivative exactly (rationals)") {
    check_property("grad_kdn_dual_exact", [] {
      with_kdn_problem<rational>(8, gate_space::linear, rational_gens(), gen_small_rational(-3, 3), false,
                                 [](const auto& model, const auto& in, const auto& cot, const auto& u) {
                                   const gradient_verdict v = inner_product_matches_dual(model, in, u, cot, 0);
                                   if (!v.ok) RC_FAIL(std::string(name_of(model)) + ": " + v.report);
                                 });
    });
  }

  TEST_CASE("grad: KDN adjoints within 2^-200 of the tape, sequential and parallel forms (MPFR-256, log gates)") {
    check_property("grad_kdn_tape_mpfr256", [] {
      const bool parallel = *rc::gen::arbitrary<bool>();
      with_kdn_problem<double>(8, gate_space::log, double_gens(), gen_double(-1, 1), parallel,
                               [](const auto& model, const auto& in, const auto& cot, const auto&) {
                                 using M = std::remove_cvref_t<decltype(model)>;
                                 const precision_scope scope(256);
                                 const gradient_verdict v = adjoint_within_bound_of_tape(
                                     model, to_mpfr<M>(in), to_scalar<mpfr_real>(cot), -200);
                                 worst_tape = std::max(worst_tape, v.log2_ratio);
                                 if (!v.ok) RC_FAIL(std::string(name_of(model)) + ": " + v.report);
                               });
    });
    MESSAGE("grad_kdn_tape_mpfr256: worst log2(error / bound) = " << worst_tape);
  }

  TEST_CASE("grad: KDN <adjoint, u> within 2^-200 of the dual directional derivative (MPFR-256)") {
    check_property("grad_kdn_dual_mpfr256", [] {
      with_kdn_problem<double>(8, gate_space::log, double_gens(), gen_double(-1, 1), false,
                               [](const auto& model, const auto& in, const auto& cot, const auto& u) {
                                 using M = std::remove_cvref_t<decltype(model)>;
                                 const precision_scope scope(256);
                                 const gradient_verdict v = inner_product_matches_dual(
                                     model, to_mpfr<M>(in), to_scalar<mpfr_real>(u), to_scalar<mpfr_real>(cot), -200);
                                 worst_dual = std::max(worst_dual, v.log2_ratio);
                                 if (!v.ok) RC_FAIL(std::string(name_of(model)) + ": " + v.report);
                               });
    });
    MESSAGE("grad_kdn_dual_mpfr256: worst log2(error / bound) = " << worst_dual);
  }

  TEST_CASE("grad: KDN central differences agree within their truncation error (MPFR-512, h = 2^-120)") {
    check_property("grad_kdn_central_difference_mpfr512", [] {
      with_kdn_problem<double>(8, gate_space::log, double_gens(), gen_double(-1, 1), false,
                               [](const auto& model, const auto& in, const auto& cot, const auto& u) {
                                 using M = std::remove_cvref_t<decltype(model)>;
                                 const precision_scope scope(512);
                                 const gradient_verdict v = central_difference_agrees(
                                     model, to_mpfr<M>(in), to_scalar<mpfr_real>(u), to_scalar<mpfr_real>(cot), -120, -200);
                                 worst_cd = std::max(worst_cd, v.log2_ratio);
                                 if (!v.ok) RC_FAIL(std::string(name_of(model)) + ": " + v.report);
                               });
    });
    MESSAGE("grad_kdn_central_difference_mpfr512: worst log2(error / bound) = " << worst_cd);
  }
}
