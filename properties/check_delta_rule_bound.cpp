// The delta rules' per-element a-posteriori bound (check/delta_rule_bound.hpp; docs/error-model.md,
// "Delta rules: a-posteriori bound") holds: the reference's sequential form run in binary32 and in
// binary64 errs, element by element, at most the bound evaluated along the exact trajectory (u =
// 2^-24; times 2^-29 for binary64), the exact result computed at 256 bits (its own error, about
// 2^-240 relative to the state's size, is far below a bound of at least u_64 times it).
//
// Random DeltaNet / GDN / KDA problems under the bound's hypotheses (‖k‖ <= 1, β ∈ [0, 2], g <= 0),
// with weak writes and weak decays drawn often, so that errors persist for many tokens: that is
// where a bound that forgets the history (the planted bug delta_bound_forgets_history) is wrong.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bound_checks.hpp"
#include "kalman_oracle/check/delta_rule_bound.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using namespace kalman_oracle::testing;

namespace {

/// Inputs as binary32 values (so the binary32 run reads them exactly), drawn from a seed.
struct float_problem {
  fixed_gain_rule rule;
  std::size_t T, K, V;
  std::vector<float> q, k, v, g, beta, s0;
};

float_problem make_problem(fixed_gain_rule rule, std::size_t T, std::size_t K, std::size_t V, double beta_hi,
                           double gate_lo, bool with_state, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  float_problem p{rule, T, K, V, {}, {}, {}, {}, {}, {}};
  for (std::size_t n = 0; n < T * K; ++n) p.q.push_back(uniform_float(rng, -1, 1));
  for (std::size_t t = 0; t < T; ++t)  // unit keys (delta rules: shrunk so that ‖k‖₂ <= 1 holds exactly)
    for (float x : float_key(rng, K, 1 - 0x1p-20)) p.k.push_back(x);
  for (std::size_t n = 0; n < T * V; ++n) p.v.push_back(uniform_float(rng, -1, 1));
  if (rule != fixed_gain_rule::delta_net)
    for (std::size_t n = 0; n < (rule == fixed_gain_rule::gated_delta_net ? T : T * K); ++n)
      p.g.push_back(uniform_float(rng, gate_lo, 0));
  for (std::size_t t = 0; t < T; ++t) p.beta.push_back(uniform_float(rng, 0, beta_hi));
  if (with_state)
    for (std::size_t n = 0; n < K * V; ++n) p.s0.push_back(uniform_float(rng, -1, 1));
  return p;
}

template <class T>
fixed_gain_inputs<T> inputs_of(const float_problem& p) {
  const auto conv = [](const std::vector<float>& xs) { return floats_as<T>(xs); };
  fixed_gain_inputs<T> in;
  in.rule = p.rule;
  in.gates = gate_space::log;
  in.q = tensor<T>("q", {1, p.T, 1, p.K}, conv(p.q));
  in.k = tensor<T>("k", {1, p.T, 1, p.K}, conv(p.k));
  in.v = tensor<T>("v", {1, p.T, 1, p.V}, conv(p.v));
  if (!p.g.empty())
    in.g = tensor<T>("g", p.rule == fixed_gain_rule::gated_delta_net ? shape_t{1, p.T, 1} : shape_t{1, p.T, 1, p.K},
                     conv(p.g));
  in.beta = tensor<T>("beta", {1, p.T, 1}, conv(p.beta));
  if (!p.s0.empty()) in.initial_state = tensor<T>("initial_state", {1, 1, p.K, p.V}, conv(p.s0));
  return in;
}

}  // namespace

TEST_SUITE("error_bound") {
  TEST_CASE("error_bound: binary32 and binary64 delta rules within the per-element a-posteriori bound") {
    check_property("delta_rule_bound_holds", [] {
      const auto rule =
          *rc::gen::element(fixed_gain_rule::delta_net, fixed_gain_rule::gated_delta_net, fixed_gain_rule::kda);
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 400);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 9);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
      // Weak writes and decays keep errors alive for many tokens; strong ones test the contraction.
      const double beta_hi = *rc::gen::element(0.02, 1.0, 2.0);
      const double gate_lo = *rc::gen::element(-1e-3, -1.0);
      const bool with_state = *rc::gen::arbitrary<bool>();
      const auto seed = *rc::gen::arbitrary<std::uint64_t>();
      const float_problem p = make_problem(rule, T, K, V, beta_hi, gate_lo, with_state, seed);

      const auto single = fixed_gain_forward(inputs_of<float>(p));
      const auto dbl = fixed_gain_forward(inputs_of<double>(p));
      precision_scope scope(256);
      const auto in = inputs_of<mpfr_real>(p);
      const auto exact = fixed_gain_forward(in);
      const auto bound = check::delta_rule_bound(in);
      RC_ASSERT(bound.hypothesis_failure.empty());
      assert_memory_outputs_within_bound(single, dbl, exact, bound);
    });
  }
}
