// Reference adjoint of the fixed-gain family (MATH.md §7, §9; models/fixed_gain.hpp): GLA,
// DeltaNet, GDN, KDA and the given-gain (two-key) rule.
//
//     gradients<T> fixed_gain_backward(const fixed_gain_inputs<T>& in, const cotangents<T>& cot)
//
// Cotangents (full output shapes, any subset): "o" [B, T, H, V], "final_state" [B, H, K, V].
// Returns the gradient of L = Σ_t ⟨o_t, do_t⟩ + ⟨S_T, dS_T⟩ for every input, named as the fields
// of fixed_gain_inputs: "q", "k", "v" [full shapes]; "g" (GLA, KDA, GDN; shaped like the g given,
// log or linear as in.gates); "beta" (β-form delta rules) or "gain" (given κ), shaped as given;
// "initial_state" (as given, or [B, H, K, V] for the default S_0 = 0); "scale" (τ, rank 0).
//
// The recursion a kernel follows is the memory adjoint of grad/common.hpp (memory_backward), with
// the rule's erase key e and write key w:
//     DeltaNet, GDN, KDA: e_t = k_t, w_t = β_t k_t  ⇒  dk_t = β_t dw_t + de_t,  dβ_t = k_tᵀ dw_t
//     given gain:         e_t = k_t, w_t = κ_t      ⇒  dk_t = de_t,            dκ_t = dw_t
//     GLA:                no erase,  w_t = k_t      ⇒  dk_t = dw_t
// and the decay: KDA/GLA dα_t,i per channel; GDN one α_t per head, dα_t = Σ_i dα_t,i; DeltaNet
// none. Log gates: dg = α dα.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"

namespace kalman_oracle {

template <class T>
gradients<T> fixed_gain_backward(const fixed_gain_inputs<T>& inputs, const cotangents<T>& cot) {
  const detail::fixed_gain::problem<T> p(inputs);
  const std::size_t B = p.batch(), N = p.tokens(), H = p.heads(), K = p.key_dim(), V = p.value_dim();
  detail::grad::require_known_cotangents(cot, {"o", "final_state"}, "fixed_gain (" + to_string(p.rule()) + ")");
  const tensor<T>* d_o = detail::grad::cotangent(cot, "o", {B, N, H, V});
  const tensor<T>* d_final = detail::grad::cotangent(cot, "final_state", {B, H, K, V});

  tensor<T> dq("q", {B, N, H, K}), dk("k", {B, N, H, K}), dv("v", {B, N, H, V});
  const shape_t gate_full = p.rule() == fixed_gain_rule::gated_delta_net ? shape_t{B, N, H} : shape_t{B, N, H, K};
  std::optional<broadcast_accumulator<T>> dg, dbeta, dgain;
  if (p.decays()) dg.emplace("g", inputs.g->shape(), gate_full);
  if (p.erases() && !p.given_gain()) dbeta.emplace("beta", inputs.beta->shape(), shape_t{B, N, H});
  if (p.given_gain()) dgain.emplace("gain", inputs.gain->shape(), shape_t{B, N, H, K});
  broadcast_accumulator<T> ds0("initial_state", inputs.initial_state ? inputs.initial_state->shape() : shape_t{B, H, K, V},
                               shape_t{B, H, K, V});
  T dscale(0);

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      memory_head<T> m;
      m.tokens = N, m.key_dim = K, m.value_dim = V, m.erases = p.erases(), m.tau = p.scale();
      m.alpha.resize(N * K), m.erase.resize(N * K), m.write.resize(N * K), m.value.resize(N * V), m.query.resize(N * K);
      for (std::size_t t = 0; t < N; ++t) {
        const auto key = p.key(b, t, h), query = p.query(b, t, h), value = p.value(b, t, h), w = p.write_gain(b, t, h);
        for (std::size_t i = 0; i < K; ++i) {
          m.alpha[t * K + i] = p.decay(b, t, h, i);
          m.erase[t * K + i] = key[i];
          m.write[t * K + i] = w[i];
          m.query[t * K + i] = query[i];
        }
        for (std::size_t j = 0; j < V; ++j) m.value[t * V + j] = value[j];
      }
      m.initial_state = p.initial_state(b, h);

      std::vector<T> d_out, d_state;
      if (d_o) {
        d_out.resize(N * V);
        for (std::size_t t = 0; t < N; ++t)
          for (std::size_t j = 0; j < V; ++j) d_out[t * V + j] = (*d_o)(b, t, h, j);
      }
      if (d_final) {
        d_state.resize(K * V);
        for (std::size_t i = 0; i < K; ++i)
          for (std::size_t j = 0; j < V; ++j) d_state[i * V + j] = (*d_final)(b, h, i, j);
      }
      const memory_head_gradients<T> gm = memory_backward<T>(m, d_out, d_state);

      dscale += gm.tau;
      for (std::size_t t = 0; t < N; ++t) {
        for (std::size_t j = 0; j < V; ++j) dv(b, t, h, j) = gm.value[t * V + j];
        T d_beta(0), d_alpha_head(0);
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          dq(b, t, h, i) = gm.query[x];
          if (!p.erases()) {
            dk(b, t, h, i) = gm.write[x];  // GLA: w = k
          } else if (p.given_gain()) {
            dk(b, t, h, i) = gm.erase[x];
            dgain->add(gm.write[x], b, t, h, i);
          } else {
            const T& beta = p.beta(b, t, h);
            dk(b, t, h, i) = beta * gm.write[x] + gm.erase[x];  // w = β k, e = k
            d_beta += m.erase[x] * gm.write[x];
          }
          if (p.decays()) {
            if (p.rule() == fixed_gain_rule::gated_delta_net)
              d_alpha_head += gm.alpha[x];
            else
              dg->add(gate_cotangent(gm.alpha[x], m.alpha[x], p.gates()), b, t, h, i);
          }
        }
        if (dbeta) dbeta->add(d_beta, b, t, h);
        if (p.rule() == fixed_gain_rule::gated_delta_net)
          dg->add(gate_cotangent(d_alpha_head, m.alpha[t * K], p.gates()), b, t, h);
      }
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) ds0.add(gm.initial_state[i * V + j], b, h, i, j);
    }

  gradients<T> out;
  out.set(std::move(dq));
  out.set(std::move(dk));
  out.set(std::move(dv));
  if (dg) out.set(dg->take());
  if (dbeta) out.set(dbeta->take());
  if (dgain) out.set(dgain->take());
  out.set(ds0.take());
  out.set(tensor<T>("scale", {}, std::vector<T>{dscale}));
  return out;
}

/// The fixed-gain family as a model for grad/truth.hpp: the sequential form, or with chunk_size the
/// chunked WY form (models/fixed_gain_chunked.hpp), whose gradient must equal the sequential one.
struct fixed_gain_model {
  template <class T>
  using inputs_type = fixed_gain_inputs<T>;
  std::size_t chunk_size = 0;  // 0: sequential

  template <class T>
  fixed_gain_outputs<T> forward(const fixed_gain_inputs<T>& in) const {
    return chunk_size == 0 ? fixed_gain_forward(in) : fixed_gain_chunked_forward(in, chunk_size);
  }
  template <class T>
  static gradients<T> backward(const fixed_gain_inputs<T>& in, const cotangents<T>& cot) {
    return fixed_gain_backward(in, cot);
  }
  template <class U, class T, class F>
  static fixed_gain_inputs<U> transform(const fixed_gain_inputs<T>& in, F&& f) {
    fixed_gain_inputs<U> out;
    out.rule = in.rule;
    out.gates = in.gates;
    out.q = f("q", in.q);
    out.k = f("k", in.k);
    out.v = f("v", in.v);
    if (in.g) out.g = f("g", *in.g);
    if (in.beta) out.beta = f("beta", *in.beta);
    if (in.gain) out.gain = f("gain", *in.gain);
    if (in.initial_state) out.initial_state = f("initial_state", *in.initial_state);
    if (in.scale) out.scale = f("scale", tensor<T>("scale", {}, std::vector<T>{*in.scale})).data()[0];
    return out;
  }
  template <class T, class F>
  static void for_each_output(const fixed_gain_outputs<T>& out, F&& f) {
    f("o", out.o);
    f("final_state", out.final_state);
  }
  template <class T, class Inputs>
  static void canonicalise(gradients<T>&, const Inputs&) {}
};

}  // namespace kalman_oracle
