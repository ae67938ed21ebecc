// The CPU twin of the chunked delta-rule backward (gpu/src/delta_rule_backward.cu; docs/kernels.md, "The
// chunked delta-rule memory (backward, binary32 or tf32)"): the kernel's five launches in order, per (sequence,
// value head), each element computed by the same function of models/delta_rule_backward.cuh from the same
// operands, so that kernel and twin agree bit for bit (the GPU test checks it). With the tf32 operands
// (delta_rule_backward_operands::tf32) the products the kernel puts on the tensor cores (product_sum)
// take their operands rounded to TF32 and sum them in this order; the kernel's tensor cores sum them in
// theirs, so kernel and twin then agree to the tf32-tc budget, not bit for bit. Per chunk of C =
// delta_rule_backward_chunk_tokens tokens (notation of that header):
//   1. operands: G_t = G_{t−1} + g_t from 0, Γ = e^G, Γ⁻ = e^{−G} (exp_within_one_ulp); A_tj / r_t and
//      σ_tj (a factored chunk: products of factored_keys, on the tensor cores with tf32 operands; a
//      strongly decaying one: keyed_pair_sum); 𝒯 = (I + A)⁻¹ by forward substitution, a column at a time
//      (𝒯_tj = −Σ_{m=j}^{t−1} A_tm 𝒯_mj, A_tm = r_t (A_tm / r_t)); X = r Γ ⊙ e, W = 𝒯X, U = 𝒯(r v),
//      carry keys ρ_L ⊙ w, Γ ⊙ sq;
//   2. states, chunks in order: S (start), Ũ = U − W S, S' = Γ_L ⊙ S + Σ_m (ρ_Lm ⊙ w_m) Ũ_mᵀ;
//   3. cotangents, chunks in reverse from dS' = d_final_state:
//      dŨ_m = Σ_i (ρ_L ⊙ w)_mi dS'_i + Σ_{t≥m} σ_tm do_t,
//      dS = Γ_L ⊙ dS' + Σ_t (Γ ⊙ sq)_t do_tᵀ − Σ_m W_m dŨ_mᵀ; after chunk 0, d_initial_state = dS;
//   4. the sums over values: R, dc, da, dσ, dW = −dŨ Sᵀ, dY = 𝒯ᵀ dŨ (dv = r dY), d𝒯 = dŨ Yᵀ + dW Xᵀ,
//      dX = 𝒯ᵀ dW, M = 𝒯ᵀ d𝒯, dA_tj = −Σ_{b ≤ j} M_tb 𝒯_jb, the row scales'
//      Σ_j dY_tj v_tj + Σ_{j<t} dA_tj A_tj / r_t;
//   5. per (token, channel): dq and dk (a factored chunk without a gate a channel: factored_channel's three
//      products, on the tensor cores with tf32 operands; else channel_token); the gates' cotangents by
//      channel_direct, decay_prefix, decay_gate_share and
//      gate_cotangents (one gate a head, GDN: once a head, from the channels' sums and head_pairs);
//      dβ_t += Σ_i dX_ti Γ_ti e_ti; dk and dq summed over a key head's value heads in order.
#pragma once

#include <vector>

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_sequences.hpp"
#include "kalman_oracle/gpu/models/delta_rule_backward.cuh"
#include "kalman_oracle/gpu/twin/delta_rule_chunked_twin.hpp"

namespace kalman_oracle::gpu {

namespace detail {

/// The flattened token row of sequence s's token 0 in the [B, T, …] tensors: batch_row · T + first_token.
inline long long first_row(const delta_rule_problem& p, const delta_rule_sequence& s) {
  return s.batch_row * p.tokens + s.first_token;
}

/// The reader of sequence s, value head h.
template <class In>
delta_rule_reader<In> sequence_reader(const delta_rule_problem& p, const delta_rule_sequence& s, long long h) {
  return {p, s.batch_row, s.first_token, s.state, h};
}

/// The rows one chunk of one (sequence, value head) reads from the inputs, widened: e = k, w, sq = τq
/// [C × K]; v and the row scales' products Y = r v [C × V]; r [C]; d_o [C × V] (zero when absent). row0:
/// the sequence's first_row.
template <class In>
struct backward_chunk_inputs {
  std::vector<float> e, w, sq, v, Y, r, d_o;
  backward_chunk_inputs(const delta_rule_backward_problem& bp, const delta_rule_reader<In>& in, long long row0,
                        long long h, int c0, int n) {
    const delta_rule_problem& p = bp.forward;
    const int C = delta_rule_backward_chunk_tokens, K = p.key_dim, V = p.value_dim;
    e.assign(C * K, 0.0f), w = e, sq = e, v.assign(C * V, 0.0f), Y = v, d_o = v, r.assign(C, 0.0f);
    for (int t = 0; t < n; ++t) {
      r[t] = in.beta(c0 + t);
      for (int i = 0; i < K; ++i) {
        e[t * K + i] = in.k(c0 + t, i);
        w[t * K + i] = in.w(c0 + t, i);
        sq[t * K + i] = mul_rn(p.tau, in.q(c0 + t, i));
      }
      for (int j = 0; j < V; ++j) {
        v[t * V + j] = in.v(c0 + t, j);
        Y[t * V + j] = mul_rn(r[t], v[t * V + j]);
        if (bp.d_o) d_o[t * V + j] = bp.d_o[((row0 + c0 + t) * p.heads + h) * V + j];
      }
    }
  }
};

/// Launch 1 for one chunk: the record's operands.
template <class In>
void backward_chunk_operands(const delta_rule_problem& p, const delta_rule_reader<In>& in, int c0, int n,
                             const backward_chunk_inputs<In>& x, const backward_record& rec, bool tf32, float* ws) {
  const int C = rec.C, K = rec.K, V = rec.V, L = n - 1;
  const bool erases = p.rule != delta_rule_kind::gla, decays = p.gate != delta_rule_gate::none;
  float *Tm = ws + rec.Tm(), *dot = ws + rec.dot(), *sigma = ws + rec.sigma(), *G = ws + rec.G(), *gam = ws + rec.gam(),
        *gin = ws + rec.gin();
  bool strong = false;
  for (int i = 0; i < K; ++i)
    strong = channel_gates([&](int t) { return in.g(c0 + t, i); }, n, decays, G + i, gam + i, gin + i, K) || strong;
  ws[rec.strong()] = strong ? 1.0f : 0.0f;
  if (strong) {  // ρ per pair
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < n; ++j) {
        dot[t * C + j] = erases && j < t ? keyed_pair_sum(&x.e[t * K], &x.w[j * K], gam + t * K, gin + j * K, G + t * K,
                                                          G + j * K, strong, K)
                                         : 0.0f;
        sigma[t * C + j] = j <= t ? keyed_pair_sum(&x.sq[t * K], &x.w[j * K], gam + t * K, gin + j * K, G + t * K,
                                                   G + j * K, strong, K)
                                  : 0.0f;
      }
  } else {  // factored: the kernel's two products over the channels (factored_keys)
    std::vector<float> gam_e(n * K), gam_sq(n * K), gin_w(n * K);
    for (int at = 0; at < n * K; ++at) {
      const factored_keys f = factored_keys_of(gam[at], gin[at], x.e[at], x.sq[at], x.w[at]);
      gam_e[at] = f.gam_e, gam_sq[at] = f.gam_sq, gin_w[at] = f.gin_w;
    }
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < n; ++j) {
        dot[t * C + j] = erases && j < t ? product_sum(tf32, 0.0f, &gam_e[t * K], 1, &gin_w[j * K], 1, K) : 0.0f;
        sigma[t * C + j] = j <= t ? product_sum(tf32, 0.0f, &gam_sq[t * K], 1, &gin_w[j * K], 1, K) : 0.0f;
      }
  }
  for (int j = 0; j < n; ++j)  // 𝒯, a column at a time
    for (int t = 0; t < n; ++t) {
      float acc = 0.0f;
      for (int m = j; m < t; ++m) acc = fma_rn(mul_rn(x.r[t], dot[t * C + m]), Tm[m * C + j], acc);
      Tm[t * C + j] = t < j ? 0.0f : t == j ? 1.0f : -acc;
    }
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < K; ++i) {
      ws[rec.X() + t * K + i] = mul_rn(mul_rn(x.r[t], gam[t * K + i]), x.e[t * K + i]);
      ws[rec.carry() + t * K + i] =
          mul_rn(decay_ratio(strong, gam[L * K + i], gin[t * K + i], G[L * K + i], G[t * K + i]), x.w[t * K + i]);
      ws[rec.gsq() + t * K + i] = mul_rn(gam[t * K + i], x.sq[t * K + i]);
    }
  }
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < K; ++i)
      ws[rec.W() + t * K + i] = product_sum(tf32, 0.0f, Tm + t * C, 1, ws + rec.X() + i, K, t + 1);
    for (int j = 0; j < V; ++j) ws[rec.U() + t * V + j] = product_sum(tf32, 0.0f, Tm + t * C, 1, &x.Y[j], V, t + 1);
  }
  for (int i = 0; i < K; ++i) ws[rec.gamma_last() + i] = gam[L * K + i];
}

/// Launch 4 for one chunk: the sums over the values, then the pair cotangents.
template <class In>
void backward_chunk_value_sums(const delta_rule_backward_problem& bp, long long row0, long long h, int c0, int n,
                               const backward_chunk_inputs<In>& x, const backward_record& rec, float* ws) {
  const delta_rule_problem& p = bp.forward;
  const int C = rec.C, K = rec.K, V = rec.V;
  const bool erases = p.rule != delta_rule_kind::gla, tf32 = bp.operands == delta_rule_backward_operands::tf32;
  const float *S = ws + rec.S(), *D = ws + rec.D(), *Ut = ws + rec.Ut(), *dUt = ws + rec.dUt(), *Tm = ws + rec.Tm();
  for (int i = 0; i < K; ++i) {
    ws[rec.R() + i] = fma_sum(0.0f, D + i * V, 1, S + i * V, 1, V);
    for (int m = 0; m < n; ++m) {
      ws[rec.dc() + i * C + m] = product_sum(tf32, 0.0f, D + i * V, 1, Ut + m * V, 1, V);
      ws[rec.da() + i * C + m] = product_sum(tf32, 0.0f, S + i * V, 1, &x.d_o[m * V], 1, V);
    }
  }
  std::vector<float> dW(C * K, 0.0f), dTm(C * C, 0.0f), M(C * C, 0.0f), dA(C * C, 0.0f), dY(C * V, 0.0f);
  for (int t = 0; t < n; ++t) {
    for (int m = 0; m <= t; ++m)
      ws[rec.dsigma() + t * C + m] = product_sum(tf32, 0.0f, &x.d_o[t * V], 1, Ut + m * V, 1, V);
    if (erases)
      for (int i = 0; i < K; ++i) dW[t * K + i] = -product_sum(tf32, 0.0f, dUt + t * V, 1, S + i * V, 1, V);
    for (int j = 0; j < V; ++j) {
      dY[t * V + j] = product_sum(tf32, 0.0f, Tm + t * C + t, C, dUt + t * V + j, V, n - t);
      bp.dv[((row0 + c0 + t) * p.heads + h) * V + j] = mul_rn(x.r[t], dY[t * V + j]);
    }
  }
  for (int t = 0; t < n; ++t) {
    if (erases)
      for (int m = 0; m <= t; ++m)
        dTm[t * C + m] = product_sum(tf32, product_sum(tf32, 0.0f, dUt + t * V, 1, &x.Y[m * V], 1, V), &dW[t * K], 1,
                                     ws + rec.X() + m * K, 1, K);
    for (int i = 0; i < K; ++i)
      ws[rec.dX() + t * K + i] = erases ? product_sum(tf32, 0.0f, Tm + t * C + t, C, &dW[t * K + i], K, n - t) : 0.0f;
  }
  if (erases)
    for (int t = 0; t < n; ++t)
      for (int bb = 0; bb < t; ++bb) M[t * C + bb] = fma_sum(0.0f, Tm + t * C + t, C, &dTm[t * C + bb], C, n - t);
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < t; ++j) dA[t * C + j] = erases ? -fma_sum(0.0f, &M[t * C], 1, Tm + j * C, 1, j + 1) : 0.0f;
    ws[rec.dr() + t] =
        fma_sum(fma_sum(0.0f, &dY[t * V], 1, &x.v[t * V], 1, V), &dA[t * C], 1, ws + rec.dot() + t * C, 1, t);
    for (int j = 0; j < n; ++j) ws[rec.dAr() + t * C + j] = j < t ? mul_rn(dA[t * C + j], x.r[t]) : 0.0f;
  }
}

/// One (sequence, value head): launches 1–4 over its chunks; the records kept for launch 5.
template <class In>
void delta_rule_backward_head_twin(const delta_rule_backward_problem& bp, const delta_rule_sequence& s, long long h,
                                   const backward_record& rec, std::vector<float>& ws) {
  const delta_rule_problem& p = bp.forward;
  const delta_rule_reader<In> in = sequence_reader<In>(p, s, h);
  const long long row0 = first_row(p, s), b = s.state;  // b: the sequence's states
  const int C = rec.C, K = rec.K, V = rec.V, chunks = s.chunks;
  const bool erases = p.rule != delta_rule_kind::gla, tf32 = bp.operands == delta_rule_backward_operands::tf32;
  ws.assign(static_cast<std::size_t>(chunks) * rec.size(), 0.0f);
  const auto record = [&](int c) { return ws.data() + static_cast<std::size_t>(c) * rec.size(); };
  const auto tokens_of = [&](int c) { return std::min(C, s.tokens - c * C); };
  for (int c = 0; c < chunks; ++c) {
    const backward_chunk_inputs<In> x(bp, in, row0, h, c * C, tokens_of(c));
    backward_chunk_operands(p, in, c * C, tokens_of(c), x, rec, tf32, record(c));
  }
  // 2. The states.
  std::vector<float> S(K * V);
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < V; ++j) S[i * V + j] = in.initial(i, j);
  for (int c = 0; c < chunks; ++c) {
    float* r = record(c);
    const int n = tokens_of(c);
    // Planted bug (validate's typical envelope must catch it where the budget reaches the scale): the state
    // rounded to bfloat16 at every chunk start, every 64 tokens.
    if (KALMAN_ORACLE_MUTANT(gpu_backward_state_rounded_bf16, false, true))
      for (float& e : S) e = round_to_bf16(e);
    for (int e = 0; e < K * V; ++e) r[rec.S() + e] = S[e];
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < V; ++j)
        r[rec.Ut() + t * V + j] =
            erases ? add_rn(r[rec.U() + t * V + j], -product_sum(tf32, 0.0f, r + rec.W() + t * K, 1, &S[j], V, K))
                   : r[rec.U() + t * V + j];
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < V; ++j)
        S[i * V + j] = fma_rn(r[rec.gamma_last() + i], S[i * V + j],
                              product_sum(tf32, 0.0f, r + rec.carry() + i, K, r + rec.Ut() + j, V, n));
  }
  // 3. The cotangents, chunks in reverse.
  std::vector<float> D(K * V, 0.0f);
  if (bp.d_final_state)
    for (int e = 0; e < K * V; ++e) D[e] = bp.d_final_state[(b * p.heads + h) * K * V + e];
  for (int c = chunks; c-- > 0;) {
    float* r = record(c);
    const int n = tokens_of(c);
    const backward_chunk_inputs<In> x(bp, in, row0, h, c * C, n);
    for (int e = 0; e < K * V; ++e) r[rec.D() + e] = D[e];
    for (int m = 0; m < n; ++m)
      for (int j = 0; j < V; ++j)
        r[rec.dUt() + m * V + j] = product_sum(tf32, product_sum(tf32, 0.0f, r + rec.carry() + m * K, 1, &D[j], V, K),
                                               r + rec.sigma() + m * C + m, C, &x.d_o[m * V + j], V, n - m);
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < V; ++j) {
        float acc = product_sum(tf32, 0.0f, r + rec.gsq() + i, K, &x.d_o[j], V, n);
        if (erases) acc = product_fnma_sum(tf32, acc, r + rec.W() + i, K, r + rec.dUt() + j, V, n);
        D[i * V + j] = fma_rn(r[rec.gamma_last() + i], D[i * V + j], acc);
      }
  }
  if (bp.d_initial_state)
    for (int e = 0; e < K * V; ++e) bp.d_initial_state[(b * p.heads + h) * K * V + e] = D[e];
  // 4. The sums over the values.
  for (int c = 0; c < chunks; ++c) {
    const backward_chunk_inputs<In> x(bp, in, row0, h, c * C, tokens_of(c));
    backward_chunk_value_sums(bp, row0, h, c * C, tokens_of(c), x, rec, record(c));
  }
}

/// Launch 5 for one (sequence, key head, chunk), each value head of the group in order: a factored chunk's
/// dq and dk as the kernel's three products' chains (factored_channel), a strongly decaying chunk's by
/// channel_token per (token, channel); the gates' sums (the kernel's channel_gates_kernel for a gate a
/// channel); the gradients written.
template <class In>
void backward_chunk_channels(const delta_rule_backward_problem& bp, const delta_rule_sequence& s, long long key_head,
                             int c0, int n, const backward_record& rec,
                             const std::vector<std::vector<float>>& head_ws) {
  const delta_rule_problem& p = bp.forward;
  const long long row0 = first_row(p, s);
  const int C = rec.C, K = rec.K, group = p.key_head_group, H = p.heads / group;
  const bool erases = p.rule != delta_rule_kind::gla, channel_gated = p.gate == delta_rule_gate::per_channel,
             head_gated = p.gate == delta_rule_gate::per_head, decays = channel_gated || head_gated,
             tf32 = bp.operands == delta_rule_backward_operands::tf32;
  std::vector<float> dk(C * K, 0.0f), dq(C * K, 0.0f);
  std::vector<float> gin_w(C), gam_sq(C), gam_e(C);  // a factored chunk's columns (factored_channel)
  for (int u = 0; u < group; ++u) {
    const long long h = key_head * group + u;
    const delta_rule_reader<In> in = sequence_reader<In>(p, s, h);
    const backward_chunk_inputs<In> x(bp, in, row0, h, c0, n);
    const float* ws = head_ws[static_cast<std::size_t>(h)].data() + static_cast<std::size_t>(c0 / C) * rec.size();
    const bool strong = ws[rec.strong()] != 0.0f;
    const pair_inputs pairs{ws + rec.dsigma(), ws + rec.dAr(), x.r.data(), C};
    std::vector<float> direct(C * K, 0.0f), F(C * K, 0.0f), dG(C * K, 0.0f), prefix(C * C, 0.0f);
    std::vector<float> head_direct(C, 0.0f), carry(C, 0.0f);  // one gate a head: the channels' sums
    for (int i = 0; i < K; ++i) {
      const channel_inputs ch{
          &x.e[i],          &x.w[i],           &x.sq[i], ws + rec.gam() + i,    ws + rec.gin() + i,
          ws + rec.G() + i, ws + rec.dX() + i, K,        ws + rec.da() + i * C, ws + rec.dc() + i * C,
          ws[rec.R() + i]};
      const factored_channel f{ch, pairs, n};
      const bool factored = !strong;  // every rule (docs/kernels.md, "Launch 5 in two kernels")
      if (factored)
        for (int t = 0; t < n; ++t) gin_w[t] = f.gin_w(t), gam_sq[t] = f.gam_sq(t), gam_e[t] = f.gam_e(t);
      for (int t = 0; t < n; ++t) {
        // ρ per pair (strong): channel_token; factored: the kernel's three products' chains.
        channel_token_gradient g{};
        if (!factored) {
          g = channel_token(ch, pairs, t, n, erases, decays, strong);
        } else {
          g.dsq = f.dsq(t, product_sum(tf32, f.dsq_begin(t), pairs.dsigma + t * C, 1, gin_w.data(), 1, t + 1));
          if (erases) g.de = f.de(t, product_sum(tf32, f.de_begin(t), pairs.dAr + t * C, 1, gin_w.data(), 1, t + 1));
          float acc = product_sum(tf32, f.dw_begin(t), pairs.dsigma + t * C + t, C, &gam_sq[t], 1, n - t);
          if (erases) acc = product_sum(tf32, acc, pairs.dAr + t * C + t, C, &gam_e[t], 1, n - t);
          g.dw = f.dw(t, acc);
          if (decays) g.direct = channel_direct(ch, pairs, t, n, erases);
        }
        const long long at = ((row0 + c0 + t) * p.heads + h) * K + i;
        const float dk_h = key_gradient(p.rule, g);
        if (p.rule == delta_rule_kind::two_key) bp.dkappa[at] = g.dw;
        dk[t * K + i] = u == 0 ? dk_h : add_rn(dk[t * K + i], dk_h);
        dq[t * K + i] = u == 0 ? mul_rn(p.tau, g.dsq) : add_rn(dq[t * K + i], mul_rn(p.tau, g.dsq));
        direct[t * K + i] = g.direct;
      }
      const channel_pairs q{ch, pairs, n, erases, strong};
      if (channel_gated) {  // the decay ratios' part of the gates (decay_prefix, decay_gate_share)
        for (int t = 0; t < n; ++t) decay_prefix(q, t, &prefix[t * C], 1);
        for (int s = 0; s < n; ++s) F[s * K + i] = decay_gate_share(prefix.data(), C, 1, s, n);
      }
      if (head_gated) {  // the channels' sums, i rising: the direct parts and c_j
        for (int t = 0; t < n; ++t) head_direct[t] = add_rn(head_direct[t], direct[t * K + i]);
        for (int j = 0; j < n; ++j) carry[j] = carry_term(q, j, carry[j]);
      }
    }
    if (channel_gated) {  // gate_cotangents per channel
      for (int i = 0; i < K; ++i) gate_cotangents(&direct[i], &F[i], &dG[i], K, n);
      for (int t = 0; t < n; ++t)
        for (int i = 0; i < K; ++i) bp.dg[((row0 + c0 + t) * p.heads + h) * K + i] = dG[t * K + i];
    }
    if (head_gated) {  // one gate a head: the head's pair terms from σ and A / r (head_pairs)
      const head_pairs q{pairs, ws + rec.sigma(), ws + rec.dot(), carry.data(), n, erases};
      for (int t = 0; t < n; ++t) decay_prefix(q, t, &prefix[t * C], 1);
      for (int s = 0; s < n; ++s) F[s] = decay_gate_share(prefix.data(), C, 1, s, n);
      gate_cotangents(head_direct.data(), F.data(), dG.data(), 1, n);
      for (int t = 0; t < n; ++t) bp.dg[(row0 + c0 + t) * p.heads + h] = dG[t];
    }
    if (p.rule == delta_rule_kind::beta_form)
      for (int t = 0; t < n; ++t) {
        float acc = ws[rec.dr() + t];
        for (int i = 0; i < K; ++i)
          acc = fma_rn(ws[rec.dX() + t * K + i], mul_rn(ws[rec.gam() + t * K + i], x.e[t * K + i]), acc);
        bp.dbeta[(row0 + c0 + t) * p.heads + h] = acc;
      }
  }
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < K; ++i) {
      const long long at = ((row0 + c0 + t) * H + key_head) * K + i;
      bp.dk[at] = dk[t * K + i];
      bp.dq[at] = dq[t * K + i];
    }
}

template <class In>
void delta_rule_backward_twin_typed(const delta_rule_backward_problem& bp) {
  const delta_rule_problem& p = bp.forward;
  const backward_record rec = delta_rule_backward_record(p);
  const int C = rec.C, group = p.key_head_group, H = p.heads / group;
  for (const delta_rule_sequence& s : delta_rule_sequence_list(p)) {
    std::vector<std::vector<float>> head_ws(static_cast<std::size_t>(p.heads));
    for (long long h = 0; h < p.heads; ++h) delta_rule_backward_head_twin<In>(bp, s, h, rec, head_ws[h]);
    for (long long kh = 0; kh < H; ++kh)
      for (int c0 = 0; c0 < s.tokens; c0 += C)
        backward_chunk_channels<In>(bp, s, kh, c0, std::min(C, s.tokens - c0), rec, head_ws);
  }
}

}  // namespace detail

/// The twin of delta_rule_backward_device: the same problem, host pointers.
inline void delta_rule_backward_twin(const delta_rule_backward_problem& bp) {
  delta_rule_backward_check(bp);
  switch (bp.forward.dtype) {
    case input_dtype::f32: return detail::delta_rule_backward_twin_typed<float>(bp);
    case input_dtype::bf16: return detail::delta_rule_backward_twin_typed<bf16_bits>(bp);
    case input_dtype::f16: return detail::delta_rule_backward_twin_typed<f16_bits>(bp);
  }
}

}  // namespace kalman_oracle::gpu
