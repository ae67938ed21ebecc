// The diagonal and isotropic Kalman Delta Networks (docs/math.md §4, §5, §9; grad/diagonal.hpp,
// grad/isotropic.hpp) as one gradient problem for the laws of properties/grad_exact.cpp and
// grad_mpfr.cpp: each case draws the model. A case draws every parameter in a random broadcast
// shape, μ, the prior covariance, S_0 and τ present or absent, and a random subset of the
// cotangents of o, S_T, the final covariance and the readout variance, and of the internals p̂_t
// (b̂_t) and κ_t (β_t) (the gain path's own outputs, which the GPU's gain backward takes). Exact cases use linear
// gates α ∈ (0, 1] with 1 included and ω >= 0 with 0 included; MPFR cases log gates
// g ∈ [−2, −2⁻⁶], ω ∈ [2⁻⁶, 2], r, μ, p_0 ∈ [1/4, 4], values in [−2, 2] (docs/gradients.md
// "Bounds"). The parallel form scans the covariance with every schedule, chunk size 1, 2, 3 or > T
// and every rescale mode, runs the memory in chunks of 1, 2, 3 or > T tokens (the isotropic model in
// either association), and has its own adjoint (grad/kdn_parallel.hpp).
#pragma once

#include <rapidcheck.h>

#include <doctest/doctest.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "grad_case.hpp"
#include "grad_generators.hpp"
#include "kalman_oracle/grad/diagonal.hpp"
#include "kalman_oracle/grad/isotropic.hpp"
#include "kalman_oracle/grad/kdn_parallel.hpp"

namespace kalman_oracle::testing {

class kdn_problem {
 public:
  static constexpr std::string_view name = "kdn";                // properties grad_kdn_*
  static constexpr std::string_view parallel_form = "parallel";  // grad_kdn_parallel_*

  template <class T, class Check>
  static void with_case(forward_form form, Check&& check) {
    const head_sizes n = gen_head_sizes(4, 4);
    const bool diagonal = *rc::gen::arbitrary<bool>();
    const std::optional<kdn_scan_options> scan =
        form == forward_form::parallel ? std::optional(gen_scan(n.tokens, diagonal)) : std::nullopt;
    const value_gens<T> g = gens<T>();
    // The covariance is [B, H, K] (diagonal) or one number per head [B, H] (isotropic).
    const shape_t covariance = diagonal ? shape_t{n.batch, n.heads, n.key_dim} : shape_t{n.batch, n.heads};
    const shape_t per_token =
        diagonal ? shape_t{n.batch, n.tokens, n.heads, n.key_dim} : shape_t{n.batch, n.tokens, n.heads};
    const std::vector<output_shape> outputs{{"o", {n.batch, n.tokens, n.heads, n.value_dim}},
                                            {"final_state", {n.batch, n.heads, n.key_dim, n.value_dim}},
                                            {"final_covariance", covariance},
                                            {"readout_variance", {n.batch, n.tokens, n.heads}},
                                            {"predicted_covariance", per_token},
                                            {diagonal ? "gain" : "beta", per_token}};
    const std::string label = (diagonal ? "diagonal" : "isotropic") + scan_label(scan);
    if (diagonal)
      check(make_gradient_case<T>(
          diagonal_kdn_model{scan, /*internals=*/true},
          gen_inputs<diagonal_kdn_inputs<T>>(n, {n.batch, n.tokens, n.heads, n.key_dim}, covariance, g), outputs,
          g.value, label));
    else
      check(make_gradient_case<T>(isotropic_kdn_model{scan, /*internals=*/true},
                                  gen_inputs<isotropic_kdn_inputs<T>>(n, {n.batch, n.tokens, n.heads}, covariance, g),
                                  outputs, g.value, label));
  }

  /// The parallel form's own adjoint (grad/kdn_parallel.hpp) with the case's scan options.
  static constexpr bool has_parallel_backward = true;
  template <class Model, class T>
  static gradients<T> parallel_backward(const gradient_case<Model, T>& c) {
    if constexpr (std::is_same_v<Model, diagonal_kdn_model>)
      return diagonal_kdn_parallel_backward(c.inputs, c.cot, *c.model.parallel);
    else
      return isotropic_kdn_parallel_backward(c.inputs, c.cot, *c.model.parallel);
  }

 private:
  template <class T>
  struct value_gens {
    rc::Gen<T> value;     // q, k, v, S_0, cotangents
    rc::Gen<T> gate;      // α (linear) over rationals, g (log) over doubles
    rc::Gen<T> noise;     // ω
    rc::Gen<T> positive;  // r, μ, p_0 / b_0, τ
  };
  template <class T>
  static value_gens<T> gens() {
    if constexpr (scalar_traits<T>::is_exact)
      return {gen_small_rational(-6, 6), gen_rational_decay(), gen_small_rational(0, 4), gen_small_rational(1, 8)};
    else
      return {gen_double(-2, 2), gen_double(-2, -1.0 / 64), gen_double(1.0 / 64, 2), gen_double(0.25, 4)};
  }

  /// Both KDN input structs have the same fields; only the shapes of ω and of the prior covariance
  /// differ.
  template <class Inputs, class T>
  static Inputs gen_inputs(const head_sizes& n, const shape_t& omega, const shape_t& covariance,
                           const value_gens<T>& g) {
    Inputs in;
    in.q = gen_tensor<T>("q", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
    in.k = gen_tensor<T>("k", {n.batch, n.tokens, n.heads, n.key_dim}, g.value);
    in.v = gen_tensor<T>("v", {n.batch, n.tokens, n.heads, n.value_dim}, g.value);
    in.g = gen_broadcast_tensor<T>("g", {n.batch, n.tokens, n.heads, n.key_dim}, g.gate);
    // exp is not exact over rationals: exact cases run the linear-gate branch (docs/gradients.md).
    in.gates = scalar_traits<T>::is_exact ? gate_space::linear : gate_space::log;
    in.omega = gen_broadcast_tensor<T>("omega", omega, g.noise);
    in.r = gen_broadcast_tensor<T>("r", {n.batch, n.tokens, n.heads}, g.positive);
    in.mu = gen_optional_broadcast_tensor<T>("mu", {n.heads}, g.positive);
    in.initial_covariance = gen_optional_broadcast_tensor<T>("initial_covariance", covariance, g.positive);
    in.initial_state =
        gen_optional_broadcast_tensor<T>("initial_state", {n.batch, n.heads, n.key_dim, n.value_dim}, g.value);
    in.scale = gen_query_scale<T>(n.key_dim, g.positive);
    return in;
  }

  static kdn_scan_options gen_scan(std::size_t tokens, bool diagonal) {
    kdn_scan_options scan{*rc::gen::elementOf(all_scan_schedules), *rc::gen::element<std::size_t>(1, 2, 3, tokens + 1),
                          *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry,
                                            rescale_mode::power_of_two)};
    scan.memory_chunk_size = *rc::gen::element<std::size_t>(1, 2, 3, tokens + 1);
    if (!diagonal && *rc::gen::arbitrary<bool>()) scan.memory_association = kdn_memory_association::beta_form;
    return scan;
  }

  static std::string scan_label(const std::optional<kdn_scan_options>& scan) {
    if (!scan) return "";
    return ", " + to_string(scan->schedule) + ", C = " + std::to_string(scan->chunk_size) + ", " +
           to_string(scan->rescale) + ", memory C = " + std::to_string(scan->memory_chunk_size) +
           (scan->memory_association == kdn_memory_association::beta_form ? ", beta-form" : "");
  }
};

}  // namespace kalman_oracle::testing

TYPE_TO_STRING_AS("KDN", kalman_oracle::testing::kdn_problem);
