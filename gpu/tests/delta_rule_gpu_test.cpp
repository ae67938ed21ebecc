// On the GPU (label `gpu`): the chunked delta-rule kernel on random problems (every rule and gate, strong
// decay among them, T at the chunk edges and 0, K and V from 16 to 128, grouped value heads, an initial
// state or none), with the outputs poisoned with NaN first: every output written and finite, the same
// bits when run again, and kernel and twin each within the bf16-tc budget of the binary64 chunked form
// run on the spot (check/fixed_gain_tensor_core_budget.hpp), so that they agree to the stated bound
// |kernel − twin| <= 2 · budget, element by element. (The tensor cores' order of accumulation is not
// the twin's: they part by roundings, not bit for bit; docs/kernels.md, "Chunked delta-rule memory".)
// Without a CUDA device: "SKIP: <why>".
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "delta_rule_varlen_cases.hpp"
#include "kalman_oracle/check/fixed_gain_tensor_core_budget.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_chunked_twin.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

namespace {

/// The test's float inputs: q, k [B, T, H, K] (H key heads); v [B, T, HV, V]; β [B, T, HV]; g [B, T, HV]
/// or [B, T, HV, K]; κ [B, T, HV, K]; the initial state [B, HV, K, V] (or none).
struct delta_rule_test_inputs {
  const std::vector<float>&q, &k, &v, &beta, &g, &kappa, &initial;
  bool has_initial;
};

/// Batch row b, value head h of the kernel's problem p as a one-row, one-head problem for the reference.
kalman_oracle::fixed_gain_inputs<double> head_problem(const delta_rule_problem& p, const delta_rule_test_inputs& x,
                                                      long long b, long long h) {
  using kalman_oracle::tensor;
  const std::size_t T = p.tokens, HV = p.heads, K = p.key_dim, V = p.value_dim, H = HV / p.key_head_group;
  const std::size_t key_head = static_cast<std::size_t>(h) / p.key_head_group;
  const std::size_t G = p.gate == delta_rule_gate::per_channel ? K : 1;
  kalman_oracle::fixed_gain_inputs<double> in;
  in.rule = p.rule == delta_rule_kind::gla        ? kalman_oracle::fixed_gain_rule::gla
            : p.gate == delta_rule_gate::none     ? kalman_oracle::fixed_gain_rule::delta_net
            : p.gate == delta_rule_gate::per_head ? kalman_oracle::fixed_gain_rule::gated_delta_net
                                                  : kalman_oracle::fixed_gain_rule::kda;
  in.q = tensor<double>("q", {1, T, 1, K});
  in.k = tensor<double>("k", {1, T, 1, K});
  in.v = tensor<double>("v", {1, T, 1, V});
  if (p.rule == delta_rule_kind::beta_form) in.beta = tensor<double>("beta", {1, T, 1});
  if (p.rule == delta_rule_kind::two_key) in.gain = tensor<double>("kappa", {1, T, 1, K});
  if (p.gate != delta_rule_gate::none)
    in.g = G == 1 ? tensor<double>("g", {1, T, 1}) : tensor<double>("g", {1, T, 1, K});
  if (x.has_initial) in.initial_state = tensor<double>("initial_state", {1, 1, K, V});
  in.scale = static_cast<double>(p.tau);
  for (std::size_t t = 0; t < T; ++t) {
    const std::size_t key_row = (static_cast<std::size_t>(b) * T + t) * H + key_head;
    const std::size_t row = (static_cast<std::size_t>(b) * T + t) * HV + static_cast<std::size_t>(h);
    for (std::size_t i = 0; i < K; ++i) {
      in.q.data()[t * K + i] = x.q[key_row * K + i];
      in.k.data()[t * K + i] = x.k[key_row * K + i];
      if (in.gain) in.gain->data()[t * K + i] = x.kappa[row * K + i];
    }
    for (std::size_t j = 0; j < V; ++j) in.v.data()[t * V + j] = x.v[row * V + j];
    if (in.beta) in.beta->data()[t] = x.beta[row];
    if (in.g)
      for (std::size_t i = 0; i < G; ++i) in.g->data()[t * G + i] = G == 1 ? x.g[row] : x.g[row * K + i];
  }
  if (in.initial_state)
    for (std::size_t e = 0; e < K * V; ++e)
      in.initial_state->data()[e] = x.initial[(static_cast<std::size_t>(b) * HV + h) * K * V + e];
  return in;
}

}  // namespace

TEST_CASE("gpu: the chunked delta-rule kernel writes every output, the same bits run after run") {
  if (skip_without_device()) return;
  struct shape {
    delta_rule_kind rule;
    delta_rule_gate gate;
    int B, T, H, group, K, V;
    bool initial;
    float gate_scale = 1;  // the log gates, drawn in [−0.2, 0], times this
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
      // K = V = 128, the kernels compiled apart for fla's production size, for each rule and gate.
      {delta_rule_kind::gla, delta_rule_gate::per_channel, 1, 130, 1, 1, 128, 128, true},
      {delta_rule_kind::beta_form, delta_rule_gate::per_channel, 1, 257, 2, 1, 128, 128, true},
      {delta_rule_kind::beta_form, delta_rule_gate::none, 1, 127, 1, 2, 128, 128, true},
      {delta_rule_kind::two_key, delta_rule_gate::per_channel, 1, 96, 1, 1, 128, 128, true},
      // Strong decay (models/delta_rule_chunk.cuh, delta_rule_factored_log_decay_floor): gates up to −4 a
      // token put the full chunks past e^{−64} and leave the short last chunk factored; up to −120, every
      // chunk past binary32's e^{−G}.
      {delta_rule_kind::beta_form, delta_rule_gate::per_channel, 1, 130, 2, 1, 128, 128, true, 20},
      {delta_rule_kind::beta_form, delta_rule_gate::per_head, 2, 97, 1, 1, 64, 64, true, 600},
      {delta_rule_kind::gla, delta_rule_gate::per_channel, 1, 70, 1, 2, 32, 32, true, 20},
      {delta_rule_kind::two_key, delta_rule_gate::per_channel, 1, 100, 1, 1, 128, 128, true, 600},
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
    for (float& x : g) x = s.gate_scale * gate(rng);
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
        // Kernel and twin each within the budget of the binary64 run; so within 2 · budget of each other.
        const delta_rule_test_inputs x{q, k, v, beta, g, kappa, initial, s.initial};
        double worst_share = 0, apart = 0, largest = 0;
        if (s.T == 0)  // no token: the final state is the initial one, exactly (the reference wants T >= 1)
          for (std::size_t e = 0; e < state.size(); ++e) CHECK(state[e] == (s.initial ? initial[e] : 0.0f));
        for (long long b = 0; b < (s.T == 0 ? 0 : s.B); ++b)
          for (long long h = 0; h < HV; ++h) {
            const auto r = kalman_oracle::check::fixed_gain_tensor_core_budget(
                head_problem(p, x, b, h), kalman_oracle::operand_format::bf16, delta_rule_chunk_tokens);
            const auto compare = [&](const std::vector<float>& kernel, const std::vector<float>& twin,
                                     const kalman_oracle::tensor<double>& exact,
                                     const kalman_oracle::tensor<double>& budget, auto index) {
              for (std::size_t e = 0; e < exact.size(); ++e) {
                const std::size_t at = index(e);
                const double bound = budget.data()[e], ref = exact.data()[e];
                CAPTURE(e);
                CAPTURE(bound);
                CHECK(std::fabs(kernel[at] - ref) <= bound);
                CHECK(std::fabs(twin[at] - ref) <= bound);
                CHECK(std::fabs(static_cast<double>(kernel[at]) - twin[at]) <= 2 * bound);
                apart = std::fmax(apart, std::fabs(static_cast<double>(kernel[at]) - twin[at]));
                largest = std::fmax(largest, std::fabs(ref));
                if (bound > 0) worst_share = std::fmax(worst_share, std::fabs(kernel[at] - ref) / bound);
              }
            };
            compare(o, twin_o, r.o, r.o_budget, [&](std::size_t e) {
              return static_cast<std::size_t>(((b * T + static_cast<long long>(e) / V) * HV + h) * V +
                                              static_cast<long long>(e) % V);
            });
            compare(state, twin_state, r.final_state, r.final_state_budget,
                    [&](std::size_t e) { return static_cast<std::size_t>((b * HV + h) * K * V) + e; });
          }
        std::printf(
            "delta_rule rule=%d gate=%d (x%g) T=%d K=%d V=%d: kernel - twin at most %.3g (largest |reference| "
            "%.3g); the kernel's error at most %.3g of its bf16-tc budget\n",
            static_cast<int>(s.rule), static_cast<int>(s.gate), static_cast<double>(s.gate_scale), s.T, s.K, s.V, apart,
            largest, worst_share);
      } else {
        CHECK(o == first_o);
        CHECK(state == first_state);
      }
    }
  }
}

TEST_CASE("gpu: a varlen batch (cu_seqlens) in one call gives its sequences' bits run one by one") {
  if (skip_without_device()) return;
  for_each_delta_rule_varlen_case([](const delta_rule_varlen_case& c, unsigned seed) {
    const auto [whole, apart] =
        run_delta_rule_varlen_case(c, seed, [](const delta_rule_problem& p) { delta_rule_host(p); });
    for (const float x : whole.o) REQUIRE(std::isfinite(x));
    for (const float x : whole.final_state) REQUIRE(std::isfinite(x));
    CHECK(whole.o == apart.o);
    CHECK(whole.final_state == apart.final_state);
  });
  std::printf("delta_rule varlen: %zu cases, one call = sequence by sequence, bit for bit\n",
              delta_rule_varlen_cases().size());
}
