// The dense Kalman filter, moment and information forms (docs/math.md §2, §3, §9; grad/dense.hpp), as a
// gradient problem for the laws of properties/grad_exact.cpp and grad_mpfr.cpp. Each case draws the
// form (moment or information; the information form's gradient is the moment form's, with the
// cotangents of Y_T and H_T folded in), the transition (absent, diagonal, a scalar α I, or full),
// the process noise (absent, diagonal or full SPD) and the prior (default or SPD P_0), each in a
// random broadcast shape, and a random subset of the cotangents of o, S_T, P_T, s_t, the
// Mahalanobis term, the readout variance (and Y_T, H_T for the information form; the
// log-likelihood too in MPFR, as log is not exact over rationals). Exact cases: K <= 3, linear
// decays; MPFR cases: K <= 4, diagonal D from log gates or linear decays in [−1, 1/2] or full D,
// q, k, v, D entries in [−1, 1], r, ω, τ in [1/4, 2] (docs/gradients.md "Bounds"). The dense filter
// has no parallel form.
#pragma once

#include <rapidcheck.h>

#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "grad_case.hpp"
#include "grad_generators.hpp"
#include "kalman_oracle/grad/dense.hpp"

namespace kalman_oracle::testing {

class dense_problem {
 public:
  static constexpr std::string_view name = "dense";  // properties grad_dense_*

  template <class T, class Check>
  static void with_case(Check&& check) {
    const head_sizes n = gen_head_sizes(scalar_traits<T>::is_exact ? 3 : 4, 3);
    const dense_model model{*rc::gen::arbitrary<bool>()};
    const value_gens<T> g = gens<T>();
    check(make_gradient_case<T>(model, gen_inputs<T>(n, g), outputs<T>(n, model.information), g.value,
                                model.information ? "information" : "moment"));
  }

 private:
  template <class T>
  struct value_gens {
    rc::Gen<T> value;     // q, k, v, S_0, full D, matrix factors, cotangents
    rc::Gen<T> gate;      // diagonal D: α (linear) or g (log)
    rc::Gen<T> positive;  // r, ω, the diagonal shift of SPD matrices, τ
  };
  template <class T>
  static value_gens<T> gens() {
    if constexpr (scalar_traits<T>::is_exact)
      return {gen_small_rational(-3, 3), gen_rational_decay(), gen_small_rational(1, 4)};
    else
      return {gen_double(-1, 1), gen_double(-1, 0.5), gen_double(0.25, 2)};
  }

  /// Symmetric positive definite K x K matrices A Aᵀ + c I (exactly symmetric) for every leading
  /// index of a broadcast shape of `lead`.
  template <class T>
  static tensor<T> gen_spd(const std::string& name, const shape_t& lead, std::size_t K, const value_gens<T>& g) {
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

  /// A broadcast shape of `lead` followed by `trailing` (the matrix or vector axes of D).
  static shape_t broadcast_then(const shape_t& lead, const shape_t& trailing) {
    shape_t s = gen_broadcast_shape(lead);
    s.insert(s.end(), trailing.begin(), trailing.end());
    return s;
  }

  template <class T>
  static dense_inputs<T> gen_inputs(const head_sizes& n, const value_gens<T>& g) {
    dense_inputs<T> in;
    in.q = gen_tensor<T>("q", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
    in.k = gen_tensor<T>("k", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
    in.v = gen_tensor<T>("v", {n.batch, n.tokens, n.heads, n.value_dim}, g.value);
    const shape_t lead{n.batch, n.tokens, n.heads};
    // exp is not exact over rationals: exact cases take linear decays; MPFR cases either.
    const gate_space gates =
        scalar_traits<T>::is_exact ? gate_space::linear : *rc::gen::element(gate_space::log, gate_space::linear);
    switch (*rc::gen::inRange(0, 4)) {
      case 0: break;  // D = I
      case 1:
        in.transition = dense_transition<T>::diagonal(
            gen_broadcast_tensor<T>("alpha", {n.batch, n.tokens, n.heads, n.key_dim}, g.gate), gates);
        break;
      case 2:  // a scalar decay α I: a last axis of 1
        in.transition = dense_transition<T>::diagonal(gen_tensor<T>("alpha", broadcast_then(lead, {1}), g.gate), gates);
        break;
      default:
        in.transition =
            dense_transition<T>::full(gen_tensor<T>("D", broadcast_then(lead, {n.key_dim, n.key_dim}), g.value));
    }
    switch (*rc::gen::inRange(0, 3)) {
      case 0: break;  // Ω = 0
      case 1:
        in.process_noise = dense_process_noise<T>::diagonal(
            gen_broadcast_tensor<T>("omega", {n.batch, n.tokens, n.heads, n.key_dim}, g.positive));
        break;
      default: in.process_noise = dense_process_noise<T>::full(gen_spd<T>("Omega", lead, n.key_dim, g));
    }
    in.r = gen_broadcast_tensor<T>("r", lead, g.positive);
    in.initial_state =
        gen_optional_broadcast_tensor<T>("initial_state", {n.batch, n.heads, n.key_dim, n.value_dim}, g.value);
    if (*rc::gen::arbitrary<bool>()) in.initial_covariance = gen_spd<T>("P0", {n.batch, n.heads}, n.key_dim, g);
    in.scale = gen_query_scale<T>(n.key_dim, g.positive);
    return in;
  }

  template <class T>
  static std::vector<output_shape> outputs(const head_sizes& n, bool information) {
    const std::size_t B = n.batch, N = n.tokens, H = n.heads, K = n.key_dim, V = n.value_dim;
    std::vector<output_shape> all{{"o", {B, N, H, V}},
                                  {"final_state", {B, H, K, V}},
                                  {"final_covariance", {B, H, K, K}},
                                  {"innovation_variance", {B, N, H}},
                                  {"mahalanobis", {B, N, H}},
                                  {"readout_variance", {B, N, H}}};
    if (information) {
      all.push_back({"final_precision", {B, H, K, K}});
      all.push_back({"final_information", {B, H, K, V}});
    }
    if (!scalar_traits<T>::is_exact) all.push_back({"log_likelihood", {B, N, H}});
    return all;
  }
};

}  // namespace kalman_oracle::testing

TYPE_TO_STRING_AS("dense", kalman_oracle::testing::dense_problem);
