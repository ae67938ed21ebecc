// The chunked delta-rule backward's arithmetic, written once for the kernel
// (gpu/src/delta_rule_backward.cu) and its CPU twin (twin/delta_rule_backward_twin.hpp): each function
// computes one element in a fixed order, binary32, one correctly rounded operation at a time (fma_rn,
// mul_rn, add_rn: float_ops.cuh), so that kernel and twin agree bit for bit whatever thread computes
// which element. The algebra is docs/gradients.md's chunked WY adjoint ("Fixed gain, chunked WY form");
// the order of each sum is this file's (docs/kernels.md, "The chunked delta-rule memory (backward,
// binary32 or tf32)" lists it).
//
// Notation of one chunk of n tokens, local t = 0 … n−1, L = n − 1, K keys, V values: r_t the row scale
// (β_t; 1 for GLA and the two-key rule), e_t the erase key (k_t), w_t the write key (κ_t for the
// two-key rule, else k_t), sq_t = τ q_t, G_t the summed log gate, Γ_t = e^{G_t}, Γ⁻_t = e^{−G_t},
// ρ_tj = Γ_t ⊙ Γ⁻_j (a strongly decaying chunk: e^{G_t − G_j}, as the reference and the forward do).
#pragma once

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/float_ops.cuh"
#include "kalman_oracle/gpu/models/delta_rule_chunk.cuh"

namespace kalman_oracle::gpu {

/// acc + Σ_{u < count} x[u·xs] y[u·ys], u rising, one fused multiply-add a term.
KALMAN_ORACLE_HD float fma_sum(float acc, const float* x, int xs, const float* y, int ys, int count) {
  for (int u = 0; u < count; ++u) acc = fma_rn(x[u * xs], y[u * ys], acc);
  return acc;
}

/// acc − Σ_{u < count} x[u·xs] y[u·ys], u rising (fma of −x: the negation is exact).
KALMAN_ORACLE_HD float fnma_sum(float acc, const float* x, int xs, const float* y, int ys, int count) {
  for (int u = 0; u < count; ++u) acc = fma_rn(-x[u * xs], y[u * ys], acc);
  return acc;
}

/// The matrix products of the tf32 backward (delta_rule_backward_operands::tf32; docs/kernels.md, "Tensor-core
/// products"): with `tf32`, fma_sum's terms with each operand first rounded to TF32 (tf32_rn), as the
/// tensor cores multiply them; the kernel accumulates them in the tensor cores' order, so this is the
/// twin's order, not the kernel's. Without, fma_sum itself.
KALMAN_ORACLE_HD float product_sum(bool tf32, float acc, const float* x, int xs, const float* y, int ys, int count) {
  if (!tf32) return fma_sum(acc, x, xs, y, ys, count);
  for (int u = 0; u < count; ++u) acc = fma_rn(tf32_rn(x[u * xs]), tf32_rn(y[u * ys]), acc);
  return acc;
}

/// fnma_sum's counterpart of product_sum.
KALMAN_ORACLE_HD float product_fnma_sum(bool tf32, float acc, const float* x, int xs, const float* y, int ys,
                                        int count) {
  if (!tf32) return fnma_sum(acc, x, xs, y, ys, count);
  for (int u = 0; u < count; ++u) acc = fma_rn(-tf32_rn(x[u * xs]), tf32_rn(y[u * ys]), acc);
  return acc;
}

/// ρ_tj,i from channel i's Γ_t, Γ⁻_j (a factored chunk) or G_t, G_j (a strongly decaying one).
KALMAN_ORACLE_HD float decay_ratio(bool strong, float gam_t, float gin_j, float G_t, float G_j) {
  return strong ? exp_within_one_ulp(add_rn(G_t, -G_j)) : mul_rn(gam_t, gin_j);
}

/// One channel's summed log gates over a chunk of n tokens, in token order from +0: G_t = G_{t−1} + g_t,
/// Γ_t = e^{G_t}, Γ⁻_t = e^{−G_t} (without a gate, G = 0 and Γ = Γ⁻ = 1), at [t·ld]; g(t) the gate of
/// local token t. Returns whether the channel decays past delta_rule_factored_log_decay_floor (then the
/// chunk forms its decay ratios per pair: a strongly decaying chunk).
template <class Gate>
KALMAN_ORACLE_HD bool channel_gates(Gate&& g, int n, bool decays, float* G, float* gam, float* gin, int ld) {
  float sum = 0.0f;
  for (int t = 0; t < n; ++t) {
    if (decays) sum = add_rn(sum, g(t));
    G[t * ld] = sum;
    gam[t * ld] = decays ? exp_within_one_ulp(sum) : 1.0f;
    gin[t * ld] = decays ? exp_within_one_ulp(-sum) : 1.0f;
  }
  return decays && n > 0 && G[(n - 1) * ld] < delta_rule_factored_log_decay_floor;
}

/// Σ_i x_ti ρ_tj,i w_ji over the K channels, i rising: a strongly decaying chunk's A_tj / r_t (x = e) and
/// its scores σ_tj (x = sq). Rows t and j of each C × K operand (channel i at [i]). A factored chunk's:
/// factored_keys.
KALMAN_ORACLE_HD float keyed_pair_sum(const float* x_t, const float* w_j, const float* gam_t, const float* gin_j,
                                      const float* G_t, const float* G_j, bool strong, int K) {
  float acc = 0.0f;
  for (int i = 0; i < K; ++i)
    acc = fma_rn(mul_rn(x_t[i], decay_ratio(strong, gam_t[i], gin_j[i], G_t[i], G_j[i])), w_j[i], acc);
  return acc;
}

/// Four consecutive floats (16-byte aligned): one vector load on the device, four loads on the host.
struct four_floats {
  float x, y, z, w;
};
KALMAN_ORACLE_HD four_floats load_four(const float* p) {
#ifdef __CUDA_ARCH__
  const float4 v = *reinterpret_cast<const float4*>(p);
  return {v.x, v.y, v.z, v.w};
#else
  return {p[0], p[1], p[2], p[3]};
#endif
}

/// Column j of 𝒯 = (I + A)⁻¹ (A strictly lower, rows lda floats apart, lda and A 16-byte aligned; 𝒯's rows
/// ldt apart, those from n on not written: A's rows there enter only sums that are never stored) by forward
/// substitution in binary32, 𝒯_tj = −Σ_{m=j}^{t−1} A_tm 𝒯_mj (𝒯_jj = 1, 𝒯_tj = 0 above), each sum a chain of
/// fused multiply-adds from +0, m rising: the twin's order (twin/delta_rule_backward_twin.hpp solves row by
/// row; so did launch 1 until 2026-12-07, a thread's one chain C(C − 1)/2 dependent operations long). The
/// rows are taken Rows at a time (a multiple of 4), their sums in registers: first the terms of the earlier
/// blocks' rows, then, inside the block, right-looking, each entry as soon as it is known enters the later
/// rows' sums, so Rows chains run at once and each row still adds its terms in order. The terms from column
/// `first` = j rounded down to 32 (on the GPU, the warp's first column: the warp's threads read A at the same
/// addresses, broadcast) are visited, those m < j skipped, not added as zeros (an infinite A there would
/// make a zero product NaN). gpu_twin_tests checks it against the row-by-row order bit for bit.
template <int Rows>
KALMAN_ORACLE_HD void unit_lower_inverse_column_blocked(const float* A, int lda, int j, int n, float* T, int ldt) {
  static_assert(Rows % 4 == 0, "the rows are taken four at a time");
  const int first = j & ~31;
  for (int b0 = 0; b0 < n; b0 += Rows) {
    if (b0 + Rows <= first) {  // the whole block above the warp's columns: zeros
      KALMAN_ORACLE_DEVICE_UNROLL
      for (int r = 0; r < Rows; ++r)
        if (b0 + r < n) T[(b0 + r) * ldt + j] = 0.0f;
      continue;
    }
    float s[Rows];
    KALMAN_ORACLE_DEVICE_UNROLL
    for (int r = 0; r < Rows; ++r) s[r] = 0.0f;
    // The earlier blocks' terms, four rows m at a time.
    for (int m0 = first; m0 < b0; m0 += 4) {
      float column[4];
      KALMAN_ORACLE_DEVICE_UNROLL
      for (int u = 0; u < 4; ++u) column[u] = T[(m0 + u) * ldt + j];
      KALMAN_ORACLE_DEVICE_UNROLL
      for (int r = 0; r < Rows; ++r) {
        const four_floats a = load_four(A + (b0 + r) * lda + m0);
        if (m0 >= j) s[r] = fma_rn(a.x, column[0], s[r]);
        if (m0 + 1 >= j) s[r] = fma_rn(a.y, column[1], s[r]);
        if (m0 + 2 >= j) s[r] = fma_rn(a.z, column[2], s[r]);
        // (Planted bug gpu_blocked_solve_drops_term: an earlier block's fourth row left out of the sums.)
        if (KALMAN_ORACLE_MUTANT(gpu_blocked_solve_drops_term, m0 + 3 >= j, false)) s[r] = fma_rn(a.w, column[3], s[r]);
      }
    }
    // Inside the block, right-looking, four rows m at a time.
    KALMAN_ORACLE_DEVICE_UNROLL
    for (int q0 = 0; q0 < Rows; q0 += 4) {
      float column[4];  // 𝒯_mj, m = b0 + q0 … b0 + q0 + 3
      KALMAN_ORACLE_DEVICE_UNROLL
      for (int u = 0; u < 4; ++u) {
        const int m = b0 + q0 + u;
        KALMAN_ORACLE_DEVICE_UNROLL
        for (int w = 0; w < u; ++w)
          if (b0 + q0 + w >= j) s[q0 + u] = fma_rn(A[m * lda + b0 + q0 + w], column[w], s[q0 + u]);
        column[u] = m == j ? 1.0f : m > j ? -s[q0 + u] : 0.0f;
        if (m < n) T[m * ldt + j] = column[u];
      }
      KALMAN_ORACLE_DEVICE_UNROLL
      for (int r = q0 + 4; r < Rows; ++r) {
        const four_floats a = load_four(A + (b0 + r) * lda + b0 + q0);
        if (b0 + q0 >= j) s[r] = fma_rn(a.x, column[0], s[r]);
        if (b0 + q0 + 1 >= j) s[r] = fma_rn(a.y, column[1], s[r]);
        if (b0 + q0 + 2 >= j) s[r] = fma_rn(a.z, column[2], s[r]);
        if (b0 + q0 + 3 >= j) s[r] = fma_rn(a.w, column[3], s[r]);
      }
    }
  }
}

/// A factored chunk's keyed operands at one (token, channel): ρ_tj = Γ_t Γ⁻_j split between a pair's two
/// sides, Γ e and Γ sq on the row's, Γ⁻ w on the column's. A / r_tj = Σ_i (Γ e)_ti (Γ⁻ w)_ji and
/// σ_tj = Σ_i (Γ sq)_ti (Γ⁻ w)_ji, from +0, i rising (launch 1's products: the same terms as
/// keyed_pair_sum's, associated the other way, as the forward's chunks and fla's are).
struct factored_keys {
  float gam_e, gam_sq, gin_w;
};
KALMAN_ORACLE_HD factored_keys factored_keys_of(float gam, float gin, float e, float sq, float w) {
  return {mul_rn(gam, e), mul_rn(gam, sq), mul_rn(gin, w)};
}

/// One channel i of a chunk, as the last launch reads it: element t of e, w, sq, Γ, Γ⁻, G and dX at
/// [t·ld]; da (= Σ_j S_ij do_tj) and dc (= Σ_j dS'_ij Ũ_tj) at [t]; R = Σ_j dS'_ij S_ij.
struct channel_inputs {
  const float *e, *w, *sq, *gam, *gin, *G, *dX;
  int ld;
  const float *da, *dc;
  float R;
};

/// The chunk's pair cotangents: dσ_tj (j ≤ t) and dA_tj r_t (j < t) at [t·ld + j]; the row scales r_t.
struct pair_inputs {
  const float *dsigma, *dAr, *r;
  int ld;
};

/// Row a of channel i's pairs: the row's values that every pair (a, j) reads, loaded once.
struct channel_row {
  int a;
  float sq, e, gam, G;
};

/// Channel i of a chunk as channel_token and the gates' sums read it: the decay ratios ρ_aj and the
/// cotangents h_aj of ρ_aj over w_j (below).
struct channel_pairs {
  const channel_inputs& c;
  const pair_inputs& p;
  int n;
  bool erases, strong;
  KALMAN_ORACLE_HD channel_row row(int a) const {
    return {a, c.sq[a * c.ld], c.e[a * c.ld], c.gam[a * c.ld], strong ? c.G[a * c.ld] : 0.0f};
  }
  /// ρ_aj from row a's values, loading only the column value the ratio takes.
  KALMAN_ORACLE_HD float rho(const channel_row& r, int j) const {
    return strong ? decay_ratio(true, r.gam, 0.0f, r.G, c.G[j * c.ld])
                  : decay_ratio(false, r.gam, c.gin[j * c.ld], r.G, 0.0f);
  }
  KALMAN_ORACLE_HD float rho(int a, int j) const {
    return decay_ratio(strong, c.gam[a * c.ld], c.gin[j * c.ld], c.G[a * c.ld], c.G[j * c.ld]);
  }
  /// h_aj = dσ_aj sq_a (+ dA_aj r_a e_a for j < a) (+ dc_j at a = L).
  KALMAN_ORACLE_HD float h(const channel_row& r, int j) const {
    const int a = r.a;
    float x = mul_rn(p.dsigma[a * p.ld + j], r.sq);
    if (erases && j < a) x = fma_rn(p.dAr[a * p.ld + j], r.e, x);
    // (Planted bug gpu_delta_rule_backward_drops_carry_key: the carry's cotangent of the keys and decays.)
    if (a == n - 1) x = KALMAN_ORACLE_MUTANT(gpu_delta_rule_backward_drops_carry_key, add_rn(x, c.dc[j]), x);
    return x;
  }
  KALMAN_ORACLE_HD float h(int a, int j) const { return h(row(a), j); }
  /// d_tj = h_tj w_j ρ_tj (j < t): ρ_tj's cotangent times ρ_tj, its share of every dg_s, j < s <= t.
  KALMAN_ORACLE_HD float pair_decay(const channel_row& r, int j) const {
    return mul_rn(mul_rn(h(r, j), c.w[j * c.ld]), rho(r, j));
  }
  KALMAN_ORACLE_HD float pair_decay(int t, int j) const { return pair_decay(row(t), j); }
};

/// channel_pairs with one row's values held (row t of decay_segment_sums: each of the kernel's threads sums
/// one row's segment, so it loads sq_t, e_t, Γ_t, G_t once rather than at every pair).
struct channel_pairs_of_row {
  const channel_pairs& q;
  channel_row r;
  KALMAN_ORACLE_HD float pair_decay(int, int j) const { return q.pair_decay(r, j); }
};

/// One gate a head (GDN): ρ_tj is every channel's, so the channels' pair terms sum to the head's, d_tj =
/// Σ_i h_tj,i w_ji ρ_tj = dσ_tj σ_tj + dA_tj r_t (A_tj / r_t) + [t = L] Σ_i dc_ji ρ_Lj w_ji, read from the
/// chunk's scores and A / r (launch 1) rather than formed channel by channel: K times fewer pair terms and
/// prefixes (docs/kernels.md, "One gate a head"). Every d_tj still counts once, where it counts.
struct head_pairs {
  const pair_inputs& p;
  const float *sigma, *dot;  ///< σ_tj, A_tj / r_t at [t·p.ld + j]
  const float* carry;        ///< c_j = Σ_i dc_ji (ρ_Lj,i w_ji) at [j] (carry_term)
  int n;
  bool erases;
  /// d_tj (j < t): dσ_tj σ_tj, then + dA_tj r_t (A_tj / r_t), then + c_j at t = L.
  KALMAN_ORACLE_HD float pair_decay(int t, int j) const {
    float x = mul_rn(p.dsigma[t * p.ld + j], sigma[t * p.ld + j]);
    if (erases) x = fma_rn(p.dAr[t * p.ld + j], dot[t * p.ld + j], x);
    // (Planted bug gpu_delta_rule_backward_drops_carry_key: the carry's cotangent of the keys and decays.)
    if (t == n - 1) x = KALMAN_ORACLE_MUTANT(gpu_delta_rule_backward_drops_carry_key, add_rn(x, carry[j]), x);
    return x;
  }
};

/// acc + dc_ji (ρ_Lj,i w_ji): channel i's term of head_pairs' c_j (the channels rising from +0).
KALMAN_ORACLE_HD float carry_term(const channel_pairs& q, int j, float acc) {
  return fma_rn(q.c.dc[j], mul_rn(q.rho(q.n - 1, j), q.c.w[j * q.c.ld]), acc);
}

/// Channel i's gradients at token t before the gates' sums: dsq (→ dq = τ dsq), de (the erase key), dw
/// (the write key), and the log gates' cotangent through Γ_t alone.
struct channel_token_gradient {
  float dsq, de, dw;
  float direct;  ///< dΓ_t Γ_t through Γ_t alone (X, Γ ⊙ sq, the carry's Γ_L): every g_s, s <= t, shares it
};

/// The log gates' cotangent through Γ_t alone (channel_token_gradient::direct) of channel i at token t:
/// ([t = L] R + da_t sq_t + dX_t r_t e_t) Γ_t, the sum from [t = L] R in the order written.
KALMAN_ORACLE_HD float channel_direct(const channel_inputs& c, const pair_inputs& p, int t, int n, bool erases) {
  const int ld = c.ld;
  float dgam = t == n - 1 ? c.R : 0.0f;
  dgam = fma_rn(c.da[t], c.sq[t * ld], dgam);
  if (erases) dgam = fma_rn(c.dX[t * ld], mul_rn(p.r[t], c.e[t * ld]), dgam);
  return mul_rn(dgam, c.gam[t * ld]);
}

/// docs/gradients.md's steps 1–8 for one (token t, channel i), every pair sum folded as it is met (ρ per
/// pair: a strongly decaying chunk's, whose factored ratios could overflow):
///   dsq_t   = da_t Γ_t + Σ_{m ≤ t} dσ_tm ρ_tm w_m
///   de_t    = Σ_{j < t} dA_tj r_t ρ_tj w_j + dX_t r_t Γ_t
///   dw_t    = Σ_{a ≥ t} h_at ρ_at
///   direct  = channel_direct
/// each sum from +0 in the order written, one fma a term. The decay ratios' part of the gates is
/// decay_prefix's and decay_gate_share's. A factored chunk takes the same sums as matrix products instead
/// (factored_channel), every rule.
KALMAN_ORACLE_HD channel_token_gradient channel_token(const channel_inputs& c, const pair_inputs& p, int t, int n,
                                                      bool erases, bool decays, bool strong) {
  const int L = n - 1, ld = c.ld;
  const channel_pairs q{c, p, n, erases, strong};
  channel_token_gradient out{};
  const float gam_t = c.gam[t * ld], r_t = p.r[t];
  out.dsq = mul_rn(c.da[t], gam_t);
  for (int m = 0; m <= t; ++m) out.dsq = fma_rn(p.dsigma[t * p.ld + m], mul_rn(q.rho(t, m), c.w[m * ld]), out.dsq);
  if (erases) {
    float de = 0.0f;
    for (int j = 0; j < t; ++j) de = fma_rn(p.dAr[t * p.ld + j], mul_rn(q.rho(t, j), c.w[j * ld]), de);
    out.de = fma_rn(c.dX[t * ld], mul_rn(r_t, gam_t), de);
  }
  float dw = 0.0f;
  for (int a = t; a <= L; ++a) dw = fma_rn(q.h(a, t), q.rho(a, t), dw);
  out.dw = dw;
  if (decays) out.direct = channel_direct(c, p, t, n, erases);
  return out;
}

/// channel_token's dsq, de and dw in a factored chunk (not strongly decaying: ρ_aj,i = Γ_a,i Γ⁻_j,i), as
/// three matrix products over the chunk's pair cotangents, each column scaled before and each row after:
///   dsq_t = Γ_t (da_t + Σ_{m ≤ t} dσ_tm (Γ⁻ w)_m)
///   de_t  = Γ_t (dX_t r_t + Σ_{j ≤ t} dA_tj r_t (Γ⁻ w)_j)                          (dA_tt r_t = 0)
///   dw_t  = Γ⁻_t (dc_t Γ_L + Σ_{a ≥ t} dσ_at (Γ sq)_a + Σ_{a ≥ t} dA_at r_a (Γ e)_a)  (dA_tt r_t = 0)
/// (docs/kernels.md, "Pair sums as products"). Each sum is acc = begin, then its runs' terms,
/// index rising, one fma a term: the device's register tiles (tiled_sums.cuh) run exactly that chain,
/// its tensor cores (tf32) the same TF32-rounded terms in their own order. The same algebra as
/// channel_token's (h_at ρ_at = Γ⁻_t h_at Γ_a): other roundings, both within the tiers, which cover
/// both associations of the decays (docs/error-model.md). Columns: (Γ⁻ w)_t, (Γ sq)_t, (Γ e)_t.
struct factored_channel {
  const channel_inputs& c;
  const pair_inputs& p;
  int n;
  KALMAN_ORACLE_HD float gin_w(int t) const { return mul_rn(c.gin[t * c.ld], c.w[t * c.ld]); }
  KALMAN_ORACLE_HD float gam_sq(int t) const { return mul_rn(c.gam[t * c.ld], c.sq[t * c.ld]); }
  KALMAN_ORACLE_HD float gam_e(int t) const {
    // (Planted bug gpu_factored_channel_erase_key_unscaled: (Γ e)_t taken as e_t, the decay left out.)
    return KALMAN_ORACLE_MUTANT(gpu_factored_channel_erase_key_unscaled, mul_rn(c.gam[t * c.ld], c.e[t * c.ld]),
                                c.e[t * c.ld]);
  }
  KALMAN_ORACLE_HD float dsq_begin(int t) const { return c.da[t]; }
  KALMAN_ORACLE_HD float de_begin(int t) const { return mul_rn(c.dX[t * c.ld], p.r[t]); }
  /// dc_t Γ_L: the carry's term (a = L of h_at ρ_at).
  KALMAN_ORACLE_HD float dw_begin(int t) const {
    // (Planted bug gpu_delta_rule_backward_drops_carry_key: the carry's cotangent of the keys and decays.)
    return KALMAN_ORACLE_MUTANT(gpu_delta_rule_backward_drops_carry_key, mul_rn(c.dc[t], c.gam[(n - 1) * c.ld]), 0.0f);
  }
  KALMAN_ORACLE_HD float dsq(int t, float acc) const { return mul_rn(c.gam[t * c.ld], acc); }
  KALMAN_ORACLE_HD float de(int t, float acc) const { return mul_rn(c.gam[t * c.ld], acc); }
  KALMAN_ORACLE_HD float dw(int t, float acc) const { return mul_rn(c.gin[t * c.ld], acc); }
};

/// The key's gradient of one value head from channel_token's: β-form rules dk = de + dw (e = w = k), the
/// two-key rule dk = de (dw is dκ), GLA dk = dw (w = k, no erase).
KALMAN_ORACLE_HD float key_gradient(delta_rule_kind rule, const channel_token_gradient& g) {
  return rule == delta_rule_kind::beta_form ? add_rn(g.de, g.dw) : rule == delta_rule_kind::two_key ? g.de : g.dw;
}

/// The decay ratios' part of the log gates' cotangents, without cancellation. ρ_tj = e^{G_t − G_j}
/// depends on g_s exactly when j < s <= t, so that part of dg_s is F(s) = Σ_{t ≥ s} P_t(s), the row
/// prefixes P_t(s) = Σ_{j < s} d_tj (channel_pairs::pair_decay): every term counted once, where it
/// counts (the reference's dΓ Γ − dΓ⁻ Γ⁻ summed over all tokens, as fla forms it, adds and takes away
/// every pair, and a gate gradient that is exactly zero, the first token's with a zero initial state,
/// comes out as a rounding residual). Pairs: channel_pairs (a channel's d_tj) or head_pairs (one gate
/// a head: the channels' sum).
///
/// Both sums run by segments of decay_segment_terms tokens (the chunk's 64 in decay_segments of 16), so
/// that a device thread adds 16 terms in a chain rather than up to 63, and a block runs four times as
/// many chains at once (docs/kernels.md, "Decay prefixes by segments"). Row t's segment k holds s =
/// 16k + 1 … min(16k + 16, t): its running sums from +0 (decay_segment_sums), then P_t(s) = off_k +
/// (the running sum at s), off_k the segments' totals before k summed from +0 (decay_ordered_sum).
/// F(s) = the column's segments summed from +0, segment k the P_t(s) of t in [16k, 16k + 16), s <= t < n,
/// from +0, t rising (decay_share_segment). The kernel runs each segment on its own thread; the twin
/// and one gate a head run decay_prefix and decay_gate_share, the same sums in the same order.
constexpr int decay_segment_terms = 16, decay_segments = 4;

/// Segment k of row t: for s = 16k + 1 … min(16k + 16, t), sum = sum + d_t,s−1 from +0 and sink(u, sum),
/// u = s − 16k − 1. Returns the segment's total (+0 when it is empty).
template <class Pairs, class Sink>
KALMAN_ORACLE_HD float decay_segment_sums(const Pairs& q, int t, int k, Sink&& sink) {
  float sum = 0.0f;
  for (int u = 0; u < decay_segment_terms; ++u) {
    const int s = k * decay_segment_terms + 1 + u;
    if (s <= t) sink(u, sum = add_rn(sum, q.pair_decay(t, s - 1)));
  }
  return sum;
}

/// Σ_{k' < count} x[k'·xs] from +0, k' rising: off_k of the row segments (count = k), F(s) of the column
/// segments (count = decay_segments).
KALMAN_ORACLE_HD float decay_ordered_sum(const float* x, int xs, int count) {
  float sum = 0.0f;
  for (int k = 0; k < count; ++k) sum = add_rn(sum, x[k * xs]);
  return sum;
}

/// Row t's P_t(0 … t) at prefix[s·ps], P_t(0) = +0, segment by segment on one thread.
template <class Pairs>
KALMAN_ORACLE_HD void decay_prefix(const Pairs& q, int t, float* prefix, int ps) {
  prefix[0] = 0.0f;
  float totals[decay_segments];
  for (int k = 0; k < decay_segments; ++k) {
    float running[decay_segment_terms];
    totals[k] = decay_segment_sums(q, t, k, [&](int u, float sum) { running[u] = sum; });
    // (Planted bug gpu_decay_prefix_offset_drops_segment: the segment just before left out of off_k.)
    const float off =
        decay_ordered_sum(totals, 1, KALMAN_ORACLE_MUTANT(gpu_decay_prefix_offset_drops_segment, k, k > 0 ? k - 1 : 0));
    for (int u = 0; u < decay_segment_terms; ++u) {
      const int s = k * decay_segment_terms + 1 + u;
      if (s <= t) prefix[s * ps] = add_rn(off, running[u]);
    }
  }
}

/// Segment k of F(s): Σ P_t(s) over t in [16k, 16k + 16), s <= t < n, from +0, t rising; P_t(s) at
/// prefix[t·rs + s·ps].
KALMAN_ORACLE_HD float decay_share_segment(const float* prefix, int rs, int ps, int s, int n, int k) {
  float sum = 0.0f;
  const int first = k * decay_segment_terms, last = first + decay_segment_terms;
  for (int t = first > s ? first : s; t < last && t < n; ++t) sum = add_rn(sum, prefix[t * rs + s * ps]);
  return sum;
}

/// F(s) = Σ_k decay_share_segment(k) from +0, k rising.
KALMAN_ORACLE_HD float decay_gate_share(const float* prefix, int rs, int ps, int s, int n) {
  float segments[decay_segments];
  for (int k = 0; k < decay_segments; ++k) segments[k] = decay_share_segment(prefix, rs, ps, s, n, k);
  return decay_ordered_sum(segments, 1, decay_segments);
}

/// dg_s = Σ_{t ≥ s} direct_t + F(s) for a channel (direct[], F[] and dg at [s·ld]).
KALMAN_ORACLE_HD void gate_cotangents(const float* direct, const float* F, float* dg, int ld, int n) {
  float suffix = 0.0f;
  for (int s = n - 1; s >= 0; --s) {
    suffix = add_rn(suffix, direct[s * ld]);
    dg[s * ld] = add_rn(suffix, F[s * ld]);
  }
}

/// The workspace of one (batch row, value head, chunk), in floats from the record's start
/// (delta_rule_backward.hpp): the chunk's operands (launch 1), its start state and pseudo-values
/// (launch 2), their cotangents (launch 3), the partial gradients (launch 4) that launch 5 finishes.
struct backward_record {
  int C, K, V;
  // Launch 1: 𝒯, A / r (dot), σ [C × C]; W, X, carry keys ρ_L ⊙ w, Γ ⊙ sq, G, Γ, Γ⁻ [C × K]; 𝒯Y [C × V];
  // Γ_L [K]; the strong-decay flag [1].
  KALMAN_ORACLE_HD int Tm() const { return 0; }
  KALMAN_ORACLE_HD int dot() const { return C * C; }
  KALMAN_ORACLE_HD int sigma() const { return 2 * C * C; }
  KALMAN_ORACLE_HD int W() const { return 3 * C * C; }
  KALMAN_ORACLE_HD int X() const { return W() + C * K; }
  KALMAN_ORACLE_HD int carry() const { return X() + C * K; }
  KALMAN_ORACLE_HD int gsq() const { return carry() + C * K; }
  KALMAN_ORACLE_HD int G() const { return gsq() + C * K; }
  KALMAN_ORACLE_HD int gam() const { return G() + C * K; }
  KALMAN_ORACLE_HD int gin() const { return gam() + C * K; }
  KALMAN_ORACLE_HD int U() const { return gin() + C * K; }
  KALMAN_ORACLE_HD int gamma_last() const { return U() + C * V; }
  KALMAN_ORACLE_HD int strong() const { return gamma_last() + K; }
  // Launch 2: S [K × V] (the chunk-start state), Ũ [C × V]. Launch 3: dS' [K × V] (the chunk-end
  // state's cotangent), dŨ [C × V]. S starts on the next 128-byte line after the flag, so every region
  // after it does too (their sizes are multiples of 32 floats): one float there put every 16-column row
  // of S, Ũ, dS', dŨ, dc … dX across three 32-byte sectors instead of two (Nsight Compute, H100,
  // 2026-12-06: 37% of launch 4's global sectors excess).
  KALMAN_ORACLE_HD int S() const { return (strong() + 1 + 31) / 32 * 32; }
  KALMAN_ORACLE_HD int Ut() const { return S() + K * V; }
  KALMAN_ORACLE_HD int D() const { return Ut() + C * V; }
  KALMAN_ORACLE_HD int dUt() const { return D() + K * V; }
  // Launch 4: dc, da [K × C] (channel-major); dσ, dA r [C × C]; dX [C × K]; R [K]; the row scales'
  // partial cotangent [C].
  KALMAN_ORACLE_HD int dc() const { return dUt() + C * V; }
  KALMAN_ORACLE_HD int da() const { return dc() + K * C; }
  KALMAN_ORACLE_HD int dsigma() const { return da() + K * C; }
  KALMAN_ORACLE_HD int dAr() const { return dsigma() + C * C; }
  KALMAN_ORACLE_HD int dX() const { return dAr() + C * C; }
  KALMAN_ORACLE_HD int R() const { return dX() + C * K; }
  KALMAN_ORACLE_HD int dr() const { return R() + K; }
  /// The record's size, rounded up to 64 floats (every record 256-byte aligned).
  KALMAN_ORACLE_HD int size() const { return (dr() + C + 63) / 64 * 64; }
};

}  // namespace kalman_oracle::gpu
