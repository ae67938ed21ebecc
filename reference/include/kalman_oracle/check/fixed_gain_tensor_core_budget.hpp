// The fixed-gain family's chunked WY form (models/fixed_gain_chunked.hpp) run on the spot in binary64
// with its tensor-core budget per element (check/tensor_core_budget.hpp): what a tensor-core kernel of
// that form (fla's chunked kernels, KalmanOracle's gpu/ delta-rule kernel) is checked against at shapes
// too large to certify in MPFR, as the fixtures' bf16-tc tier checks it on the fixtures
// (docs/kernels.md, "validate"; docs/error-model.md, "Tensor-core tiers").
//
// The binary64 run is itself a floating-point evaluation: its own first-order error, 2 · 2^-53 E_acc
// (the same running error at binary64's unit roundoff), is added to the budget.
#pragma once

#include <algorithm>
#include <cstddef>
#include <future>
#include <optional>

#include "kalman_oracle/check/tensor_core_budget.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/running_error.hpp"

namespace kalman_oracle::check {

struct fixed_gain_tensor_core_result {
  tensor<double> o, final_state;                ///< the chunked form in binary64
  tensor<double> o_budget, final_state_budget;  ///< per element: tier budget + the binary64 run's own error
};

/// A binary64 tensor in the scalar type T (from_double: exact for every type here but float and its
/// kin, and for those too where the values are binary32 ones).
template <class T>
tensor<T> tensor_as(const tensor<double>& x) {
  tensor<T> r(x.name(), x.shape());
  for (std::size_t i = 0; i < x.size(); ++i) r.data()[i] = scalar_traits<T>::from_double(x.data()[i]);
  return r;
}

template <class T>
std::optional<tensor<T>> tensor_as(const std::optional<tensor<double>>& x) {
  if (!x) return std::nullopt;
  return tensor_as<T>(*x);
}

/// The same problem in the scalar type T, each input T's value of the binary64 one (exact for every type
/// here when the inputs are binary32 values, as validate draws them): the running error's runs
/// (running_error<double>, every input with error 0) and validate's honest binary32 members
/// (gpu/tools/validate_typical_envelope.cpp).
template <class T>
fixed_gain_inputs<T> fixed_gain_inputs_as(const fixed_gain_inputs<double>& inputs) {
  fixed_gain_inputs<T> in;
  in.rule = inputs.rule;
  in.q = tensor_as<T>(inputs.q);
  in.k = tensor_as<T>(inputs.k);
  in.v = tensor_as<T>(inputs.v);
  in.g = tensor_as<T>(inputs.g);
  in.gates = inputs.gates;
  in.beta = tensor_as<T>(inputs.beta);
  in.gain = tensor_as<T>(inputs.gain);
  in.initial_state = tensor_as<T>(inputs.initial_state);
  if (inputs.scale) in.scale = scalar_traits<T>::from_double(*inputs.scale);
  return in;
}

/// The same problem over running_error<double>, every input exact (error 0): the running error's
/// runs here, and validate's backward check (gpu/tools/validate_delta_rule_backward.cpp).
inline fixed_gain_inputs<running_error<double>> lift_to_running_error(const fixed_gain_inputs<double>& inputs) {
  return fixed_gain_inputs_as<running_error<double>>(inputs);
}

/// The chunked WY form of `inputs` with chunks of `chunk_size` (the kernel's), in binary64, and per
/// element of o and final_state the budget of a kernel of that form whose matrix-product operands are
/// rounded to `format` (binary32 accumulation). Single-threaded inside each run (the operand format and the
/// norm-wise carry are per-thread scopes, set on each of the four threads that run the four runs).
inline fixed_gain_tensor_core_result fixed_gain_tensor_core_budget(const fixed_gain_inputs<double>& inputs,
                                                                   operand_format format,
                                                                   std::size_t chunk_size = default_wy_chunk_size) {
  const fixed_gain_inputs<running_error<double>> in = lift_to_running_error(inputs);
  run_options one_thread;
  one_thread.threads = 1;
  const auto run = [&](operand_format f, bool normwise) {
    tensor_core_scope operands(f);
    std::optional<normwise_chunk_bound_scope> carry;
    if (normwise) carry.emplace();
    return fixed_gain_chunked_forward(in, chunk_size, one_thread);
  };
  // The four runs on four threads (each sets its own scopes). The rounded runs round to `format` itself:
  // the line through them is the budget at that format's u_op (check/tensor_core_budget.hpp).
  auto rounded_run = std::async(std::launch::async, run, format, false);
  auto plain_normwise_run = std::async(std::launch::async, run, operand_format::none, true);
  auto rounded_normwise_run = std::async(std::launch::async, run, format, true);
  const auto plain = run(operand_format::none, false);
  const auto rounded = rounded_run.get(), plain_normwise = plain_normwise_run.get();
  const auto rounded_normwise = rounded_normwise_run.get();
  const double u_op = format == operand_format::none ? 0.0 : operand_unit_roundoff(format);
  const auto output = [&](const auto& pick, const std::string& name, tensor<double>& value, tensor<double>& budget) {
    const tensor<running_error<double>>& a = pick(plain);
    value = tensor<double>(name, a.shape());
    budget = tensor<double>(name + ".budget", a.shape());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double e_plain = a.data()[i].error(), e_normwise = pick(plain_normwise).data()[i].error();
      const tensor_core_terms terms = tensor_core_first_order_terms(
          e_plain, pick(rounded).data()[i].error(), e_normwise, pick(rounded_normwise).data()[i].error(), u_op);
      value.data()[i] = a.data()[i].value();
      budget.data()[i] = terms.budget(u_op) + 2 * 0x1p-53 * std::min(e_plain, e_normwise);
    }
  };
  fixed_gain_tensor_core_result r;
  output(
      [](const auto& x) -> const auto& { return x.o; }, "o", r.o, r.o_budget);
  output(
      [](const auto& x) -> const auto& { return x.final_state; }, "final_state", r.final_state, r.final_state_budget);
  return r;
}

}  // namespace kalman_oracle::check
