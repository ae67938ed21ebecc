// Kalman Linear Attention (docs/math.md §6, §9; grad/kla.hpp) as a gradient problem for the laws of
// properties/grad_exact.cpp and grad_mpfr.cpp. A case draws every parameter in a random broadcast
// shape, the priors λ_0, η_0 present or absent, and a random subset of the cotangents of y, y_var,
// λ_T, η_T. Exact cases include ā = 1 and p̄ = 0; MPFR cases take ā ∈ [1/4, 0.99], p̄ ∈ [2⁻⁶, 2],
// Λ, λ_0 ∈ [1/4, 4], values in [−2, 2] (docs/gradients.md "Bounds"). The parallel form is the scan
// form with every schedule, rescale mode, chunk size 1, 2, 3 or > T and both λ_{t−1} recoveries.
#pragma once

#include <rapidcheck.h>

#include <doctest/doctest.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "grad_case.hpp"
#include "grad_generators.hpp"
#include "kalman_oracle/grad/kla.hpp"

namespace kalman_oracle::testing {

class kla_problem {
 public:
  static constexpr std::string_view name = "kla";                // properties grad_kla_*
  static constexpr std::string_view parallel_form = "parallel";  // grad_kla_parallel_*

  template <class T, class Check>
  static void with_case(forward_form form, Check&& check) {
    const sizes n{*rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, 9),
                  *rc::gen::inRange<std::size_t>(1, 4), *rc::gen::inRange<std::size_t>(1, 5)};
    const kla_model model{form == forward_form::parallel ? std::optional(gen_scan(n.tokens)) : std::nullopt};
    const value_gens<T> g = gens<T>();
    check(make_gradient_case<T>(model, gen_inputs<T>(n, g),
                                {{"y", {n.batch, n.tokens, n.channels}},
                                 {"y_var", {n.batch, n.tokens, n.channels}},
                                 {"final_lambda", {n.batch, n.channels, n.state}},
                                 {"final_eta", {n.batch, n.channels, n.state}}},
                                g.value, label(model)));
  }

 private:
  struct sizes {
    std::size_t batch, tokens, channels, state;
  };

  template <class T>
  struct value_gens {
    rc::Gen<T> value;     // q, k, v, η_0, cotangents
    rc::Gen<T> positive;  // Λ, λ_0
    rc::Gen<T> decay;     // ā
    rc::Gen<T> noise;     // p̄
  };
  template <class T>
  static value_gens<T> gens() {
    if constexpr (scalar_traits<T>::is_exact)
      return {gen_small_rational(-6, 6), gen_small_rational(1, 8), gen_rational_decay(), gen_small_rational(0, 4)};
    else
      return {gen_double(-2, 2), gen_double(0.25, 4), gen_double(0.25, 0.99), gen_double(1.0 / 64, 2)};
  }

  template <class T>
  static kla_inputs<T> gen_inputs(const sizes& n, const value_gens<T>& g) {
    kla_inputs<T> in{gen_tensor<T>("q", {n.batch, n.tokens, n.state}, g.value),
                     gen_tensor<T>("k", {n.batch, n.tokens, n.state}, g.value),
                     gen_tensor<T>("v", {n.batch, n.tokens, n.channels}, g.value),
                     gen_broadcast_tensor<T>("Lambda", {n.batch, n.tokens, n.channels}, g.positive),
                     gen_broadcast_tensor<T>("a_bar", {n.batch, n.tokens, n.channels, n.state}, g.decay),
                     gen_broadcast_tensor<T>("p_bar", {n.batch, n.tokens, n.channels, n.state}, g.noise),
                     std::nullopt,
                     std::nullopt};
    in.lambda_0 = gen_optional_broadcast_tensor<T>("lambda_0", {n.batch, n.channels, n.state}, g.positive);
    in.eta_0 = gen_optional_broadcast_tensor<T>("eta_0", {n.batch, n.channels, n.state}, g.value);
    return in;
  }

  static kla_scan_options gen_scan(std::size_t tokens) {
    return {
        *rc::gen::elementOf(all_scan_schedules),
        *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two),
        *rc::gen::element<std::size_t>(1, 2, 3, tokens + 1),
        *rc::gen::element(kla_recovery::exclusive_scan, kla_recovery::inversion)};
  }

  static std::string label(const kla_model& model) {
    if (!model.parallel) return "sequential";
    const kla_scan_options& s = *model.parallel;
    return to_string(s.schedule) + ", C = " + std::to_string(s.chunk_size) + ", " + to_string(s.rescale) + ", " +
           to_string(s.recovery);
  }
};

}  // namespace kalman_oracle::testing

TYPE_TO_STRING_AS("KLA", kalman_oracle::testing::kla_problem);
