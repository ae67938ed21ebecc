// Gradients of the dense Kalman filter, moment and information forms (MATH.md §2, §3, §9;
// grad/dense.hpp), law family "grad". Each case draws the form (moment or information; the
// information form's gradient is the moment form's, the cotangents of Y_T and H_T folded in), the
// transition (absent, diagonal, a scalar α I, or full), the process noise (absent, diagonal or full
// SPD) and the prior (default or SPD P_0), each in a random broadcast shape:
//
//   exact (rationals, K <= 3, T <= 8, linear decays; a random subset of the cotangents of o, S_T,
//   P_T, s_t, the Mahalanobis term and the readout variance, and of Y_T, H_T for the information form):
//     grad_dense_adjoint_equals_tape_exact   adjoint == reverse-mode tape of the form drawn (the
//                                            gradients of P_0 and a full Ω symmetrised on both sides)
//     grad_dense_dual_exact                  ⟨adjoint, u⟩ == dual-number dL[u], random u (symmetric
//                                            for P_0 and a full Ω)
//   MPFR (K <= 4, T <= 8; diagonal D from log gates in [−1, 1/2] (linear decays too in the tape
//   check) or full D, q, k, v, D entries in [−1, 1], r, ω, τ in [1/4, 2]; the log-likelihood
//   cotangent too):
//     grad_dense_tape_mpfr256                |adjoint − tape| ≤ 2⁻²⁰⁰ max|tape|
//     grad_dense_dual_mpfr256                |⟨adjoint, u⟩ − dL[u]| ≤ 2⁻²⁰⁰ Σ|adjoint||u|
//     grad_dense_central_difference_mpfr512  |⟨adjoint, u⟩ − CD(2⁻¹²⁰)| ≤ 2⁻²⁰⁰ (Σ|adjoint||u| + |L|)
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
#include "kalman_oracle/grad/dense.hpp"
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
sizes gen_sizes(std::size_t max_tokens, std::size_t max_key) {
  return {*rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, max_tokens + 1),
          *rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, max_key + 1),
          *rc::gen::inRange<std::size_t>(1, 4)};
}

template <class T>
struct value_gens {
  rc::Gen<T> value;     // q, k, v, S_0, full D, matrix factors, cotangents
  rc::Gen<T> gate;      // diagonal D: α (linear) or g (log)
  rc::Gen<T> positive;  // r, ω, the diagonal shift of SPD matrices, τ
};

/// Symmetric positive definite K x K matrices A Aᵀ + c I (exactly symmetric) for every leading
/// index of a broadcast shape of `lead`.
template <class T>
tensor<T> gen_spd(const std::string& name, const shape_t& lead, std::size_t K, const value_gens<T>& g) {
  shape_t shape = gen_broadcast_shape(lead);
  shape.push_back(K);
  shape.push_back(K);
  tensor<T> x(name, shape);
  for (std::size_t m = 0; m * K * K < x.size(); ++m) {
    const auto a = *rc::gen::container<std::vector<T>>(K * K, g.value);
    const T shift = *g.positive;
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < K; ++j) {
        T acc(0);
        for (std::size_t l = 0; l < K; ++l) acc += a[i * K + l] * a[j * K + l];
        x.data()[m * K * K + i * K + j] = acc + (i == j ? shift : T(0));
      }
  }
  return x;
}

template <class T>
dense_inputs<T> gen_inputs(const sizes& n, gate_space gates, const value_gens<T>& g) {
  dense_inputs<T> in;
  in.q = gen_tensor<T>("q", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
  in.k = gen_tensor<T>("k", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
  in.v = gen_tensor<T>("v", {n.batch, n.tokens, n.heads, n.value_dim}, g.value);
  const shape_t lead{n.batch, n.tokens, n.heads};
  switch (*rc::gen::inRange(0, 4)) {
    case 0: break;  // D = I
    case 1:
      in.transition = dense_transition<T>::diagonal(
          gen_tensor<T>("alpha", gen_broadcast_shape({n.batch, n.tokens, n.heads, n.key_dim}), g.gate), gates);
      break;
    case 2: {  // a scalar decay α I: a last axis of 1
      shape_t s = gen_broadcast_shape(lead);
      s.push_back(1);
      in.transition = dense_transition<T>::diagonal(gen_tensor<T>("alpha", s, g.gate), gates);
      break;
    }
    default: {
      shape_t s = gen_broadcast_shape(lead);
      s.push_back(n.key_dim);
      s.push_back(n.key_dim);
      in.transition = dense_transition<T>::full(gen_tensor<T>("D", s, g.value));
    }
  }
  switch (*rc::gen::inRange(0, 3)) {
    case 0: break;  // Ω = 0
    case 1:
      in.process_noise = dense_process_noise<T>::diagonal(
          gen_tensor<T>("omega", gen_broadcast_shape({n.batch, n.tokens, n.heads, n.key_dim}), g.positive));
      break;
    default: in.process_noise = dense_process_noise<T>::full(gen_spd<T>("Omega", lead, n.key_dim, g));
  }
  in.r = gen_tensor<T>("r", gen_broadcast_shape(lead), g.positive);
  if (*rc::gen::arbitrary<bool>())
    in.initial_state = gen_tensor<T>("initial_state", gen_broadcast_shape({n.batch, n.heads, n.key_dim, n.value_dim}), g.value);
  if (*rc::gen::arbitrary<bool>()) in.initial_covariance = gen_spd<T>("P0", {n.batch, n.heads}, n.key_dim, g);
  const bool exact_default_ok = n.key_dim == 1 || n.key_dim == 4;
  if (!(scalar_traits<T>::is_exact && !exact_default_ok) && *rc::gen::arbitrary<bool>()) return in;
  in.scale = *g.positive;
  return in;
}

template <class T>
cotangents<T> gen_cotangents(const sizes& n, bool information, const rc::Gen<T>& gen) {
  cotangents<T> cot;
  const std::size_t B = n.batch, N = n.tokens, H = n.heads, K = n.key_dim, V = n.value_dim;
  const int outputs = information ? 9 : 7;
  const int count = scalar_traits<T>::is_exact ? outputs - 1 : outputs;  // rationals: no log likelihood
  const auto pick = *rc::gen::suchThat(rc::gen::container<std::vector<bool>>(static_cast<std::size_t>(count),
                                                                               rc::gen::arbitrary<bool>()),
                                       [](const std::vector<bool>& p) { return std::count(p.begin(), p.end(), true) > 0; });
  const std::vector<std::pair<std::string, shape_t>> all = {
      {"o", {B, N, H, V}},          {"final_state", {B, H, K, V}},   {"final_covariance", {B, H, K, K}},
      {"innovation_variance", {B, N, H}}, {"mahalanobis", {B, N, H}}, {"readout_variance", {B, N, H}},
      {"final_precision", {B, H, K, K}},  {"final_information", {B, H, K, V}}, {"log_likelihood", {B, N, H}}};
  std::size_t slot = 0;
  for (const auto& [name, shape] : all) {
    if (!information && (name == "final_precision" || name == "final_information")) continue;
    if (scalar_traits<T>::is_exact && name == "log_likelihood") continue;
    if (pick[slot++]) cot.set(gen_tensor<T>(name, shape, gen));
  }
  return cot;
}

/// A direction u, symmetric in the last two axes for P_0 and a full Ω (dL along a non-symmetric
/// perturbation of a symmetric input is not defined: grad/dense.hpp).
template <class T>
named_tensors<T> gen_direction(const dense_inputs<T>& in, const rc::Gen<T>& gen) {
  named_tensors<T> u;
  for_each_input<dense_model>(in, [&](const std::string& role, const tensor<T>& x) {
    tensor<T> d = gen_tensor<T>(role, x.shape(), gen);
    if (role == "initial_covariance" || (role == "process_noise" && in.process_noise->form == dense_form::full))
      grad_detail::symmetrise_matrices(d);
    u.set(std::move(d));
  });
  return u;
}

value_gens<rational> rational_gens() {
  return {gen_small_rational(-3, 3), gen_rational_decay(), gen_small_rational(1, 4)};
}
value_gens<double> double_gens() { return {gen_double(-1, 1), gen_double(-1, 0.5), gen_double(0.25, 2)}; }

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
dense_inputs<B> to_scalar(const dense_inputs<double>& in) {
  return dense_model::transform<B>(in, [](const std::string&, const tensor<double>& x) { return to_scalar<B>(x); });
}

double worst_tape = -INFINITY, worst_dual = -INFINITY, worst_cd = -INFINITY;

}  // namespace

TEST_SUITE("grad") {
  TEST_CASE("grad: dense adjoint equals the reverse-mode tape exactly, moment and information forms (rationals)") {
    check_property("grad_dense_adjoint_equals_tape_exact", [] {
      const sizes n = gen_sizes(8, 3);
      const dense_model model{*rc::gen::arbitrary<bool>()};
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, gate_space::linear, g);
      const gradient_verdict v = adjoint_equals_tape_exact(model, in, gen_cotangents<rational>(n, model.information, g.value));
      if (!v.ok) RC_FAIL(std::string(model.information ? "information: " : "moment: ") + v.report);
    });
  }

  TEST_CASE("grad: dense <adjoint, u> equals the dual directional derivative exactly (rationals)") {
    check_property("grad_dense_dual_exact", [] {
      const sizes n = gen_sizes(8, 3);
      const dense_model model{*rc::gen::arbitrary<bool>()};
      const value_gens<rational> g = rational_gens();
      const auto in = gen_inputs<rational>(n, gate_space::linear, g);
      const auto u = gen_direction<rational>(in, gen_small_rational(-3, 3));
      const gradient_verdict v =
          inner_product_matches_dual(model, in, u, gen_cotangents<rational>(n, model.information, g.value), 0);
      if (!v.ok) RC_FAIL(std::string(model.information ? "information: " : "moment: ") + v.report);
    });
  }

  TEST_CASE("grad: dense adjoint within 2^-200 of the tape, moment and information forms (MPFR-256)") {
    check_property("grad_dense_tape_mpfr256", [] {
      const sizes n = gen_sizes(8, 4);
      const dense_model model{*rc::gen::arbitrary<bool>()};
      const value_gens<double> g = double_gens();
      const auto in = gen_inputs<double>(n, *rc::gen::element(gate_space::log, gate_space::linear), g);
      const auto cot = gen_cotangents<double>(n, model.information, g.value);
      const precision_scope scope(256);
      const gradient_verdict v = adjoint_within_bound_of_tape(model, to_scalar<mpfr_real>(in), to_scalar<mpfr_real>(cot), -200);
      worst_tape = std::max(worst_tape, v.log2_ratio);
      if (!v.ok) RC_FAIL(std::string(model.information ? "information: " : "moment: ") + v.report);
    });
    MESSAGE("grad_dense_tape_mpfr256: worst log2(error / bound) = " << worst_tape);
  }

  TEST_CASE("grad: dense <adjoint, u> within 2^-200 of the dual directional derivative (MPFR-256)") {
    check_property("grad_dense_dual_mpfr256", [] {
      const sizes n = gen_sizes(8, 4);
      const dense_model model{*rc::gen::arbitrary<bool>()};
      const value_gens<double> g = double_gens();
      const auto in = gen_inputs<double>(n, gate_space::log, g);
      const auto cot = gen_cotangents<double>(n, model.information, g.value);
      const auto u = gen_direction<double>(in, gen_double(-1, 1));
      const precision_scope scope(256);
      const gradient_verdict v = inner_product_matches_dual(model, to_scalar<mpfr_real>(in), to_scalar<mpfr_real>(u),
                                                            to_scalar<mpfr_real>(cot), -200);
      worst_dual = std::max(worst_dual, v.log2_ratio);
      if (!v.ok) RC_FAIL(std::string(model.information ? "information: " : "moment: ") + v.report);
    });
    MESSAGE("grad_dense_dual_mpfr256: worst log2(error / bound) = " << worst_dual);
  }

  TEST_CASE("grad: dense central differences agree within their truncation error (MPFR-512, h = 2^-120)") {
    check_property("grad_dense_central_difference_mpfr512", [] {
      const sizes n = gen_sizes(8, 4);
      const dense_model model{*rc::gen::arbitrary<bool>()};
      const value_gens<double> g = double_gens();
      const auto in = gen_inputs<double>(n, gate_space::log, g);
      const auto cot = gen_cotangents<double>(n, model.information, g.value);
      const auto u = gen_direction<double>(in, gen_double(-1, 1));
      const precision_scope scope(512);
      const gradient_verdict v = central_difference_agrees(model, to_scalar<mpfr_real>(in), to_scalar<mpfr_real>(u),
                                                           to_scalar<mpfr_real>(cot), -120, -200);
      worst_cd = std::max(worst_cd, v.log2_ratio);
      if (!v.ok) RC_FAIL(std::string(model.information ? "information: " : "moment: ") + v.report);
    });
    MESSAGE("grad_dense_central_difference_mpfr512: worst log2(error / bound) = " << worst_cd);
  }
}
