// The CPU twin of the chunked delta-rule kernel (gpu/src/delta_rule_chunked.cu; docs/kernels.md,
// "Chunked delta-rule memory"): the kernel's blocking and rounding points, chunk by chunk of
// delta_rule_chunk_tokens tokens, per (sequence, value head), from the chunk-start state S (K x V):
//   gates   G_t = G_{t−1} + g_t (binary32, from 0 at the chunk start), Γ_t = e^{G_t}, Γ⁻¹_t = e^{−G_t}
//   A       A_tm = β_t · Σ_i bf(Γ_ti k_ti) bf(Γ⁻¹_mi w_mi)                  (m < t; 0 for GLA)
//   𝒯       forward substitution in binary32: 𝒯_jj = 1, 𝒯_tj = −Σ_{m=j}^{t−1} A_tm 𝒯_mj (fma, m rising)
//   Ũ       U = bf(𝒯) bf(β v), W = bf(𝒯) bf(β Γ k), Ũ = U − bf(W) bf(S)         (GLA: Ũ = bf(v))
//   o       o_t = Σ_i bf(Γ_ti τq_ti) bf(S_i) + Σ_{m<=t} bf(Σ_i bf(Γ_ti τq_ti) bf(Γ⁻¹_mi w_mi)) bf(Ũ_m)
//   carry   S' = Γ_last ⊙ S + Σ_m bf(w_m ⊙ Γ_last Γ⁻¹_m) bf(Ũ_m)ᵀ
// with the write key w = κ for the two-key rule (β = 1 there), w = k otherwise. A chunk in which some
// channel's G_{n−1} is below delta_rule_factored_log_decay_floor (strong decay: e^{−G} would overflow)
// forms no Γ⁻¹; per pair m <= t, ρ_tmi = e^{G_ti − G_mi} and z_tmi = bf(ρ_tmi w_mi), and
//   A_tm = β_t · Σ_i bf(k_ti) z_tmi,   P_tm = bf(Σ_i bf(τq_ti) z_tmi),   carry keys bf(e^{G_last − G_m} w_m)
// (the reference's association for such chunks; the kernel computes these per pair, off the tensor cores)
// (bf: round_to_bf16, a tensor-core operand; every sum of products in binary32 from +0 in index
// order, each product exact). That is the reference's chunked WY form (models/fixed_gain_chunked.hpp)
// with A and the scores factored as fla factors them, (Γ k)(Γ⁻¹ k)ᵀ, which the tier's first-order
// bound covers (docs/kernels.md). The tensor cores sum in an unspecified order: the kernel agrees with
// the twin to a bound, not bit for bit.
#pragma once

#include <cmath>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/delta_rule_sequences.hpp"
#include "kalman_oracle/gpu/models/delta_rule_chunk.cuh"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"

namespace kalman_oracle::gpu {

static_assert(double(delta_rule_factored_log_decay_floor) == factored_log_decay_floor,
              "the kernel factors its decays exactly where the reference's chunked form does");

namespace detail {

/// The inputs of one (sequence, value head): token t is the sequence's, in batch row b from token t0;
/// the initial state is the sequence's (index s).
template <class In>
struct delta_rule_reader {
  const delta_rule_problem& p;
  long long b, t0, s, h;

  float k(long long t, long long i) const {
    return load_widened<In>(p.k, offset_of(p.k, b, t0 + t, h / p.key_head_group, i));
  }
  float q(long long t, long long i) const {
    return load_widened<In>(p.q, offset_of(p.q, b, t0 + t, h / p.key_head_group, i));
  }
  float v(long long t, long long j) const { return load_widened<In>(p.v, offset_of(p.v, b, t0 + t, h, j)); }
  /// The write key: κ_t for the two-key rule, else k_t.
  float w(long long t, long long i) const {
    return p.rule == delta_rule_kind::two_key ? load_widened<In>(p.kappa, offset_of(p.kappa, b, t0 + t, h, i))
                                              : k(t, i);
  }
  float beta(long long t) const {
    return p.rule == delta_rule_kind::beta_form ? load_widened<In>(p.beta, offset_of(p.beta, b, t0 + t, h)) : 1.0f;
  }
  float g(long long t, long long i) const {
    switch (p.gate) {
      case delta_rule_gate::none: return 0.0f;
      case delta_rule_gate::per_head: return load_widened<In>(p.g, offset_of(p.g, b, t0 + t, h));
      case delta_rule_gate::per_channel: return load_widened<In>(p.g, offset_of(p.g, b, t0 + t, h, i));
    }
    return 0.0f;
  }
  float initial(long long i, long long j) const {
    return p.initial_state.data ? load_widened<In>(p.initial_state, offset_of(p.initial_state, s, h, i, j)) : 0.0f;
  }
};

/// One (sequence, head): every chunk in order (see the top of the file).
template <class In>
void delta_rule_head_twin(const delta_rule_problem& p, const delta_rule_sequence& sequence, long long h) {
  const long long b = sequence.batch_row, t0 = sequence.first_token, T = sequence.tokens;
  const delta_rule_reader<In> in{p, b, t0, sequence.state, h};
  const int K = p.key_dim, V = p.value_dim, C = delta_rule_chunk_tokens;
  const bool erases = p.rule != delta_rule_kind::gla;
  std::vector<float> S(static_cast<std::size_t>(K) * V);
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < V; ++j) S[i * V + j] = in.initial(i, j);
  const auto at = [](std::vector<float>& m, int cols, int r, int c) -> float& { return m[r * cols + c]; };

  for (int c0 = 0; c0 < T; c0 += C) {
    const int n = T - c0 < C ? static_cast<int>(T - c0) : C;
    // Gates, keys and queries of the chunk; the operands of A, the scores, X and the carry.
    std::vector<float> G(static_cast<std::size_t>(n) * K), beta(n), kg(G.size()), kn(G.size()), qg(G.size()),
        kl(G.size()), X(G.size());
    std::vector<float> sum(K, 0.0f);
    for (int t = 0; t < n; ++t) {
      beta[t] = in.beta(c0 + t);
      for (int i = 0; i < K; ++i) sum[i] = add_rn(sum[i], in.g(c0 + t, i)), at(G, K, t, i) = sum[i];
    }
    bool factored = true;  // every channel's decay over the chunk within e^{floor} (see the top)
    for (int i = 0; i < K; ++i) factored = factored && at(G, K, n - 1, i) >= delta_rule_factored_log_decay_floor;
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < K; ++i) {
        const float gamma = exp_f32(at(G, K, t, i)), inverse = factored ? exp_f32(-at(G, K, t, i)) : 0.0f;
        const float last = exp_f32(at(G, K, n - 1, i));
        const float key = in.k(c0 + t, i), write = in.w(c0 + t, i), gk = mul_rn(gamma, key);
        at(kg, K, t, i) = round_to_bf16(gk);
        at(kn, K, t, i) = round_to_bf16(mul_rn(inverse, write));
        at(qg, K, t, i) = round_to_bf16(mul_rn(gamma, mul_rn(p.tau, in.q(c0 + t, i))));
        at(kl, K, t, i) = round_to_bf16(factored ? mul_rn(mul_rn(last, inverse), write)
                                                 : mul_rn(exp_f32(add_rn(at(G, K, n - 1, i), -at(G, K, t, i))), write));
        at(X, K, t, i) = round_to_bf16(mul_rn(beta[t], gk));
      }
    // A strongly decaying chunk's pair terms (m <= t): A_tm's sum (before β_t) and P_tm's, unrounded.
    std::vector<float> pair_A, pair_P;
    if (!factored) {
      pair_A.assign(static_cast<std::size_t>(n) * n, 0.0f), pair_P.assign(pair_A.size(), 0.0f);
      // (Planted bug gpu_delta_rule_strong_decay_reads_before_write: the pair m = t left out, so a
      // token's read misses its own write, the only term that survives strong decay.)
      const int own = KALMAN_ORACLE_MUTANT(gpu_delta_rule_strong_decay_reads_before_write, 0, 1);
      for (int t = 0; t < n; ++t)
        for (int m = 0; m <= t - own; ++m) {
          float a = 0.0f, s = 0.0f;
          for (int i = 0; i < K; ++i) {
            const float z = round_to_bf16(mul_rn(exp_f32(add_rn(at(G, K, t, i), -at(G, K, m, i))), in.w(c0 + m, i)));
            a = fma_rn(round_to_bf16(in.k(c0 + t, i)), z, a);
            s = fma_rn(round_to_bf16(mul_rn(p.tau, in.q(c0 + t, i))), z, s);
          }
          at(pair_A, n, t, m) = a, at(pair_P, n, t, m) = s;
        }
    }

    // Ũ (n x V): the pseudo-values.
    std::vector<float> U(static_cast<std::size_t>(n) * V), Sb(S.size());
    for (std::size_t x = 0; x < S.size(); ++x) Sb[x] = round_to_bf16(S[x]);
    if (!erases) {
      for (int t = 0; t < n; ++t)
        for (int j = 0; j < V; ++j) at(U, V, t, j) = round_to_bf16(in.v(c0 + t, j));
    } else {
      std::vector<float> A(static_cast<std::size_t>(n) * n, 0.0f), Tm(A.size(), 0.0f);
      for (int t = 0; t < n; ++t)
        for (int m = 0; m < t; ++m) {
          float dot = 0.0f;
          if (factored)
            for (int i = 0; i < K; ++i) dot = fma_rn(at(kg, K, t, i), at(kn, K, m, i), dot);
          else
            dot = at(pair_A, n, t, m);
          at(A, n, t, m) = mul_rn(beta[t], dot);
        }
      for (int j = 0; j < n; ++j) {
        at(Tm, n, j, j) = 1.0f;
        for (int t = j + 1; t < n; ++t) {
          float s = 0.0f;
          for (int m = j; m < t; ++m) s = fma_rn(at(A, n, t, m), at(Tm, n, m, j), s);
          at(Tm, n, t, j) = -s;
        }
      }
      for (float& x : Tm) x = round_to_bf16(x);
      std::vector<float> W(static_cast<std::size_t>(n) * K);
      for (int t = 0; t < n; ++t) {
        for (int i = 0; i < K; ++i) {
          float w = 0.0f;
          for (int m = 0; m <= t; ++m) w = fma_rn(at(Tm, n, t, m), at(X, K, m, i), w);
          at(W, K, t, i) = round_to_bf16(w);
        }
        for (int j = 0; j < V; ++j) {
          float u = 0.0f, ws = 0.0f;
          for (int m = 0; m <= t; ++m) u = fma_rn(at(Tm, n, t, m), round_to_bf16(mul_rn(beta[m], in.v(c0 + m, j))), u);
          for (int i = 0; i < K; ++i) ws = fma_rn(at(W, K, t, i), Sb[i * V + j], ws);
          at(U, V, t, j) = round_to_bf16(add_rn(u, -ws));
        }
      }
    }

    // o: the inter-chunk read and the intra-chunk scores, one binary32 sum per element.
    for (int t = 0; t < n; ++t) {
      std::vector<float> P(n, 0.0f);
      for (int m = 0; m <= t; ++m) {
        float s = 0.0f;
        if (factored)
          for (int i = 0; i < K; ++i) s = fma_rn(at(qg, K, t, i), at(kn, K, m, i), s);
        else
          s = at(pair_P, n, t, m);
        P[m] = round_to_bf16(s);
      }
      for (int j = 0; j < V; ++j) {
        float o = 0.0f;
        for (int i = 0; i < K; ++i) o = fma_rn(at(qg, K, t, i), Sb[i * V + j], o);
        for (int m = 0; m <= t; ++m) o = fma_rn(P[m], at(U, V, m, j), o);
        p.o[((b * p.tokens + t0 + c0 + t) * p.heads + h) * V + j] = o;
      }
    }
    // The carry.
    for (int i = 0; i < K; ++i) {
      const float last = exp_f32(at(G, K, n - 1, i));
      for (int j = 0; j < V; ++j) {
        float c = 0.0f;
        for (int m = 0; m < n; ++m) c = fma_rn(at(kl, K, m, i), at(U, V, m, j), c);
        // (Planted bug gpu_delta_rule_carry_skips_decay: the chunk-start state carried undecayed.)
        const float kept =
            KALMAN_ORACLE_MUTANT(gpu_delta_rule_carry_skips_decay, mul_rn(last, S[i * V + j]), S[i * V + j]);
        S[i * V + j] = add_rn(kept, c);
      }
    }
  }
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < V; ++j) p.final_state[((sequence.state * p.heads + h) * K + i) * V + j] = S[i * V + j];
}

}  // namespace detail

/// The twin of delta_rule_host (host pointers; same outputs, same layout), sequence by sequence.
inline void delta_rule_twin(const delta_rule_problem& p) {
  delta_rule_check(p);
  for (const delta_rule_sequence& s : delta_rule_sequence_list(p))
    for (long long h = 0; h < p.heads; ++h) switch (p.dtype) {
        case input_dtype::f32: detail::delta_rule_head_twin<float>(p, s, h); break;
        case input_dtype::bf16: detail::delta_rule_head_twin<bf16_bits>(p, s, h); break;
        case input_dtype::f16: detail::delta_rule_head_twin<f16_bits>(p, s, h); break;
      }
}

}  // namespace kalman_oracle::gpu
