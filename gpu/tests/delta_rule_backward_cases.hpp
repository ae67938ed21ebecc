// The chunked delta-rule backward's test problems, shared by its twin test (against the reference
// adjoint) and its GPU test (kernel against twin): a case's shape and rule, values drawn from it, and
// the problem over them with its gradient buffers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/models/delta_rule_chunk.cuh"

namespace kalman_oracle::gpu::testing {

struct backward_case {
  const char* rule;  ///< gla, delta_net, gated_delta_net, kda, two_key
  int B, T, H, group, K, V;
  bool initial;    ///< an initial state given
  int cotangents;  ///< bit 0: d_o given; bit 1: d_final_state given
  bool strong;     ///< log gates in [-3, -1.5]: every full chunk decays below the factoring floor
  bool bf16;       ///< inputs stored as bfloat16 (the values drawn are rounded to it first)
};

inline bool has_beta(const backward_case& c) {
  return std::string(c.rule) != "gla" && std::string(c.rule) != "two_key";
}
inline bool has_gate(const backward_case& c) { return std::string(c.rule) != "delta_net"; }
inline bool gate_per_head(const backward_case& c) { return std::string(c.rule) == "gated_delta_net"; }
inline bool two_key(const backward_case& c) { return std::string(c.rule) == "two_key"; }

/// The case in words, for a failing check's message.
inline std::string describe(const backward_case& c) {
  return std::string(c.rule) + " B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
         " group=" + std::to_string(c.group) + " K=" + std::to_string(c.K) + " V=" + std::to_string(c.V) +
         (c.initial ? " initial" : "") + " cotangents=" + std::to_string(c.cotangents) + (c.strong ? " strong" : "") +
         (c.bf16 ? " bf16" : "");
}

/// The problem's values, float32 (bfloat16-representable when c.bf16): q, k [B, T, H, K]; v [B, T, HV, V];
/// β [B, T, HV]; κ [B, T, HV, K]; g [B, T, HV] or [B, T, HV, K]; S_0 [B, HV, K, V]; the cotangents.
struct drawn {
  std::vector<float> q, k, v, beta, kappa, g, initial, d_o, d_final;
};

inline drawn draw(const backward_case& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), strength(0.0f, 1.0f), gate(-1.0f, 0.0f),
      strong_gate(-3.0f, -1.5f);
  const std::size_t B = c.B, T = c.T, H = c.H, HV = c.H * c.group, K = c.K, V = c.V;
  const auto stored = [&](float x) { return c.bf16 ? round_to_bf16(x) : x; };
  drawn x;
  const auto fill = [&](std::vector<float>& v, std::size_t n, auto draw_one) {
    for (std::size_t i = 0; i < n; ++i) v.push_back(stored(draw_one()));
  };
  const float key_scale = 1.0f / std::sqrt(static_cast<float>(K));  // keys of norm about 1
  fill(x.q, B * T * H * K, [&] { return unit(rng); });
  fill(x.k, B * T * H * K, [&] { return key_scale * unit(rng); });
  fill(x.v, B * T * HV * V, [&] { return unit(rng); });
  if (has_beta(c)) fill(x.beta, B * T * HV, [&] { return strength(rng); });
  if (two_key(c)) fill(x.kappa, B * T * HV * K, [&] { return key_scale * unit(rng); });
  if (has_gate(c))
    fill(x.g, B * T * HV * (gate_per_head(c) ? 1 : K), [&] { return c.strong ? strong_gate(rng) : gate(rng); });
  if (c.initial) fill(x.initial, B * HV * K * V, [&] { return unit(rng); });
  if (c.cotangents & 1) fill(x.d_o, B * T * HV * V, [&] { return unit(rng); });
  if (c.cotangents & 2) fill(x.d_final, B * HV * K * V, [&] { return unit(rng); });
  return x;
}

/// The problems both tests run: every rule and gate, T = 0, 1, at the 64-token chunk edges ± 1 and over
/// several chunks, K and V of one and two tensor-core tiles, grouped value heads, absent cotangents and
/// initial states, strongly decaying chunks, bfloat16 inputs.
inline const std::vector<backward_case> backward_cases = {
    {"kda", 1, 0, 1, 1, 16, 16, true, 3, false, false},
    {"kda", 2, 1, 1, 1, 16, 16, true, 3, false, false},
    {"gated_delta_net", 1, 63, 1, 2, 32, 16, true, 3, false, false},
    {"delta_net", 2, 64, 2, 1, 16, 32, false, 1, false, false},
    {"gla", 1, 65, 1, 1, 16, 16, true, 3, false, false},
    {"kda", 1, 130, 1, 1, 32, 32, true, 3, false, false},
    {"two_key", 1, 129, 2, 1, 16, 16, true, 3, false, false},
    {"two_key", 1, 70, 1, 2, 16, 16, false, 2, false, false},
    {"gated_delta_net", 2, 100, 1, 1, 16, 16, true, 3, false, true},
    {"kda", 1, 140, 1, 1, 16, 16, true, 3, true, false},
    {"gated_delta_net", 1, 128, 1, 1, 16, 16, true, 3, true, false},
    {"gla", 1, 90, 1, 1, 16, 16, true, 3, true, false},
    {"delta_net", 1, 200, 1, 1, 16, 16, true, 3, false, false},
};

/// The backward problem of case c over the drawn values (stored as bfloat16 when c.bf16), its gradient
/// buffers poisoned with NaN.
struct backward_run {
  delta_rule_backward_problem problem;
  std::vector<std::vector<std::uint16_t>> halves;
  std::vector<float> dq, dk, dv, dbeta, dkappa, dg, d_initial;

  backward_run(const backward_case& c, const drawn& x, float tau) {
    const long long B = c.B, T = c.T, H = c.H, HV = c.H * c.group, K = c.K, V = c.V;
    halves.reserve(8);
    const auto view = [&](const std::vector<float>& data) -> const void* {
      if (!c.bf16) return data.data();
      std::vector<std::uint16_t> h(data.size());
      for (std::size_t i = 0; i < data.size(); ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, &data[i], 4);
        h[i] = static_cast<std::uint16_t>(bits >> 16);  // the values are bfloat16 numbers: exact
      }
      halves.push_back(std::move(h));
      return halves.back().data();
    };
    delta_rule_problem& p = problem.forward;
    p.rule = std::string(c.rule) == "gla" ? delta_rule_kind::gla
             : two_key(c)                 ? delta_rule_kind::two_key
                                          : delta_rule_kind::beta_form;
    p.gate = !has_gate(c)       ? delta_rule_gate::none
             : gate_per_head(c) ? delta_rule_gate::per_head
                                : delta_rule_gate::per_channel;
    p.batch = c.B, p.tokens = c.T, p.heads = static_cast<int>(HV), p.key_dim = c.K, p.value_dim = c.V;
    p.key_head_group = c.group;
    p.dtype = c.bf16 ? input_dtype::bf16 : input_dtype::f32;
    p.tau = tau;
    p.q = strided_view(view(x.q), T * H * K, H * K, K, 1);
    p.k = strided_view(view(x.k), T * H * K, H * K, K, 1);
    p.v = strided_view(view(x.v), T * HV * V, HV * V, V, 1);
    if (has_beta(c)) p.beta = strided_view(view(x.beta), T * HV, HV, 1);
    if (two_key(c)) p.kappa = strided_view(view(x.kappa), T * HV * K, HV * K, K, 1);
    if (has_gate(c))
      p.g =
          gate_per_head(c) ? strided_view(view(x.g), T * HV, HV, 1) : strided_view(view(x.g), T * HV * K, HV * K, K, 1);
    if (c.initial) p.initial_state = strided_view(view(x.initial), HV * K * V, K * V, V, 1);
    problem.d_o = x.d_o.empty() ? nullptr : x.d_o.data();
    problem.d_final_state = x.d_final.empty() ? nullptr : x.d_final.data();
    dq.assign(B * T * H * K, NAN), dk = dq, dv.assign(B * T * HV * V, NAN), dbeta.assign(B * T * HV, NAN);
    dkappa.assign(B * T * HV * K, NAN), dg.assign(B * T * HV * (gate_per_head(c) ? 1 : K), NAN);
    d_initial.assign(B * HV * K * V, NAN);
    problem.dq = dq.data(), problem.dk = dk.data(), problem.dv = dv.data(), problem.d_initial_state = d_initial.data();
    if (has_beta(c)) problem.dbeta = dbeta.data();
    if (two_key(c)) problem.dkappa = dkappa.data();
    if (has_gate(c)) problem.dg = dg.data();
  }
  backward_run(const backward_run&) = delete;
  backward_run& operator=(const backward_run&) = delete;
};

}  // namespace kalman_oracle::gpu::testing
