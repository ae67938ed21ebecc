// validate's typical envelope (validate_typical_envelope.hpp; docs/kernels.md, "validate", "The typical
// envelope"). The members are the fixtures' typical ensemble for these outputs and gradients
// (fixtures/lib/typical.cpp, tensor_core_tier.cpp) less the stochastically rounded binary32 runs, which run
// over a class type tens of times slower than binary32 (docs/error-model.md, "Typical tier").
#include "validate_typical_envelope.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>

#include "kalman_oracle/check/fixed_gain_tensor_core_budget.hpp"
#include "kalman_oracle/check/typical_ensemble.hpp"
#include "kalman_oracle/grad/fixed_gain.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/fused_multiply_add.hpp"
#include "kalman_oracle/scalar/operand_rounding.hpp"

namespace kalman_oracle::gpu::tools {

namespace {

/// The chunk sizes of the chunked members: the fixtures' alternate forms (16, 64, 128:
/// fixtures/lib/cards/fixed_gain.cpp) and 32 and 256. More members than the fixtures' because validate
/// compares millions of elements a gradient where a fixture has thousands, and the envelope's weak point
/// is an element where every member happens to err little (docs/kernels.md, "The typical envelope": at
/// B = 2, T = 16384 the honest twin's dv came to 0.78 of the envelope with the fixtures' three sizes and
/// one floor).
constexpr std::size_t member_chunks[] = {16, 32, 64, 128, 256};

/// Per element the largest |member − reference| so far; a member's non-finite value where the reference is
/// finite makes the element's envelope infinite (it then says nothing there, as in the fixtures).
class largest_errors {
 public:
  explicit largest_errors(const std::map<std::string, std::vector<double>>& reference) : reference_(reference) {}

  template <class T>
  void absorb(const std::string& name, const tensor<T>& member) {
    const auto ref = reference_.find(name);
    if (ref == reference_.end() || ref->second.size() != member.size()) return;
    check::absorb_largest_errors(largest_[name], ref->second.data(), member.size(),
                                 [&](std::size_t i) { return scalar_traits<T>::to_double(member.data()[i]); });
  }
  template <class T>
  void absorb(const fixed_gain_outputs<T>& member) {
    absorb("o", member.o);
    absorb("final_state", member.final_state);
  }
  template <class T>
  void absorb(const gradients<T>& member) {
    for (const tensor<T>& g : member.items()) absorb(g.name(), g);
  }
  std::map<std::string, std::vector<double>> take() { return std::move(largest_); }

 private:
  const std::map<std::string, std::vector<double>>& reference_;
  std::map<std::string, std::vector<double>> largest_;
};

template <class T>
cotangents<T> cotangents_as(const cotangents<double>& cot) {
  cotangents<T> r;
  for (const tensor<double>& c : cot.items()) r.set(check::tensor_as<T>(c));
  return r;
}

/// `run(chunk)` for each member chunk size under each association of the decays (ρ_tj w_j per pair, and
/// fla's factored (Γ_t e_t)(Γ_j⁻¹ w_j)), in the caller's operand scope.
template <class Run>
void both_associations(Run&& run) {
  for (const bool factored : {false, true}) {
    std::optional<factored_decays_scope> association;
    if (factored) association.emplace();
    for (const std::size_t chunk : member_chunks) run(chunk);
  }
}

}  // namespace

ensemble_errors run_forward_ensemble(const fixed_gain_inputs<double>& problem, const tensor<double>& o,
                                     const tensor<double>& final_state) {
  const std::map<std::string, std::vector<double>> reference{{"o", o.data()}, {"final_state", final_state.data()}};
  const fixed_gain_inputs<float> in = check::fixed_gain_inputs_as<float>(problem);
  largest_errors binary32(reference), rounded(reference);
  binary32.absorb(fixed_gain_forward(in));
  binary32.absorb(fixed_gain_forward(check::fixed_gain_inputs_as<fused_binary32>(problem)));
  for (const std::size_t chunk : member_chunks) binary32.absorb(fixed_gain_chunked_forward(in, chunk));
  {
    const tensor_core_scope scope(operand_format::bf16);
    both_associations([&](std::size_t chunk) { rounded.absorb(fixed_gain_chunked_forward(in, chunk)); });
  }
  return {binary32.take(), rounded.take()};
}

ensemble_errors run_backward_ensemble(const fixed_gain_inputs<double>& problem, const cotangents<double>& cot,
                                      const gradients<running_error<double>>& reference,
                                      delta_rule_backward_operands operands) {
  std::map<std::string, std::vector<double>> values;
  for (const tensor<running_error<double>>& g : reference.items()) {
    std::vector<double>& v = values[g.name()];
    for (const running_error<double>& e : g.data()) v.push_back(e.value());
  }
  const fixed_gain_inputs<float> in = check::fixed_gain_inputs_as<float>(problem);
  const cotangents<float> cot32 = cotangents_as<float>(cot);
  largest_errors binary32(values), rounded(values);
  const bool tf32 = operands == delta_rule_backward_operands::tf32;
  if (!tf32) {
    binary32.absorb(fixed_gain_backward(in, cot32));
    binary32.absorb(
        fixed_gain_backward(check::fixed_gain_inputs_as<fused_binary32>(problem), cotangents_as<fused_binary32>(cot)));
  }
  for (const std::size_t chunk : member_chunks) binary32.absorb(fixed_gain_chunked_backward(in, cot32, chunk));
  if (tf32) {
    // 11-bit operands: TF32's significand with binary32's exponent range (the tf32-tc tier's model).
    const tensor_core_scope scope(operand_format::f16);
    both_associations([&](std::size_t chunk) { rounded.absorb(fixed_gain_chunked_backward(in, cot32, chunk)); });
    for (unsigned seed = 1; seed <= check::tensor_core_stochastic_members; ++seed) {
      const stochastic_operand_scope stochastic(seed);
      std::optional<factored_decays_scope> association;
      if (seed % 2 == 0) association.emplace();
      rounded.absorb(fixed_gain_chunked_backward(in, cot32, member_chunks[(seed - 1) % std::size(member_chunks)]));
    }
  }
  return {binary32.take(), rounded.take()};
}

namespace {

/// The median of the finite values (0 when there is none).
double finite_median(std::vector<double> values) {
  std::erase_if(values, [](double r) { return !std::isfinite(r); });
  if (values.empty()) return 0;
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

}  // namespace

typical_floor typical_floor_of(const std::vector<double>& largest, const std::vector<double>& budgets) {
  std::vector<double> ratios;
  ratios.reserve(largest.size());
  for (std::size_t i = 0; i < largest.size(); ++i)
    if (budgets[i] > 0) ratios.push_back(largest[i] / budgets[i]);
  return {finite_median(std::move(ratios)), finite_median(largest)};
}

double typical_envelope(double largest_error, double reference, double floor) {
  return check::typical_factor * std::max({largest_error, floor, 0x1p-24 * std::fabs(reference)});
}

}  // namespace kalman_oracle::gpu::tools
