// The memory adjoint in chunked (WY / UT-transform) form: the backward pass a chunked kernel follows
// (fla's chunk_* backward kernels), for the fixed-gain family (models/fixed_gain_chunked.hpp).
//
//     gradients<T> fixed_gain_chunked_backward(const fixed_gain_inputs<T>& in, const cotangents<T>& cot,
//                                              std::size_t chunk_size)
//
// Same cotangents, gradient names and shapes as fixed_gain_backward (grad/fixed_gain.hpp), and the
// same values: over exact arithmetic, for every chunk size (properties/grad_exact.cpp, chunked_equals_sequential_exact).
//
// Forward per chunk (models/fixed_gain_chunked.hpp), from the chunk-start state S, local tokens
// t = 0..n−1, row scale r_t, erase key e_t, write key w_t, τq_t = sq_t, Γ_t the cumulative decay,
// Γ⁻_t = 1/Γ_t, ρ_tj = Γ_t ⊙ Γ⁻_j:
//     A_tj = r_t Σ_i e_ti ρ_tj,i w_ji (j < t),  𝒯 = (I + A)⁻¹,  X_t = r_t Γ_t ⊙ e_t,  Y_t = r_t v_t
//     W = 𝒯 X,  U = 𝒯 Y,  Ũ = U − W S
//     o_t = Sᵀ(Γ_t ⊙ sq_t) + Σ_{m≤t} σ_tm Ũ_m,   σ_tm = Σ_i sq_ti ρ_tm,i w_mi
//     S' = diag(Γ_L) S + Σ_m diag(ρ_Lm) w_m Ũ_mᵀ    (L = n − 1)
// Reverse per chunk (chunks last to first; dS ← dS' on entry, dS_prev built on the way):
//   1. carry:   dS_prev = diag(Γ_L) dS' ;  dΓ_L += (dS' ⊙ S) 1 ;  dŨ_m += (ρ_Lm ⊙ w_m)ᵀ dS' ;
//               with c_m = ρ_Lm ⊙ w_m, dc_m = dS' Ũ_m: dρ_Lm += dc_m ⊙ w_m, dw_m += dc_m ⊙ ρ_Lm
//   2. outputs: dS_prev += Σ_t (Γ_t ⊙ sq_t) do_tᵀ ;  d(Γ_t ⊙ sq_t) = S do_t ;
//               dσ_tm = do_tᵀ Ũ_m ;  dŨ_m += Σ_{t≥m} σ_tm do_t ;  σ's factors get dσ_tm times the others
//   3. Ũ = U − W S:   dU = dŨ ;  dW = −dŨ Sᵀ ;  dS_prev −= Wᵀ dŨ
//   4. W = 𝒯X, U = 𝒯Y:   d𝒯 = dU Yᵀ + dW Xᵀ ;  dX = 𝒯ᵀ dW ;  dY = 𝒯ᵀ dU
//   5. 𝒯 = (I + A)⁻¹:    dA = −𝒯ᵀ d𝒯 𝒯ᵀ, read on the strictly lower triangle (the entries A has)
//   6. A, X, Y → r, e, w, v, ρ, Γ (products: each factor gets the cotangent times the others)
//   7. ρ_tj = Γ_t ⊙ Γ⁻_j:   dΓ_t += dρ_tj ⊙ Γ⁻_j ;  dΓ⁻_j += dρ_tj ⊙ Γ_t
//      (a strongly decaying chunk, ρ_tj = e^{G_t − G_j}: dG_t += dρ_tj ⊙ ρ_tj, dG_j −= dρ_tj ⊙ ρ_tj)
//   8. decays, inside the chunk: log gates G_t = Σ_{s≤t} g_s, Γ = e^G, Γ⁻ = e^{−G}:
//        dG_t = dΓ_t Γ_t − dΓ⁻_t Γ⁻_t,  dg_s = Σ_{t≥s} dG_t (a reverse cumulative sum);
//      linear decays P_t = Π_{s≤t} α_s, Γ = P, Γ⁻ = 1/P:
//        dP_t = dΓ_t − dΓ⁻_t / P_t²,  dα_s = (Σ_{t≥s} dP_t P_t) / α_s;
//      GDN: one gate per head, the sum over channels
//   9. r, e, w → inputs: β-form r = β, e = w = k (dβ = dr, dk = de + dw); given gain r = 1, e = k,
//      w = κ (dk = de, dκ = dw); GLA r = 1, w = k, no erase (dk = dw); dq = τ dsq, dτ += qᵀ dsq.
// dS_prev is the next (earlier) chunk's dS'; after the first chunk it is dS_0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/fixed_gain.hpp"
#include "kalman_oracle/grad/wy_adjoint_error_bound.hpp"
#include "kalman_oracle/grad/wy_chunk_adjoint_bound.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"

namespace kalman_oracle {

template <class T>
gradients<T> fixed_gain_chunked_backward(const fixed_gain_inputs<T>& inputs, const cotangents<T>& cot,
                                         std::size_t chunk_size) {
  const detail::fixed_gain::problem<T> p(inputs);
  if (chunk_size == 0) throw input_error("chunk_size: 0; rule: a chunk needs at least one token");
  const std::size_t B = p.batch(), N = p.tokens(), H = p.heads(), K = p.key_dim(), V = p.value_dim();
  const auto cots = detail::grad::fixed_gain_cotangents_of(p, cot);
  detail::grad::fixed_gain_gradients<T> grads(p, inputs);
  using detail::grad::cotangent_at;

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      // Forward over chunks, keeping every chunk-start state.
      std::vector<std::size_t> starts;
      std::vector<std::vector<T>> state_at;  // state_at[c]: the start state of chunk c
      std::vector<T> S = p.initial_state(b, h);
      // A scalar type that carries an error bound is told of every chunk, as by the forward
      // (models/wy_chunk_error_bound.hpp: the chunk-start states' errors carried norm-wise where asked).
      wy_chunk_error_bound<T> bound;
      for (std::size_t c0 = 0; c0 < N; c0 += chunk_size) {
        const std::size_t n = std::min(chunk_size, N - c0);
        starts.push_back(c0);
        if constexpr (wy_chunk_error_bound<T>::carries_bound) {
          // Planted bug chunked_adjoint_bound_forgets_state_error: the chunk-start states' errors dropped
          // (the bound of the f32-chunked tier's gradients then misses what the forward carried in).
          std::vector<T> exact_looking(S.size());
          for (std::size_t i = 0; i < S.size(); ++i) exact_looking[i] = T(S[i].value());
          state_at.push_back(KALMAN_ORACLE_MUTANT(chunked_adjoint_bound_forgets_state_error, S, exact_looking));
        } else {
          state_at.push_back(S);
        }
        const detail::fixed_gain::wy_chunk<T> c = detail::fixed_gain::wy_chunk_forward(p, b, h, c0, n, S);
        std::vector<T> next = detail::fixed_gain::wy_carry(c, S, K, V);
        if constexpr (wy_chunk_error_bound<T>::carries_bound) {
          std::vector<std::vector<T>> o = detail::fixed_gain::wy_outputs(c, S, K, V);
          bound.chunk(c, p.erases(), S, o, next, [&](const std::vector<T>& from) {
            const detail::fixed_gain::wy_chunk<T> again = detail::fixed_gain::wy_chunk_forward(p, b, h, c0, n, from);
            return std::pair{detail::fixed_gain::wy_outputs(again, from, K, V),
                             detail::fixed_gain::wy_carry(again, from, K, V)};
          });
        }
        S = std::move(next);
      }
      // dS_end: the cotangent of the end state of the chunk about to be reversed (first S_T's).
      std::vector<T> dS_end(K * V, T(0));
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) dS_end[i * V + j] = cotangent_at(cots.final_state, b, h, i, j);
      // A scalar type that carries an error bound may carry dS's errors norm-wise from chunk to chunk
      // (grad/wy_adjoint_error_bound.hpp); plain scalars run each chunk once.
      wy_adjoint_error_bound<T> adjoint_bound;

      for (std::size_t ci = starts.size(); ci-- > 0;) {
        const std::size_t c0 = starts[ci], n = std::min(chunk_size, N - c0), L = n - 1;
        const std::vector<T>& S0 = state_at[ci];
        const detail::fixed_gain::wy_chunk<T> c = detail::fixed_gain::wy_chunk_forward(p, b, h, c0, n, S0);
        // Under tensor cores (scalar/operand_rounding.hpp) every matrix product's operands are rounded,
        // as a tensor-core backward computes it (docs/gradients.md, "Tensor-core adjoints"); otherwise
        // round_operand is the identity and every bit is as before.
        const bool tensor_core = tensor_core_active<T>();
        // Steps 3–5's products, from the pseudo-values' cotangent dŨ, the chunk-start state S and 𝒯, X, Y:
        // dW = −dŨ Sᵀ (stored in `dW`) and, where the rule erases, d𝒯 = dŨ Yᵀ + dW Xᵀ (lower) and
        // dA = −𝒯ᵀ d𝒯 𝒯ᵀ on the strictly lower triangle (returned; n x n, zero elsewhere). Under tensor
        // cores dA as two products, N = d𝒯 𝒯ᵀ first, its operands and N's rounded (a kernel holds N between
        // them). Run once more from exact values where a scalar carries an error bound (step 5).
        const auto key_pair_cotangents = [&](const std::vector<std::vector<T>>& dU, const std::vector<T>& S,
                                             const std::vector<std::vector<T>>& Tm,
                                             const std::vector<std::vector<T>>& X, const std::vector<std::vector<T>>& Y,
                                             std::vector<std::vector<T>>& dW) {
          dW.assign(n, std::vector<T>(K, T(0)));
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t i = 0; i < K; ++i) {
              T acc(0);
              for (std::size_t j = 0; j < V; ++j)
                acc += round_operand(dU[t][j]) * round_operand(S[i * V + j]);  // dŨ Sᵀ
              dW[t][i] = -acc;
            }
          std::vector<std::vector<T>> dA(n, std::vector<T>(n, T(0)));
          if (!p.erases()) return dA;
          std::vector<std::vector<T>> dTm(n, std::vector<T>(n, T(0)));
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t m = 0; m <= t; ++m) {
              T acc(0);
              for (std::size_t j = 0; j < V; ++j) acc += round_operand(dU[t][j]) * round_operand(Y[m][j]);  // dŨ Yᵀ
              for (std::size_t i = 0; i < K; ++i) acc += round_operand(dW[t][i]) * round_operand(X[m][i]);  // dW Xᵀ
              dTm[t][m] = acc;
            }
          std::vector<std::vector<T>> dTm_Tt;
          if (tensor_core) {
            dTm_Tt.assign(n, std::vector<T>(n, T(0)));
            for (std::size_t a = 0; a < n; ++a)
              for (std::size_t j = 0; j < n; ++j)
                for (std::size_t bb = 0; bb <= std::min(a, j); ++bb)
                  dTm_Tt[a][j] += round_operand(dTm[a][bb]) * round_operand(Tm[j][bb]);
          }
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t j = 0; j < t; ++j) {
              T& d = dA[t][j];
              if (tensor_core)
                for (std::size_t a = t; a < n; ++a) d -= round_operand(Tm[a][t]) * round_operand(dTm_Tt[a][j]);
              else
                for (std::size_t a = t; a < n; ++a)
                  for (std::size_t bb = 0; bb <= j; ++bb) d -= Tm[a][t] * dTm[a][bb] * Tm[j][bb];
            }
          return dA;
        };
        // Steps 7–8: the gates' cotangent d_gate (n x K) from dρ (n x n x K) and, so far, dG (holding dΓ)
        // and dGi (holding dΓ⁻, or in a strongly decaying chunk the log gates' cotangent from ρ).
        //   7. ρ_tj = Γ_t ⊙ Γ⁻_j; in a strongly decaying chunk ρ_tj = e^{G_t − G_j} (no Γ⁻ formed), whose
        //      cotangent goes to the summed log gates directly: dG_t += dρ_tj ρ_tj, dG_j −= dρ_tj ρ_tj
        //      (held in dGi there).
        //   8. Log gates: dg_t = Σ_{s≥t} dG_s; linear decays: dα_t = (Σ_{s≥t} dP_s P_s) / α_t.
        // Run once more from exact values where a scalar carries an error bound (the structured bound).
        const auto gate_cotangents = [&](const std::vector<std::vector<std::vector<T>>>& drho,
                                         std::vector<std::vector<T>> dG, std::vector<std::vector<T>> dGi) {
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t j = 0; j <= t; ++j)
              for (std::size_t i = 0; i < K; ++i) {
                if (c.factored) {
                  dG[t][i] += drho[t][j][i] * c.gamma_inv[j][i];
                  dGi[j][i] += drho[t][j][i] * c.gamma[t][i];
                } else {
                  const T d = drho[t][j][i] * c.ratio(t, j, i);
                  dGi[t][i] += d;
                  dGi[j][i] -= d;
                }
              }
          std::vector<T> suffix(K, T(0));
          std::vector<std::vector<T>> d_gate(n, std::vector<T>(K, T(0)));
          for (std::size_t t = n; t-- > 0;)
            for (std::size_t i = 0; i < K; ++i) {
              if (p.gates() == gate_space::log) {
                suffix[i] += c.factored ? T(dG[t][i] * c.gamma[t][i] - dGi[t][i] * c.gamma_inv[t][i])  // dG_t
                                        : T(dG[t][i] * c.gamma[t][i] + dGi[t][i]);
                d_gate[t][i] = suffix[i];  // dg_t = Σ_{s≥t} dG_s
              } else {
                const T& P = c.gamma[t][i];
                suffix[i] += (dG[t][i] - dGi[t][i] * c.gamma_inv[t][i] * c.gamma_inv[t][i]) * P;  // dP_t P_t
                d_gate[t][i] = suffix[i] / p.gate(b, c0 + t, h, i);
              }
            }
          return d_gate;
        };
        // The chunk's reverse from dS (the cotangent of its end state): its gradients, written to `grads`
        // where `write`, and the cotangent of its start state.
        const auto chunk_adjoint = [&](const std::vector<T>& dS, bool write) {
          std::vector<T> dr(n, T(0));
          std::vector<std::vector<T>> de(n, std::vector<T>(K, T(0))), dw = de, dsq = de, dG = de, dGi = de, dX = de,
                                                                      dW = de, dU(n, std::vector<T>(V, T(0))), dY = dU;
          std::vector<std::vector<std::vector<T>>> drho(n, std::vector<std::vector<T>>(n, std::vector<T>(K, T(0))));
          std::vector<T> dS_prev(K * V, T(0));
          // Where a scalar carries the structured bounds (grad/wy_chunk_adjoint_bound.hpp), dŨ is formed a
          // second time from dS's exact values (dU_exact_carry), for the second bound on dY.
          const bool structured = structured_adjoint_bound(c);
          const std::vector<T> dS_values = structured ? without_errors(dS) : std::vector<T>{};
          std::vector<std::vector<T>> dU_exact_carry;
          if (structured) dU_exact_carry = dU;

          // 1. The carry S' = diag(Γ_L) S + Σ_m diag(ρ_Lm) w_m Ũ_mᵀ.
          for (std::size_t i = 0; i < K; ++i)
            for (std::size_t j = 0; j < V; ++j) {
              dS_prev[i * V + j] += c.gamma[L][i] * dS[i * V + j];
              dG[L][i] += dS[i * V + j] * S0[i * V + j];
            }
          for (std::size_t m = 0; m < n; ++m)
            for (std::size_t i = 0; i < K; ++i) {
              T dc(0);
              const T cm = c.ratio(L, m, i) * c.w[m][i];
              for (std::size_t j = 0; j < V; ++j) {
                dc += round_operand(dS[i * V + j]) * round_operand(c.U[m][j]);  // dS' Ũᵀ
                dU[m][j] += round_operand(cm) * round_operand(dS[i * V + j]);   // (ρ_L ⊙ w) dS'
                if (structured) dU_exact_carry[m][j] += round_operand(cm) * round_operand(dS_values[i * V + j]);
              }
              drho[L][m][i] += dc * c.w[m][i];
              dw[m][i] += dc * c.ratio(L, m, i);
            }
          // 2. Outputs o_t = Sᵀ(Γ_t ⊙ sq_t) + Σ_{m≤t} σ_tm Ũ_m.
          if (cots.o)
            for (std::size_t t = 0; t < n; ++t) {
              std::vector<T> d_out(V);
              for (std::size_t j = 0; j < V; ++j) d_out[j] = (*cots.o)(b, c0 + t, h, j);
              for (std::size_t i = 0; i < K; ++i) {
                T da(0);
                for (std::size_t j = 0; j < V; ++j) {
                  da += round_operand(S0[i * V + j]) * round_operand(d_out[j]);  // do Sᵀ
                  dS_prev[i * V + j] += round_operand(T(c.gamma[t][i] * c.sq[t][i])) * round_operand(d_out[j]);
                }
                dG[t][i] += da * c.sq[t][i];
                dsq[t][i] += da * c.gamma[t][i];
              }
              for (std::size_t m = 0; m <= t; ++m) {
                T dsigma(0);
                for (std::size_t j = 0; j < V; ++j) dsigma += round_operand(d_out[j]) * round_operand(c.U[m][j]);
                const T sigma = detail::fixed_gain::wy_pair_dot(c, c.sq, t, m, tensor_core);
                for (std::size_t j = 0; j < V; ++j) {
                  dU[m][j] += round_operand(sigma) * round_operand(d_out[j]);
                  if (structured) dU_exact_carry[m][j] += round_operand(sigma) * round_operand(d_out[j]);
                }
                // dσ (ρ ⊙ w), the pairs' share of dΓ and dΓ⁻, dσᵀ (ρ ⊙ τq): dσ and the key factor are the
                // products' operands (to first order, rounding w bounds rounding ρ ⊙ w or Γ⁻¹ ⊙ w alike).
                const T dsigma_operand = round_operand(dsigma);
                for (std::size_t i = 0; i < K; ++i) {
                  dsq[t][i] += dsigma_operand * c.ratio(t, m, i) * round_operand(c.w[m][i]);
                  drho[t][m][i] += dsigma_operand * c.sq[t][i] * round_operand(c.w[m][i]);
                  dw[m][i] += dsigma_operand * round_operand(c.sq[t][i]) * c.ratio(t, m, i);
                }
              }
            }
          // 3.–5. dW = −dŨ Sᵀ; d𝒯 = dŨ Yᵀ + dW Xᵀ and dA = −𝒯ᵀ d𝒯 𝒯ᵀ where the rule erases.
          std::vector<std::vector<T>> dA = key_pair_cotangents(dU, S0, c.Tm, c.X, c.Y, dW);
          // 3. Ũ = U − W S: dS_prev −= Wᵀ dŨ (planted bug grad_wy_missing_state_term drops it: the
          //    chunk-start state's path through the pseudo-values).
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t i = 0; i < K; ++i)
              for (std::size_t j = 0; j < V; ++j)
                dS_prev[i * V + j] -= KALMAN_ORACLE_MUTANT(grad_wy_missing_state_term,
                                                           T(round_operand(c.W[t][i]) * round_operand(dU[t][j])), T(0));
          // 4. W = 𝒯X, U = 𝒯Y: dX = 𝒯ᵀ dW, dY = 𝒯ᵀ dŨ.
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t m = 0; m <= t; ++m) {
              for (std::size_t j = 0; j < V; ++j) dY[m][j] += round_operand(c.Tm[t][m]) * round_operand(dU[t][j]);
              for (std::size_t i = 0; i < K; ++i) dX[m][i] += round_operand(c.Tm[t][m]) * round_operand(dW[t][i]);
            }
          // 5. The structured bounds (a)–(c) of grad/wy_chunk_adjoint_bound.hpp, from the local roundings of
          //    steps 3–5 (the same products from exact values), where a scalar carries them.
          if (structured) {
            bound_carried_cotangent(c, dS, dU_exact_carry, dY);
            std::vector<std::vector<T>> dW_local;
            const std::vector<std::vector<T>> local =
                key_pair_cotangents(without_errors(dU), without_errors(S0), without_errors(c.Tm), without_errors(c.X),
                                    without_errors(c.Y), dW_local);
            bound_key_cotangent(c, dW_local, dY, S0, dX);
            bound_key_pair_cotangent(c, local, dY, dA);
          }
          if (p.erases())
            for (std::size_t t = 0; t < n; ++t)
              for (std::size_t j = 0; j < t; ++j) {
                const T& dA_tj = dA[t][j];
                // 6. A_tj = r_t Σ_i e_ti ρ_tj,i w_ji: dA (ρ ⊙ w), the pairs' share of dΓ and dΓ⁻, dAᵀ (ρ ⊙ e):
                //    dA and the key factor are the products' operands, as for σ above.
                const T dot = detail::fixed_gain::wy_pair_dot(c, c.e, t, j, tensor_core);
                const T dA_operand = round_operand(dA_tj);
                for (std::size_t i = 0; i < K; ++i) {
                  de[t][i] += dA_operand * c.r[t] * c.ratio(t, j, i) * round_operand(c.w[j][i]);
                  drho[t][j][i] += dA_operand * c.r[t] * c.e[t][i] * round_operand(c.w[j][i]);
                  dw[j][i] += dA_operand * c.r[t] * round_operand(c.e[t][i]) * c.ratio(t, j, i);
                }
                dr[t] += dA_tj * dot;
              }
          // 6. X_t = r_t Γ_t ⊙ e_t, Y_t = r_t v_t.
          std::vector<std::vector<T>> dvalue(n, std::vector<T>(V, T(0)));
          for (std::size_t t = 0; t < n; ++t) {
            if (p.erases())
              for (std::size_t i = 0; i < K; ++i) {
                dr[t] += dX[t][i] * c.gamma[t][i] * c.e[t][i];
                dG[t][i] += dX[t][i] * c.r[t] * c.e[t][i];
                de[t][i] += dX[t][i] * c.r[t] * c.gamma[t][i];
              }
            for (std::size_t j = 0; j < V; ++j) {
              dr[t] += dY[t][j] * c.v[t][j];
              dvalue[t][j] = c.r[t] * dY[t][j];
            }
          }
          // 7.–8. Decays inside the chunk (see gate_cotangents), with the structured bound (d) of
          //    grad/wy_chunk_adjoint_bound.hpp for log gates where a scalar carries it.
          if (p.decays()) {
            std::vector<std::vector<T>> d_gate = gate_cotangents(drho, dG, dGi);
            if (structured && p.gates() == gate_space::log)
              bound_log_gate_cotangent(c, drho, dG, dGi,
                                       gate_cotangents(without_errors(drho), without_errors(dG), without_errors(dGi)),
                                       d_gate);
            for (std::size_t t = 0; t < n && write; ++t) {
              if (p.rule() == fixed_gain_rule::gated_delta_net) {
                T sum(0);
                for (std::size_t i = 0; i < K; ++i) sum += d_gate[t][i];
                grads.g->add(sum, b, c0 + t, h);
              } else {
                for (std::size_t i = 0; i < K; ++i) grads.g->add(d_gate[t][i], b, c0 + t, h, i);
              }
            }
          }
          // 9. r, e, w, sq → the inputs.
          for (std::size_t t = 0; t < n && write; ++t) {
            const std::size_t tok = c0 + t;
            for (std::size_t j = 0; j < V; ++j) grads.v(b, tok, h, j) = dvalue[t][j];
            for (std::size_t i = 0; i < K; ++i) {
              grads.q(b, tok, h, i) = p.scale() * dsq[t][i];
              grads.scale += c.q[t][i] * dsq[t][i];
              if (!p.erases())
                grads.k(b, tok, h, i) = dw[t][i];
              else if (p.given_gain()) {
                grads.k(b, tok, h, i) = de[t][i];
                grads.gain->add(dw[t][i], b, tok, h, i);
              } else
                grads.k(b, tok, h, i) = de[t][i] + dw[t][i];
            }
            if (grads.beta) grads.beta->add(dr[t], b, tok, h);
          }
          return dS_prev;
        };
        dS_end = adjoint_bound.chunk(c, p.erases(), dS_end, chunk_adjoint);
      }
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) grads.initial_state.add(dS_end[i * V + j], b, h, i, j);
    }

  return grads.take();
}

}  // namespace kalman_oracle
