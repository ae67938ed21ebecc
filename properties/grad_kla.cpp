// Gradients of Kalman Linear Attention (MATH.md §6, §9; grad/kla.hpp), law family "grad":
//
//   exact (rationals; ā in (0, 1] with 1 included, p̄ >= 0 with 0 included; every parameter in a
//   random broadcast shape; a random subset of the cotangents y, y_var, λ_T, η_T):
//     grad_kla_adjoint_equals_tape_exact         adjoint == reverse-mode tape of the sequential form
//     grad_kla_parallel_equals_sequential_exact  adjoint == tape of the scan form (random schedule,
//                                                rescale mode, chunk size and λ_{t−1} recovery)
//     grad_kla_dual_exact                        ⟨adjoint, u⟩ == dual-number dL[u], random u
//   MPFR (ā ∈ [1/4, 0.99], p̄ ∈ [2⁻⁶, 2], Λ, λ_0 ∈ [1/4, 4], values in [−2, 2]):
//     grad_kla_tape_mpfr256                      |adjoint − tape| ≤ 2⁻²⁰⁰ max|tape| (sequential or
//                                                scan form)
//     grad_kla_dual_mpfr256                      |⟨adjoint, u⟩ − dL[u]| ≤ 2⁻²⁰⁰ Σ|adjoint||u|
//     grad_kla_central_difference_mpfr512        |⟨adjoint, u⟩ − CD(2⁻¹²⁰)| ≤ 2⁻²⁰⁰ (Σ|adjoint||u| + |L|)
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
#include "kalman_oracle/grad/kla.hpp"
#include "kalman_oracle/grad/verify.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

namespace {

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;

// Shared generators: support/grad_generators.hpp.
using namespace kalman_oracle::testing;

struct sizes {
  std::size_t batch, tokens, channels, state;
};
sizes gen_sizes(std::size_t max_tokens) {
  return {*rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, max_tokens + 1),
          *rc::gen::inRange<std::size_t>(1, 4), *rc::gen::inRange<std::size_t>(1, 5)};
}

template <class T>
struct value_gens {
  rc::Gen<T> value;     // q, k, v, η_0, cotangents
  rc::Gen<T> positive;  // Λ, λ_0
  rc::Gen<T> decay;     // ā
  rc::Gen<T> noise;     // p̄
};

template <class T>
kla_inputs<T> gen_inputs(const sizes& n, const value_gens<T>& g) {
  kla_inputs<T> in{gen_tensor<T>("q", {n.batch, n.tokens, n.state}, g.value),
                   gen_tensor<T>("k", {n.batch, n.tokens, n.state}, g.value),
                   gen_tensor<T>("v", {n.batch, n.tokens, n.channels}, g.value),
                   gen_tensor<T>("Lambda", gen_broadcast_shape({n.batch, n.tokens, n.channels}), g.positive),
                   gen_tensor<T>("a_bar", gen_broadcast_shape({n.batch, n.tokens, n.channels, n.state}), g.decay),
                   gen_tensor<T>("p_bar", gen_broadcast_shape({n.batch, n.tokens, n.channels, n.state}), g.noise),
                   std::nullopt,
                   std::nullopt};
  if (*rc::gen::arbitrary<bool>())
    in.lambda_0 = gen_tensor<T>("lambda_0", gen_broadcast_shape({n.batch, n.channels, n.state}), g.positive);
  if (*rc::gen::arbitrary<bool>())
    in.eta_0 = gen_tensor<T>("eta_0", gen_broadcast_shape({n.batch, n.channels, n.state}), g.value);
  return in;
}

/// A random non-empty subset of the cotangents.
template <class T>
cotangents<T> gen_cotangents(const sizes& n, const rc::Gen<T>& gen) {
  cotangents<T> cot;
  const int pick = *rc::gen::inRange(1, 16);
  if (pick & 1) cot.set(gen_tensor<T>("y", {n.batch, n.tokens, n.channels}, gen));
  if (pick & 2) cot.set(gen_tensor<T>("y_var", {n.batch, n.tokens, n.channels}, gen));
  if (pick & 4) cot.set(gen_tensor<T>("final_lambda", {n.batch, n.channels, n.state}, gen));
  if (pick & 8) cot.set(gen_tensor<T>("final_eta", {n.batch, n.channels, n.state}, gen));
  return cot;
}

template <class T>
named_tensors<T> gen_direction(const kla_inputs<T>& in, const rc::Gen<T>& gen) {
  named_tensors<T> u;
  for_each_input<kla_model>(in, [&](const std::string& role, const tensor<T>& x) { u.set(gen_tensor<T>(role, x.shape(), gen)); });
  return u;
}

/// A scan form: every schedule, rescale mode and recovery; chunk sizes 1, 2, 3 or > T.
kla_scan_options gen_scan(std::size_t tokens) {
  return {*rc::gen::elementOf(all_scan_schedules),
          *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two),
          *rc::gen::element<std::size_t>(1, 2, 3, tokens + 1),
          *rc::gen::element(kla_recovery::exclusive_scan, kla_recovery::inversion)};
}

value_gens<rational> rational_gens() {
  return {gen_small_rational(-6, 6), gen_small_rational(1, 8), gen_rational_decay(), gen_small_rational(0, 4)};
}
value_gens<double> double_gens() {
  return {gen_double(-2, 2), gen_double(0.25, 4), gen_double(0.25, 0.99), gen_double(1.0 / 64, 2)};
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
kla_inputs<B> to_scalar(const kla_inputs<double>& in) {
  return kla_model::transform<B>(in, [](const std::string&, const tensor<double>& x) { return to_scalar<B>(x); });
}

struct mpfr_problem {
  kla_inputs<double> in;
  cotangents<double> cot;
  named_tensors<double> direction;
};
mpfr_problem gen_mpfr_problem() {
  const sizes n = gen_sizes(8);
  const value_gens<double> g = double_gens();
  mpfr_problem p{gen_inputs<double>(n, g), gen_cotangents<double>(n, g.value), {}};
  p.direction = gen_direction<double>(p.in, gen_double(-1, 1));
  return p;
}

double worst_tape = -INFINITY, worst_dual = -INFINITY, worst_cd = -INFINITY;

}  // namespace

TEST_SUITE("grad") {
  TEST_CASE("grad: KLA adjoint equals the reverse-mode tape exactly (rationals)") {
    check_property("grad_kla_adjoint_equals_tape_exact", [] {
      const sizes n = gen_sizes(8);
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, g);
      const gradient_verdict v = adjoint_equals_tape_exact(kla_model{}, in, gen_cotangents<rational>(n, g.value));
      if (!v.ok) RC_FAIL(v.report);
    });
  }

  TEST_CASE("grad: the KLA scan form has the sequential gradient exactly (rationals)") {
    check_property("grad_kla_parallel_equals_sequential_exact", [] {
      const sizes n = gen_sizes(8);
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, g);
      const kla_scan_options scan = gen_scan(n.tokens);
      const gradient_verdict v = adjoint_equals_tape_exact(kla_model{scan}, in, gen_cotangents<rational>(n, g.value));
      if (!v.ok)
        RC_FAIL(to_string(scan.schedule) + ", " + to_string(scan.rescale) + ", " + to_string(scan.recovery) + ": " +
                v.report);
    });
  }

  TEST_CASE("grad: KLA <adjoint, u> equals the dual directional derivative exactly (rationals)") {
    check_property("grad_kla_dual_exact", [] {
      const sizes n = gen_sizes(8);
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, g);
      const auto u = gen_direction<rational>(in, gen_small_rational(-3, 3));
      const gradient_verdict v = inner_product_matches_dual(kla_model{}, in, u, gen_cotangents<rational>(n, g.value), 0);
      if (!v.ok) RC_FAIL(v.report);
    });
  }

  TEST_CASE("grad: KLA adjoint within 2^-200 of the tape, sequential and scan forms (MPFR-256)") {
    check_property("grad_kla_tape_mpfr256", [] {
      const mpfr_problem p = gen_mpfr_problem();
      const bool parallel = *rc::gen::arbitrary<bool>();
      const kla_model model{parallel ? std::optional<kla_scan_options>(gen_scan(p.in.k.dim(1))) : std::nullopt};
      const precision_scope scope(256);
      const gradient_verdict v =
          adjoint_within_bound_of_tape(model, to_scalar<mpfr_real>(p.in), to_scalar<mpfr_real>(p.cot), -200);
      worst_tape = std::max(worst_tape, v.log2_ratio);
      if (!v.ok) RC_FAIL(v.report);
    });
    MESSAGE("grad_kla_tape_mpfr256: worst log2(error / bound) = " << worst_tape);
  }

  TEST_CASE("grad: KLA <adjoint, u> within 2^-200 of the dual directional derivative (MPFR-256)") {
    check_property("grad_kla_dual_mpfr256", [] {
      const mpfr_problem p = gen_mpfr_problem();
      const precision_scope scope(256);
      const gradient_verdict v = inner_product_matches_dual(kla_model{}, to_scalar<mpfr_real>(p.in),
                                                            to_scalar<mpfr_real>(p.direction),
                                                            to_scalar<mpfr_real>(p.cot), -200);
      worst_dual = std::max(worst_dual, v.log2_ratio);
      if (!v.ok) RC_FAIL(v.report);
    });
    MESSAGE("grad_kla_dual_mpfr256: worst log2(error / bound) = " << worst_dual);
  }

  TEST_CASE("grad: KLA central differences agree within their truncation error (MPFR-512, h = 2^-120)") {
    check_property("grad_kla_central_difference_mpfr512", [] {
      const mpfr_problem p = gen_mpfr_problem();
      const precision_scope scope(512);
      const gradient_verdict v = central_difference_agrees(kla_model{}, to_scalar<mpfr_real>(p.in),
                                                           to_scalar<mpfr_real>(p.direction),
                                                           to_scalar<mpfr_real>(p.cot), -120, -200);
      worst_cd = std::max(worst_cd, v.log2_ratio);
      if (!v.ok) RC_FAIL(v.report);
    });
    MESSAGE("grad_kla_central_difference_mpfr512: worst log2(error / bound) = " << worst_cd);
  }
}
