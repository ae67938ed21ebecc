// On the GPU (label `gpu`): the chunked delta-rule kernel on random problems (every rule and gate, T at
// the chunk edges and 0, K and V from 16 to 128, grouped value heads, an initial state or none), with the
// outputs poisoned with NaN first: every output written and finite, the same bits when run again, and
// its distance to the CPU twin printed (the tensor cores' order of accumulation is not the twin's, so
// they part by roundings: both are checked against the fixtures' bf16-tc budgets through `conform`,
// gpu.delta_rule.* and twin.delta_rule.*). Without a CUDA device: "SKIP: <why>".
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_chunked_twin.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

TEST_CASE("gpu: the chunked delta-rule kernel writes every output, the same bits run after run") {
  if (skip_without_device()) return;
  struct shape {
    delta_rule_kind rule;
    delta_rule_gate gate;
    int B, T, H, group, K, V;
    bool initial;
  };
  const shape shapes[] = {
      {delta_rule_kind::beta_form, delta_rule_gate::none, 1, 1, 1, 1, 16, 16, false},
      {delta_rule_kind::beta_form, delta_rule_gate::none, 2, 63, 2, 1, 64, 64, true},
      {delta_rule_kind::beta_form, delta_rule_gate::per_head, 1, 64, 2, 2, 32, 16, true},
      {delta_rule_kind::beta_form, delta_rule_gate::per_head, 2, 65, 1, 1, 128, 128, false},
      {delta_rule_kind::beta_form, delta_rule_gate::per_channel, 1, 200, 2, 1, 64, 128, true},
      {delta_rule_kind::gla, delta_rule_gate::per_channel, 2, 129, 1, 2, 16, 48, true},
      {delta_rule_kind::two_key, delta_rule_gate::per_channel, 1, 130, 2, 1, 64, 64, true},
      {delta_rule_kind::beta_form, delta_rule_gate::per_head, 1, 0, 2, 1, 32, 32, true},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1, 1), positive(0, 1), gate(-0.2f, 0);
  for (const shape& s : shapes) {
    CAPTURE(s.T);
    CAPTURE(s.K);
    CAPTURE(s.V);
    const int HV = s.H * s.group;
    std::vector<float> q(s.B * s.T * s.H * s.K), k(q.size()), v(s.B * s.T * HV * s.V), beta(s.B * s.T * HV),
        g(s.B * s.T * HV * s.K), initial(s.B * HV * s.K * s.V), kappa(s.B * s.T * HV * s.K);
    for (float& x : q) x = unit(rng);
    for (float& x : v) x = unit(rng);
    for (float& x : beta) x = positive(rng);
    for (float& x : g) x = gate(rng);
    for (float& x : initial) x = unit(rng);
    for (float& x : kappa) x = unit(rng) / static_cast<float>(s.K);  // |κ_t k_tᵀ| below 1
    for (std::size_t r = 0; r < k.size() / s.K; ++r) {               // unit keys
      float norm = 0;
      for (int i = 0; i < s.K; ++i) k[r * s.K + i] = unit(rng), norm += k[r * s.K + i] * k[r * s.K + i];
      for (int i = 0; i < s.K; ++i) k[r * s.K + i] /= std::sqrt(norm);
    }
    delta_rule_problem p;
    p.rule = s.rule;
    p.gate = s.gate;
    p.batch = s.B, p.tokens = s.T, p.heads = HV, p.key_dim = s.K, p.value_dim = s.V, p.key_head_group = s.group;
    p.tau = static_cast<float>(std::pow(static_cast<double>(s.K), -0.5));
    const long long T = s.T, H = s.H, K = s.K, V = s.V, hv = HV;
    p.q = strided_view(q.data(), T * H * K, H * K, K, 1);
    p.k = strided_view(k.data(), T * H * K, H * K, K, 1);
    p.v = strided_view(v.data(), T * hv * V, hv * V, V, 1);
    p.beta = strided_view(beta.data(), T * hv, hv, 1);
    p.kappa = strided_view(kappa.data(), T * hv * K, hv * K, K, 1);
    p.g = s.gate == delta_rule_gate::per_channel ? strided_view(g.data(), T * hv * K, hv * K, K, 1)
                                                 : strided_view(g.data(), T * hv, hv, 1);
    if (s.initial) p.initial_state = strided_view(initial.data(), hv * K * V, K * V, V, 1);
    std::vector<float> twin_o(v.size()), twin_state(initial.size());
    p.o = twin_o.data(), p.final_state = twin_state.data();
    delta_rule_twin(p);
    std::vector<float> first_o, first_state;
    for (int run = 0; run < 2; ++run) {
      std::vector<float> o(v.size()), state(initial.size());
      p.o = o.data(), p.final_state = state.data();
      delta_rule_host(p);
      for (const float x : o) REQUIRE(std::isfinite(x));
      for (const float x : state) REQUIRE(std::isfinite(x));
      if (run == 0) {
        first_o = o, first_state = state;
        double largest = 0, apart = 0, largest_state = 0, apart_state = 0;
        for (std::size_t x = 0; x < o.size(); ++x)
          largest = std::fmax(largest, std::fabs(twin_o[x])), apart = std::fmax(apart, std::fabs(o[x] - twin_o[x]));
        for (std::size_t x = 0; x < state.size(); ++x)
          largest_state = std::fmax(largest_state, std::fabs(twin_state[x])),
          apart_state = std::fmax(apart_state, std::fabs(state[x] - twin_state[x]));
        std::printf(
            "delta_rule rule=%d gate=%d T=%d K=%d V=%d: kernel - twin, largest |o| difference %.3g of the largest |o| "
            "%.3g; final state %.3g of %.3g\n",
            static_cast<int>(s.rule), static_cast<int>(s.gate), s.T, s.K, s.V, apart, largest, apart_state,
            largest_state);
      } else {
        CHECK(o == first_o);
        CHECK(state == first_state);
      }
    }
  }
}
