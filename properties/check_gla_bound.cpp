// GLA's per-element a-posteriori bound (check/gla_bound.hpp; docs/error-model.md, "GLA:
// a-posteriori bound") holds: the reference's sequential form run in binary32 and in binary64 errs,
// element by element, at most the bound evaluated along the exact trajectory (u = 2^-24; times 2^-29
// for binary64), against results at 256 bits.
//
// Weak decays (g near 0) keep errors alive for many tokens, where a bound that forgets the history
// (the planted bug gla_bound_forgets_history) is wrong; strong ones test the contraction.
#include <cstdint>
#include <random>
#include <vector>

#include "bound_checks.hpp"
#include "kalman_oracle/check/gla_bound.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using namespace kalman_oracle::testing;

namespace {

struct float_problem {
  std::size_t T, K, V;
  std::vector<float> q, k, v, g, s0;
};

float_problem make_problem(std::size_t T, std::size_t K, std::size_t V, double gate_lo, bool with_state,
                           std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  float_problem p{T, K, V, {}, {}, {}, {}, {}};
  for (std::size_t n = 0; n < T * K; ++n) p.q.push_back(uniform_float(rng, -1, 1));
  for (std::size_t n = 0; n < T * K; ++n) p.k.push_back(uniform_float(rng, -1, 1));
  for (std::size_t n = 0; n < T * V; ++n) p.v.push_back(uniform_float(rng, -1, 1));
  for (std::size_t n = 0; n < T * K; ++n) p.g.push_back(uniform_float(rng, gate_lo, 0));
  if (with_state)
    for (std::size_t n = 0; n < K * V; ++n) p.s0.push_back(uniform_float(rng, -1, 1));
  return p;
}

template <class T>
fixed_gain_inputs<T> inputs_of(const float_problem& p) {
  const auto conv = [](const std::vector<float>& xs) { return floats_as<T>(xs); };
  fixed_gain_inputs<T> in;
  in.rule = fixed_gain_rule::gla;
  in.gates = gate_space::log;
  in.q = tensor<T>("q", {1, p.T, 1, p.K}, conv(p.q));
  in.k = tensor<T>("k", {1, p.T, 1, p.K}, conv(p.k));
  in.v = tensor<T>("v", {1, p.T, 1, p.V}, conv(p.v));
  in.g = tensor<T>("g", {1, p.T, 1, p.K}, conv(p.g));
  if (!p.s0.empty()) in.initial_state = tensor<T>("initial_state", {1, 1, p.K, p.V}, conv(p.s0));
  return in;
}

}  // namespace

TEST_SUITE("error_bound") {
  TEST_CASE("error_bound: binary32 and binary64 GLA within the per-element a-posteriori bound") {
    check_property("gla_bound_holds", [] {
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 400);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 9);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
      const double gate_lo = *rc::gen::element(-1e-4, -0.1, -1.0, -20.0);
      const bool with_state = *rc::gen::arbitrary<bool>();
      const float_problem p = make_problem(T, K, V, gate_lo, with_state, *rc::gen::arbitrary<std::uint64_t>());

      const auto single = fixed_gain_forward(inputs_of<float>(p));
      const auto dbl = fixed_gain_forward(inputs_of<double>(p));
      precision_scope scope(256);
      const auto in = inputs_of<mpfr_real>(p);
      const auto exact = fixed_gain_forward(in);
      const auto bound = check::gla_bound(in);
      RC_ASSERT(bound.hypothesis_failure.empty());
      assert_memory_outputs_within_bound(single, dbl, exact, bound);
    });
  }
}
