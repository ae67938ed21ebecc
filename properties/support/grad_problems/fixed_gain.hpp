// The fixed-gain family (GLA, DeltaNet, GDN, KDA and the given gain; docs/math.md §7, §9;
// grad/fixed_gain.hpp) as a gradient problem for the laws of properties/grad_exact.cpp and
// grad_mpfr.cpp. A case draws the rule, every parameter in a random broadcast shape and a random
// subset of the cotangents of o and S_T; exact cases use linear gates (decays in (0, 1], 1
// included), MPFR cases log gates g ∈ [−2, −2⁻⁶], β ∈ [0, 2], values in [−2, 2]
// (docs/gradients.md "Bounds"). The parallel form is the chunked WY form, C ∈ {1, 2, 3, 4, T + 1},
// and it has its own adjoint (grad/fixed_gain_chunked.hpp).
#pragma once

#include <rapidcheck.h>

#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "grad_case.hpp"
#include "grad_generators.hpp"
#include "kalman_oracle/grad/fixed_gain.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"

namespace kalman_oracle::testing {

class fixed_gain_problem {
 public:
  static constexpr std::string_view name = "fixed_gain";        // properties grad_fixed_gain_*
  static constexpr std::string_view parallel_form = "chunked";  // grad_fixed_gain_chunked_*

  template <class T, class Check>
  static void with_case(forward_form form, Check&& check) {
    const head_sizes n = gen_head_sizes(4, 4);
    const fixed_gain_model model{
        form == forward_form::parallel ? *rc::gen::element<std::size_t>(1, 2, 3, 4, n.tokens + 1) : std::size_t{0}};
    const value_gens<T> g = gens<T>();
    fixed_gain_inputs<T> in = gen_inputs<T>(n, g);
    const std::string label = to_string(in.rule) + (in.gain ? " (given gain)" : "") +
                              (model.chunk_size == 0 ? std::string() : ", C = " + std::to_string(model.chunk_size));
    check(make_gradient_case<T>(
        model, std::move(in),
        {{"o", {n.batch, n.tokens, n.heads, n.value_dim}}, {"final_state", {n.batch, n.heads, n.key_dim, n.value_dim}}},
        g.value, label));
  }

  /// The chunked form's own adjoint (grad/fixed_gain_chunked.hpp) at the case's chunk size.
  static constexpr bool has_parallel_backward = true;
  template <class T>
  static gradients<T> parallel_backward(const gradient_case<fixed_gain_model, T>& c) {
    return fixed_gain_chunked_backward(c.inputs, c.cot, c.model.chunk_size);
  }

 private:
  template <class T>
  struct value_gens {
    rc::Gen<T> value;  // q, k, v, S_0, cotangents
    rc::Gen<T> gate;   // g: linear decays over rationals, log gates over doubles
    rc::Gen<T> beta;   // β and κ
    rc::Gen<T> scale;  // τ when given
  };
  template <class T>
  static value_gens<T> gens() {
    if constexpr (scalar_traits<T>::is_exact)
      return {gen_small_rational(-6, 6), gen_rational_decay(), gen_small_rational(-4, 4), gen_small_rational(1, 4)};
    else
      return {gen_double(-2, 2), gen_double(-2, -1.0 / 64), gen_double(0, 2), gen_double(0.25, 2)};
  }

  template <class T>
  static fixed_gain_inputs<T> gen_inputs(const head_sizes& n, const value_gens<T>& g) {
    fixed_gain_inputs<T> in;
    in.rule = *rc::gen::element(fixed_gain_rule::gla, fixed_gain_rule::delta_net, fixed_gain_rule::gated_delta_net,
                                fixed_gain_rule::kda);
    const bool given_gain = in.rule != fixed_gain_rule::gla && *rc::gen::arbitrary<bool>();
    // exp is not exact over rationals: exact cases run the linear-gate branch (docs/gradients.md).
    in.gates = scalar_traits<T>::is_exact ? gate_space::linear : gate_space::log;
    in.q = gen_tensor<T>("q", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
    in.k = gen_tensor<T>("k", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
    in.v = gen_tensor<T>("v", {n.batch, n.tokens, n.heads, n.value_dim}, g.value);
    if (in.rule == fixed_gain_rule::gated_delta_net)
      in.g = gen_broadcast_tensor<T>("g", {n.batch, n.tokens, n.heads}, g.gate);
    else if (in.rule != fixed_gain_rule::delta_net)
      in.g = gen_broadcast_tensor<T>("g", {n.batch, n.tokens, n.heads, n.key_dim}, g.gate);
    if (given_gain)
      in.gain = gen_broadcast_tensor<T>("gain", {n.batch, n.tokens, n.heads, n.key_dim}, g.beta);
    else if (in.rule != fixed_gain_rule::gla)
      in.beta = gen_broadcast_tensor<T>("beta", {n.batch, n.tokens, n.heads}, g.beta);
    in.initial_state =
        gen_optional_broadcast_tensor<T>("initial_state", {n.batch, n.heads, n.key_dim, n.value_dim}, g.value);
    in.scale = gen_query_scale<T>(n.key_dim, g.scale);
    return in;
  }
};

}  // namespace kalman_oracle::testing

TYPE_TO_STRING_AS("fixed gain", kalman_oracle::testing::fixed_gain_problem);
