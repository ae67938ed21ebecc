// Variable-length batches for the chunked delta-rule tests, forward and backward (the twins' in CI, the
// kernels' on the GPU): random inputs of one batch row holding sequences of the given lengths (empty, one token, the chunk
// edges ± 1, several chunks), run in one call with cu_seqlens and sequence by sequence as problems of their
// own (the views advanced to the sequence's first token, its own initial state). The two must give the same
// bits: each sequence runs the same operations on the same operands either way (docs/kernels.md,
// "Variable-length batches").
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <utility>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"

namespace kalman_oracle::gpu::testing {

struct delta_rule_varlen_case {
  delta_rule_kind rule;
  delta_rule_gate gate;
  int H, group, K, V;
  std::vector<long long> lengths;
  bool initial;
};

/// The cases both tests run: every rule and gate, grouped value heads, K = V = 128 (the kernels compiled
/// for fla's size) and smaller sizes.
inline std::vector<delta_rule_varlen_case> delta_rule_varlen_cases() {
  return {
      {delta_rule_kind::beta_form, delta_rule_gate::none, 1, 1, 16, 16, {0, 1, 63, 64, 65, 0, 7}, true},
      {delta_rule_kind::beta_form, delta_rule_gate::per_head, 2, 2, 32, 16, {5, 0, 130, 1}, true},
      {delta_rule_kind::beta_form, delta_rule_gate::per_channel, 1, 1, 64, 128, {70, 64, 3}, false},
      {delta_rule_kind::gla, delta_rule_gate::per_channel, 1, 2, 16, 48, {129, 0, 0, 2}, true},
      {delta_rule_kind::two_key, delta_rule_gate::per_channel, 2, 1, 32, 32, {40, 90}, true},
      {delta_rule_kind::beta_form, delta_rule_gate::per_head, 1, 1, 128, 128, {65, 1, 127, 64}, true},
      {delta_rule_kind::beta_form, delta_rule_gate::none, 1, 2, 128, 128, {0}, true},
  };
}

/// A case's inputs (seeded) and cotangents: one row of T = Σ lengths tokens, initial states and final-state
/// cotangents [N, HV, K, V].
struct delta_rule_varlen_inputs {
  const delta_rule_varlen_case& c;
  long long N, H, HV, K, V, T;
  std::vector<long long> cu_seqlens{0};
  std::vector<float> q, k, v, beta, g, kappa, initial, d_o, d_final;

  delta_rule_varlen_inputs(const delta_rule_varlen_case& the_case, unsigned seed)
      : c(the_case), N(static_cast<long long>(c.lengths.size())), H(c.H), HV(c.H * c.group), K(c.K), V(c.V) {
    for (const long long length : c.lengths) cu_seqlens.push_back(cu_seqlens.back() + length);
    T = cu_seqlens.back();
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> unit(-1, 1), positive(0, 1), gate(-0.2f, 0);
    const auto size = [](long long n) { return static_cast<std::size_t>(n); };
    q.resize(size(T * H * K)), k.resize(q.size()), v.resize(size(T * HV * V)), beta.resize(size(T * HV));
    g.resize(size(T * HV * K)), kappa.resize(g.size()), initial.resize(size(N * HV * K * V));
    d_o.resize(v.size()), d_final.resize(initial.size());
    for (float& x : q) x = unit(rng);
    for (float& x : v) x = unit(rng);
    for (float& x : beta) x = positive(rng);
    for (float& x : g) x = gate(rng);
    for (float& x : kappa) x = unit(rng) / static_cast<float>(K);
    for (float& x : initial) x = unit(rng);
    for (float& x : d_o) x = unit(rng);
    for (float& x : d_final) x = unit(rng);
    for (std::size_t r = 0; r < k.size() / size(K); ++r) {  // unit keys
      float norm = 0;
      for (long long i = 0; i < K; ++i) k[r * K + i] = unit(rng), norm += k[r * K + i] * k[r * K + i];
      for (long long i = 0; i < K; ++i) k[r * K + i] /= std::sqrt(norm);
    }
  }

  /// The problem over the tokens from t0 (views advanced), initial states from sequence s; no cu_seqlens.
  delta_rule_problem problem_from(long long t0, long long s) const {
    delta_rule_problem p;
    p.rule = c.rule, p.gate = c.gate;
    p.batch = 1, p.heads = static_cast<int>(HV), p.key_dim = c.K, p.value_dim = c.V, p.key_head_group = c.group;
    p.tau = static_cast<float>(std::pow(static_cast<double>(c.K), -0.5));
    p.q = strided_view(q.data() + t0 * H * K, T * H * K, H * K, K, 1);
    p.k = strided_view(k.data() + t0 * H * K, T * H * K, H * K, K, 1);
    p.v = strided_view(v.data() + t0 * HV * V, T * HV * V, HV * V, V, 1);
    p.beta = strided_view(beta.data() + t0 * HV, T * HV, HV, 1);
    p.kappa = strided_view(kappa.data() + t0 * HV * K, T * HV * K, HV * K, K, 1);
    p.g = c.gate == delta_rule_gate::per_channel ? strided_view(g.data() + t0 * HV * K, T * HV * K, HV * K, K, 1)
                                                 : strided_view(g.data() + t0 * HV, T * HV, HV, 1);
    if (c.initial) p.initial_state = strided_view(initial.data() + s * HV * K * V, HV * K * V, K * V, V, 1);
    return p;
  }
  /// The whole batch: every sequence, cu_seqlens.
  delta_rule_problem whole() const {
    delta_rule_problem p = problem_from(0, 0);
    p.tokens = static_cast<int>(T);
    p.cu_seqlens = cu_seqlens.data(), p.sequences = static_cast<int>(N);
    return p;
  }
  /// Sequence n alone.
  delta_rule_problem sequence(long long n) const {
    delta_rule_problem p = problem_from(cu_seqlens[n], n);
    p.tokens = static_cast<int>(c.lengths[n]);
    return p;
  }
};

/// f(case, seed) for each case of delta_rule_varlen_cases(), seeds 1, 2, …, with the case's sizes and rule
/// captured for doctest's reports.
template <class F>
void for_each_delta_rule_varlen_case(F&& f) {
  unsigned seed = 1;
  for (const delta_rule_varlen_case& c : delta_rule_varlen_cases()) {
    CAPTURE(c.K);
    CAPTURE(c.V);
    CAPTURE(static_cast<int>(c.rule));
    f(c, seed++);
  }
}

struct delta_rule_varlen_outputs {
  std::vector<float> o, final_state;
};

/// The case's inputs (seeded), run by `run` (delta_rule_twin or delta_rule_host, host pointers) once with
/// cu_seqlens and once sequence by sequence: {whole, one by one}.
template <class Run>
std::pair<delta_rule_varlen_outputs, delta_rule_varlen_outputs> run_delta_rule_varlen_case(
    const delta_rule_varlen_case& c, unsigned seed, Run&& run) {
  const delta_rule_varlen_inputs x(c, seed);
  delta_rule_varlen_outputs whole{std::vector<float>(x.v.size()), std::vector<float>(x.initial.size())};
  delta_rule_varlen_outputs apart = whole;
  delta_rule_problem p = x.whole();
  p.o = whole.o.data(), p.final_state = whole.final_state.data();
  run(p);
  for (long long n = 0; n < x.N; ++n) {
    delta_rule_problem one = x.sequence(n);
    one.o = apart.o.data() + x.cu_seqlens[n] * x.HV * x.V;
    one.final_state = apart.final_state.data() + n * x.HV * x.K * x.V;
    run(one);
  }
  return {whole, apart};
}

/// Every gradient of the backward, laid out as delta_rule_backward_problem's (the ones the rule has;
/// the others empty).
struct delta_rule_varlen_gradients {
  std::vector<float> dq, dk, dv, dbeta, dkappa, dg, d_initial;
  bool operator==(const delta_rule_varlen_gradients&) const = default;
};

/// The backward of the case from its cotangents (d_o, d_final_state), run by `run`
/// (delta_rule_backward_twin or delta_rule_backward_host) once with cu_seqlens and once sequence by sequence:
/// {whole, one by one}.
template <class Run>
std::pair<delta_rule_varlen_gradients, delta_rule_varlen_gradients> run_delta_rule_backward_varlen_case(
    const delta_rule_varlen_case& c, unsigned seed, Run&& run) {
  const delta_rule_varlen_inputs x(c, seed);
  const auto count = [](long long n) { return static_cast<std::size_t>(n); };
  const long long G = c.gate == delta_rule_gate::per_channel ? x.K : 1;
  delta_rule_varlen_gradients whole;
  whole.dq.assign(count(x.T * x.H * x.K), 0.0f), whole.dk = whole.dq, whole.dv.assign(x.v.size(), 0.0f);
  if (c.rule == delta_rule_kind::beta_form) whole.dbeta.assign(count(x.T * x.HV), 0.0f);
  if (c.rule == delta_rule_kind::two_key) whole.dkappa.assign(count(x.T * x.HV * x.K), 0.0f);
  if (c.gate != delta_rule_gate::none) whole.dg.assign(count(x.T * x.HV * G), 0.0f);
  if (c.initial) whole.d_initial.assign(x.initial.size(), 0.0f);
  delta_rule_varlen_gradients apart = whole;
  // The gradients of the tokens from t0 and the states from s, in `out`.
  const auto bind = [&](delta_rule_backward_problem& bp, delta_rule_varlen_gradients& out, long long t0, long long s) {
    const auto at = [](std::vector<float>& v, long long offset) { return v.empty() ? nullptr : v.data() + offset; };
    bp.d_o = x.d_o.data() + t0 * x.HV * x.V, bp.d_final_state = x.d_final.data() + s * x.HV * x.K * x.V;
    bp.dq = at(out.dq, t0 * x.H * x.K), bp.dk = at(out.dk, t0 * x.H * x.K), bp.dv = at(out.dv, t0 * x.HV * x.V);
    bp.dbeta = at(out.dbeta, t0 * x.HV), bp.dkappa = at(out.dkappa, t0 * x.HV * x.K), bp.dg = at(out.dg, t0 * x.HV * G);
    bp.d_initial_state = at(out.d_initial, s * x.HV * x.K * x.V);
  };
  delta_rule_backward_problem bp;
  bp.forward = x.whole();
  bind(bp, whole, 0, 0);
  run(bp);
  for (long long n = 0; n < x.N; ++n) {
    delta_rule_backward_problem one;
    one.forward = x.sequence(n);
    bind(one, apart, x.cu_seqlens[n], n);
    run(one);
  }
  return {whole, apart};
}

}  // namespace kalman_oracle::gpu::testing
