// Gradients of the fixed-gain family (MATH.md §7, §9; grad/fixed_gain.hpp), law family "grad":
//
//   exact (rationals, linear gates; GLA, DeltaNet, GDN, KDA, given gain; every parameter in a
//   random broadcast shape; a random subset of the cotangents):
//     grad_fixed_gain_adjoint_equals_tape_exact        adjoint == reverse-mode tape of the sequential form
//     grad_fixed_gain_chunked_equals_sequential_exact  adjoint == tape of the chunked WY form (C random)
//     grad_fixed_gain_dual_exact                       ⟨adjoint, u⟩ == dual-number dL[u], random u
//     grad_fixed_gain_chunked_adjoint_exact            the chunked (WY) adjoint == the sequential adjoint
//                                                      (grad/fixed_gain_chunked.hpp; C random)
//   MPFR (log gates g ∈ [−2, −2⁻⁶], β ∈ [0, 2], values in [−2, 2]; docs/gradients.md "Bounds"):
//     grad_fixed_gain_tape_mpfr256                     |adjoint − tape| ≤ 2⁻²⁰⁰ max|tape| (sequential
//                                                      and chunked forms)
//     grad_fixed_gain_dual_mpfr256                     |⟨adjoint, u⟩ − dL[u]| ≤ 2⁻²⁰⁰ Σ|adjoint||u|
//     grad_fixed_gain_central_difference_mpfr512       |⟨adjoint, u⟩ − CD(2⁻¹²⁰)| ≤ 2⁻²⁰⁰ (Σ|adjoint||u| + |L|)
//     grad_fixed_gain_chunked_adjoint_mpfr256          |chunked adjoint − sequential adjoint| ≤ 2⁻²⁰⁰ max|·|
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
#include "kalman_oracle/grad/fixed_gain.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"
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
  rc::Gen<T> value;  // q, k, v, S_0, cotangents, directions
  rc::Gen<T> gate;   // g (log or linear)
  rc::Gen<T> beta;   // β and κ
  rc::Gen<T> scale;  // τ when given
};

struct rule_choice {
  fixed_gain_rule rule;
  bool given_gain;
};
rule_choice gen_rule() {
  const auto rule = *rc::gen::element(fixed_gain_rule::gla, fixed_gain_rule::delta_net,
                                      fixed_gain_rule::gated_delta_net, fixed_gain_rule::kda);
  const bool given = rule != fixed_gain_rule::gla && *rc::gen::arbitrary<bool>();
  return {rule, given};
}

template <class T>
fixed_gain_inputs<T> gen_inputs(const sizes& n, rule_choice rc_, gate_space gates, const value_gens<T>& g) {
  fixed_gain_inputs<T> in;
  in.rule = rc_.rule;
  in.gates = gates;
  in.q = gen_tensor<T>("q", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
  in.k = gen_tensor<T>("k", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
  in.v = gen_tensor<T>("v", {n.batch, n.tokens, n.heads, n.value_dim}, g.value);
  if (rc_.rule == fixed_gain_rule::gated_delta_net)
    in.g = gen_tensor<T>("g", gen_broadcast_shape({n.batch, n.tokens, n.heads}), g.gate);
  else if (rc_.rule != fixed_gain_rule::delta_net)
    in.g = gen_tensor<T>("g", gen_broadcast_shape({n.batch, n.tokens, n.heads, n.key_dim}), g.gate);
  if (rc_.rule != fixed_gain_rule::gla) {
    if (rc_.given_gain)
      in.gain = gen_tensor<T>("gain", gen_broadcast_shape({n.batch, n.tokens, n.heads, n.key_dim}), g.beta);
    else
      in.beta = gen_tensor<T>("beta", gen_broadcast_shape({n.batch, n.tokens, n.heads}), g.beta);
  }
  if (*rc::gen::arbitrary<bool>())
    in.initial_state = gen_tensor<T>("initial_state", gen_broadcast_shape({n.batch, n.heads, n.key_dim, n.value_dim}), g.value);
  // τ: given, or the default 1/√K (over rationals only where K is a perfect square).
  const bool exact_default_ok = n.key_dim == 1 || n.key_dim == 4;
  if (!(scalar_traits<T>::is_exact && !exact_default_ok) && *rc::gen::arbitrary<bool>()) return in;
  in.scale = *g.scale;
  return in;
}

/// A random non-empty subset of the cotangents.
template <class T>
cotangents<T> gen_cotangents(const sizes& n, const rc::Gen<T>& gen) {
  cotangents<T> cot;
  const int pick = *rc::gen::inRange(1, 4);  // 1: o, 2: final_state, 3: both
  if (pick & 1) cot.set(gen_tensor<T>("o", {n.batch, n.tokens, n.heads, n.value_dim}, gen));
  if (pick & 2) cot.set(gen_tensor<T>("final_state", {n.batch, n.heads, n.key_dim, n.value_dim}, gen));
  return cot;
}

/// A direction u: one tensor per input, of its shape.
template <class T>
named_tensors<T> gen_direction(const fixed_gain_inputs<T>& in, const rc::Gen<T>& gen) {
  named_tensors<T> u;
  for_each_input<fixed_gain_model>(in, [&](const std::string& role, const tensor<T>& x) {
    u.set(gen_tensor<T>(role, x.shape(), gen));
  });
  return u;
}

value_gens<rational> rational_gens() {
  return {gen_small_rational(-6, 6), gen_rational_decay(), gen_small_rational(-4, 4), gen_small_rational(1, 4)};
}
value_gens<double> double_gens() {
  return {gen_double(-2, 2), gen_double(-2, -1.0 / 64), gen_double(0, 2), gen_double(0.25, 2)};
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
template <class B>
fixed_gain_inputs<B> to_scalar(const fixed_gain_inputs<double>& in) {
  return fixed_gain_model::transform<B>(in, [](const std::string&, const tensor<double>& x) { return to_scalar<B>(x); });
}

/// One MPFR problem: sizes T <= 6, log gates.
struct mpfr_problem {
  fixed_gain_inputs<double> in;
  cotangents<double> cot;
  named_tensors<double> direction;
};
mpfr_problem gen_mpfr_problem() {
  const sizes n = gen_sizes(8);
  const value_gens<double> g = double_gens();
  mpfr_problem p{gen_inputs<double>(n, gen_rule(), gate_space::log, g), gen_cotangents<double>(n, g.value), {}};
  p.direction = gen_direction<double>(p.in, gen_double(-1, 1));
  return p;
}

double worst_tape = -INFINITY, worst_dual = -INFINITY, worst_cd = -INFINITY, worst_chunked = -INFINITY;

}  // namespace

TEST_SUITE("grad") {
  TEST_CASE("grad: fixed gain adjoint equals the reverse-mode tape exactly (rationals)") {
    check_property("grad_fixed_gain_adjoint_equals_tape_exact", [] {
      const sizes n = gen_sizes(8);
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, gen_rule(), gate_space::linear, g);
      const auto cot = gen_cotangents<rational>(n, g.value);
      const gradient_verdict v = adjoint_equals_tape_exact(fixed_gain_model{}, in, cot);
      if (!v.ok) RC_FAIL(to_string(in.rule) + ": " + v.report);
    });
  }

  TEST_CASE("grad: the chunked WY form has the sequential gradient exactly (rationals)") {
    check_property("grad_fixed_gain_chunked_equals_sequential_exact", [] {
      const sizes n = gen_sizes(8);
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, gen_rule(), gate_space::linear, g);
      const auto cot = gen_cotangents<rational>(n, g.value);
      const std::size_t chunk = *rc::gen::element<std::size_t>(1, 2, 3, n.tokens + 1);
      const gradient_verdict v = adjoint_equals_tape_exact(fixed_gain_model{chunk}, in, cot);
      if (!v.ok) RC_FAIL(to_string(in.rule) + ", C = " + std::to_string(chunk) + ": " + v.report);
    });
  }

  TEST_CASE("grad: fixed gain <adjoint, u> equals the dual directional derivative exactly (rationals)") {
    check_property("grad_fixed_gain_dual_exact", [] {
      const sizes n = gen_sizes(8);
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, gen_rule(), gate_space::linear, g);
      const auto cot = gen_cotangents<rational>(n, g.value);
      const auto u = gen_direction<rational>(in, gen_small_rational(-3, 3));
      const gradient_verdict v = inner_product_matches_dual(fixed_gain_model{}, in, u, cot, 0);
      if (!v.ok) RC_FAIL(to_string(in.rule) + ": " + v.report);
    });
  }

  TEST_CASE("grad: fixed gain adjoint within 2^-200 of the tape, sequential and chunked (MPFR-256, log gates)") {
    check_property("grad_fixed_gain_tape_mpfr256", [] {
      const mpfr_problem p = gen_mpfr_problem();
      const std::size_t chunk = *rc::gen::element<std::size_t>(0, 1, 2, 3);  // 0: sequential
      const precision_scope scope(256);
      const auto in = to_scalar<mpfr_real>(p.in);
      const gradient_verdict v = adjoint_within_bound_of_tape(fixed_gain_model{chunk}, in, to_scalar<mpfr_real>(p.cot), -200);
      worst_tape = std::max(worst_tape, v.log2_ratio);
      if (!v.ok) RC_FAIL(to_string(in.rule) + ", C = " + std::to_string(chunk) + ": " + v.report);
    });
    MESSAGE("grad_fixed_gain_tape_mpfr256: worst log2(error / bound) = " << worst_tape);
  }

  TEST_CASE("grad: fixed gain <adjoint, u> within 2^-200 of the dual directional derivative (MPFR-256)") {
    check_property("grad_fixed_gain_dual_mpfr256", [] {
      const mpfr_problem p = gen_mpfr_problem();
      const precision_scope scope(256);
      const auto in = to_scalar<mpfr_real>(p.in);
      const gradient_verdict v = inner_product_matches_dual(fixed_gain_model{}, in, to_scalar<mpfr_real>(p.direction),
                                                            to_scalar<mpfr_real>(p.cot), -200);
      worst_dual = std::max(worst_dual, v.log2_ratio);
      if (!v.ok) RC_FAIL(to_string(in.rule) + ": " + v.report);
    });
    MESSAGE("grad_fixed_gain_dual_mpfr256: worst log2(error / bound) = " << worst_dual);
  }

  TEST_CASE("grad: fixed gain central differences agree within their truncation error (MPFR-512, h = 2^-120)") {
    check_property("grad_fixed_gain_central_difference_mpfr512", [] {
      const mpfr_problem p = gen_mpfr_problem();
      const precision_scope scope(512);
      const auto in = to_scalar<mpfr_real>(p.in);
      const gradient_verdict v = central_difference_agrees(fixed_gain_model{}, in, to_scalar<mpfr_real>(p.direction),
                                                           to_scalar<mpfr_real>(p.cot), -120, -200);
      worst_cd = std::max(worst_cd, v.log2_ratio);
      if (!v.ok) RC_FAIL(to_string(in.rule) + ": " + v.report);
    });
    MESSAGE("grad_fixed_gain_central_difference_mpfr512: worst log2(error / bound) = " << worst_cd);
  }

  TEST_CASE("grad: the chunked (WY) adjoint equals the sequential adjoint exactly (rationals)") {
    check_property("grad_fixed_gain_chunked_adjoint_exact", [] {
      const sizes n = gen_sizes(8);
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, gen_rule(), gate_space::linear, g);
      const auto cot = gen_cotangents<rational>(n, g.value);
      const std::size_t chunk = *rc::gen::element<std::size_t>(1, 2, 3, 4, n.tokens + 1);
      const gradients<rational> chunked = fixed_gain_chunked_backward(in, cot, chunk);
      const gradients<rational> sequential = fixed_gain_backward(in, cot);
      if (!same_gradients(chunked, sequential) || chunked.items().size() != sequential.items().size()) {
        const auto d = compare_gradients(chunked, sequential);
        RC_FAIL(to_string(in.rule) + ", C = " + std::to_string(chunk) + ": chunked != sequential adjoint, worst " + d.worst);
      }
    });
  }

  TEST_CASE("grad: the chunked (WY) adjoint within 2^-200 of the sequential adjoint (MPFR-256, log gates)") {
    check_property("grad_fixed_gain_chunked_adjoint_mpfr256", [] {
      const mpfr_problem p = gen_mpfr_problem();
      const std::size_t chunk = *rc::gen::element<std::size_t>(1, 2, 3, 4, 16);
      const precision_scope scope(256);
      const auto in = to_scalar<mpfr_real>(p.in);
      const auto cot = to_scalar<mpfr_real>(p.cot);
      const auto d = compare_gradients(fixed_gain_chunked_backward(in, cot, chunk), fixed_gain_backward(in, cot));
      const mpfr_real allowed = ldexp(d.scale, -200);
      worst_chunked = std::max(worst_chunked, grad_detail::log2_ratio(d.max_abs_difference, allowed));
      if (!d.shapes_match || d.max_abs_difference > allowed)
        RC_FAIL(to_string(in.rule) + ", C = " + std::to_string(chunk) + ": max difference " +
                std::to_string(to_double(d.max_abs_difference)) + " in " + d.worst + ", scale " +
                std::to_string(to_double(d.scale)));
    });
    MESSAGE("grad_fixed_gain_chunked_adjoint_mpfr256: worst log2(error / bound) = " << worst_chunked);
  }
}
