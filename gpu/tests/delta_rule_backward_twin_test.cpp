// The chunked delta-rule backward's twin against the reference adjoint (label `twin`; docs/kernels.md, "The
// chunked delta-rule memory (backward, binary32)"): grad/fixed_gain_chunked.hpp in binary64 with chunks of
// 64 (the twin's), and per element the fixtures' gradient budget (docs/error-model.md, "Gradients:
// first-order running error"): 2 u × the first-order running error bound of the reference's own adjoint (the
// same template run over running_error<double>), u = 2^-24, plus the binary64 reference's own (u = 2^-53).
// An estimate, as the fixtures' gradient budgets are. Every rule (GLA, DeltaNet, GDN, KDA, the two-key rule)
// with T at the 64-token chunk edges ± 1 and over several chunks, K and V of one and two tensor-core tiles,
// grouped value heads, a given and an absent initial state, absent cotangents, a strongly decaying chunk and
// bfloat16 inputs. A planted bug (the carry's cotangent of the write keys and decays dropped) must fail it
// (meta-test in gpu/CMakeLists.txt).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "delta_rule_backward_cases.hpp"
#include "gradient_budget.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_backward_twin.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/running_error.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

namespace {

/// x as a tensor<S> of `shape`; with group > 1 (q and k, given per key head) each value head reads its
/// key head.
template <class S>
tensor<S> as_tensor(const char* name, const std::vector<float>& x, shape_t shape, int group = 1) {
  tensor<S> out(name, shape);
  const std::size_t HV = shape[2], inner = shape.size() > 3 ? shape[3] : 1, rows = shape[0] * shape[1];
  for (std::size_t row = 0; row < rows; ++row)
    for (std::size_t h = 0; h < HV; ++h)
      for (std::size_t i = 0; i < inner; ++i)
        out.data()[(row * HV + h) * inner + i] =
            S(static_cast<double>(x[(row * (HV / group) + h / group) * inner + i]));
  return out;
}

template <class S>
gradients<S> reference_gradients(const backward_case& c, const drawn& x, float tau) {
  const std::size_t B = c.B, T = c.T, HV = c.H * c.group, K = c.K, V = c.V;
  fixed_gain_inputs<S> in;
  const std::string rule = c.rule;
  in.rule = rule == "gla"               ? fixed_gain_rule::gla
            : rule == "delta_net"       ? fixed_gain_rule::delta_net
            : rule == "gated_delta_net" ? fixed_gain_rule::gated_delta_net
                                        : fixed_gain_rule::kda;
  in.q = as_tensor<S>("q", x.q, {B, T, HV, K}, c.group);
  in.k = as_tensor<S>("k", x.k, {B, T, HV, K}, c.group);
  in.v = as_tensor<S>("v", x.v, {B, T, HV, V});
  if (has_beta(c)) in.beta = as_tensor<S>("beta", x.beta, {B, T, HV});
  if (two_key(c)) in.gain = as_tensor<S>("gain", x.kappa, {B, T, HV, K});
  if (has_gate(c)) in.g = gate_per_head(c) ? as_tensor<S>("g", x.g, {B, T, HV}) : as_tensor<S>("g", x.g, {B, T, HV, K});
  if (c.initial) in.initial_state = as_tensor<S>("initial_state", x.initial, {B, HV, K, V});
  in.scale = S(static_cast<double>(tau));
  cotangents<S> cot;
  if (!x.d_o.empty()) cot.set(as_tensor<S>("o", x.d_o, {B, T, HV, V}));
  if (!x.d_final.empty()) cot.set(as_tensor<S>("final_state", x.d_final, {B, HV, K, V}));
  return fixed_gain_chunked_backward(in, cot, delta_rule_backward_chunk_tokens);
}

}  // namespace

TEST_SUITE("twin") {
  // The decay prefixes' sums (models/delta_rule_backward.cuh): prefix_in_place reads its terms eight at a
  // time before adding them (so that a device thread waits on its adds only); each row must still be the
  // plain running sum, partial sums rounded in order, at every length a chunk allows, including the ones
  // that end inside a group of eight, and with a stride between the entries.
  TEST_CASE("twin: prefix_in_place is the running sum of its entries, in order, at every row length") {
    std::mt19937 gen(20261204);
    std::uniform_real_distribution<float> term(-1.0f, 1.0f);
    for (int ps : {1, 3})
      for (int t = 0; t < delta_rule_backward_chunk_tokens; ++t) {
        std::vector<float> row((t + 1) * ps, std::nanf("")), expected(t + 1);
        for (int s = 1; s <= t; ++s) row[s * ps] = std::ldexp(term(gen), static_cast<int>(gen() % 40) - 20);
        float sum = 0.0f;
        expected[0] = sum;
        for (int s = 1; s <= t; ++s) expected[s] = sum = add_rn(sum, row[s * ps]);
        prefix_in_place(row.data(), t, ps);
        for (int s = 0; s <= t; ++s) {
          INFO("row length " << t << ", stride " << ps << ", entry " << s);
          CHECK(std::bit_cast<std::uint32_t>(row[s * ps]) == std::bit_cast<std::uint32_t>(expected[s]));
        }
      }
  }

  TEST_CASE("twin: chunked delta-rule backward within the gradient budget of the reference adjoint") {
    unsigned seed = 31;
    double overall = 0;
    for (const backward_case& c : backward_cases) {
      const std::size_t B = c.B, T = c.T, H = c.H, K = c.K;
      CAPTURE(c.rule);
      CAPTURE(c.B);
      CAPTURE(c.T);
      CAPTURE(c.H);
      CAPTURE(c.group);
      CAPTURE(c.K);
      CAPTURE(c.V);
      CAPTURE(c.strong);
      CAPTURE(c.bf16);
      const drawn x = draw(c, seed++);
      const float tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
      backward_run r(c, x, tau);
      delta_rule_backward_twin(r.problem);
      if (T == 0) {  // no chunk: the initial state's cotangent is the final state's
        CHECK(r.d_initial == x.d_final);
        continue;
      }
      const gradients<double> ref = reference_gradients<double>(c, x, tau);
      const gradients<running_error<double>> err = reference_gradients<running_error<double>>(c, x, tau);
      worst_ratio worst;
      const auto compare = [&](const char* name, const std::vector<float>& twin, const char* ref_name) {
        REQUIRE_MESSAGE(ref.at(ref_name).size() == twin.size(), name);
        add_elements(worst, name, twin, ref.at(ref_name), err.at(ref_name));
      };
      // dq, dk: the reference's per value head, summed over a key head's group.
      const auto key_head_sum = [&](const char* ref_name, const std::vector<float>& twin, const char* name) {
        add_key_head_sums(worst, name, twin, ref.at(ref_name), err.at(ref_name), B * T, H, c.group, K);
      };
      key_head_sum("q", r.dq, "dq");
      key_head_sum("k", r.dk, "dk");
      compare("dv", r.dv, "v");
      if (has_beta(c)) compare("dbeta", r.dbeta, "beta");
      if (two_key(c)) compare("dkappa", r.dkappa, "gain");
      if (has_gate(c)) compare("dg", r.dg, "g");
      if (c.initial) compare("d_initial_state", r.d_initial, "initial_state");
      INFO(worst.where);
      CHECK(worst.ratio <= 1.0);
      overall = std::max(overall, worst.ratio);
    }
    MESSAGE("chunked delta-rule backward twin: worst share of the gradient budget " << overall);
  }
}
