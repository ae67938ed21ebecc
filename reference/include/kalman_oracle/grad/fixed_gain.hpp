// Reference adjoint of the fixed-gain family (docs/math.md §7, §9; models/fixed_gain.hpp): GLA,
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
// The recursion a kernel follows is the memory adjoint of grad/memory.hpp (memory_backward), with
// the rule's erase key e and write key w:
//     DeltaNet, GDN, KDA: e_t = k_t, w_t = β_t k_t  ⇒  dk_t = β_t dw_t + de_t,  dβ_t = k_tᵀ dw_t
//     given gain:         e_t = k_t, w_t = κ_t      ⇒  dk_t = de_t,            dκ_t = dw_t
//     GLA:                no erase,  w_t = k_t      ⇒  dk_t = dw_t
// and the decay: KDA/GLA dα_t,i per channel; GDN one α_t per head, dα_t = Σ_i dα_t,i; DeltaNet
// none. Log gates: dg = α dα (grad/gates.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/gates.hpp"
#include "kalman_oracle/grad/memory.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"

namespace kalman_oracle {

namespace detail::grad {

/// The cotangents of the fixed-gain outputs (nullptr: none given, a zero cotangent).
template <class T>
struct fixed_gain_cotangents {
  const tensor<T>* o;            ///< [B, T, H, V]
  const tensor<T>* final_state;  ///< [B, H, K, V]
};

/// Checks the names and shapes of the cotangents.
template <class T>
fixed_gain_cotangents<T> fixed_gain_cotangents_of(const fixed_gain::problem<T>& p, const cotangents<T>& cot) {
  require_known_cotangents(cot, {"o", "final_state"}, "fixed_gain (" + to_string(p.rule()) + ")");
  return {cotangent(cot, "o", {p.batch(), p.tokens(), p.heads(), p.value_dim()}),
          cotangent(cot, "final_state", {p.batch(), p.heads(), p.key_dim(), p.value_dim()})};
}

/// The gradient of every input of the rule (see the top), accumulated by the sequential adjoint
/// below and by the chunked one (grad/fixed_gain_chunked.hpp): q, k, v in full; g, beta, gain as
/// given, each only for the rules that read it; initial_state as given or [B, H, K, V]; scale.
template <class T>
struct fixed_gain_gradients {
  tensor<T> q, k, v;
  std::optional<broadcast_accumulator<T>> g, beta, gain;
  broadcast_accumulator<T> initial_state;
  T scale{0};

  fixed_gain_gradients(const fixed_gain::problem<T>& p, const fixed_gain_inputs<T>& in)
      : q("q", {p.batch(), p.tokens(), p.heads(), p.key_dim()}),
        k("k", {p.batch(), p.tokens(), p.heads(), p.key_dim()}),
        v("v", {p.batch(), p.tokens(), p.heads(), p.value_dim()}),
        initial_state(
            "initial_state",
            in.initial_state ? in.initial_state->shape() : shape_t{p.batch(), p.heads(), p.key_dim(), p.value_dim()},
            shape_t{p.batch(), p.heads(), p.key_dim(), p.value_dim()}) {
    const shape_t per_head{p.batch(), p.tokens(), p.heads()};
    const shape_t per_channel{p.batch(), p.tokens(), p.heads(), p.key_dim()};
    if (p.decays())
      g.emplace("g", in.g->shape(), p.rule() == fixed_gain_rule::gated_delta_net ? per_head : per_channel);
    if (p.erases() && !p.given_gain()) beta.emplace("beta", in.beta->shape(), per_head);
    if (p.given_gain()) gain.emplace("gain", in.gain->shape(), per_channel);
  }

  gradients<T> take() {
    gradients<T> out;
    out.set(std::move(q));
    out.set(std::move(k));
    out.set(std::move(v));
    if (g) out.set(g->take());
    if (beta) out.set(beta->take());
    if (gain) out.set(gain->take());
    out.set(initial_state.take());
    out.set(tensor<T>("scale", {}, std::vector<T>{scale}));
    return out;
  }
};

}  // namespace detail::grad

template <class T>
gradients<T> fixed_gain_backward(const fixed_gain_inputs<T>& inputs, const cotangents<T>& cot) {
  const detail::fixed_gain::problem<T> p(inputs);
  const std::size_t B = p.batch(), N = p.tokens(), H = p.heads(), K = p.key_dim();
  const auto cots = detail::grad::fixed_gain_cotangents_of(p, cot);
  detail::grad::fixed_gain_gradients<T> grads(p, inputs);
  const bool scalar_gate = p.rule() == fixed_gain_rule::gated_delta_net;

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      memory_head<T> m = detail::grad::gather_memory_head(
          inputs.q, inputs.k, inputs.v, b, h, [&](std::size_t t, std::size_t i) { return p.decay(b, t, h, i); },
          p.erases(), p.scale(), p.initial_state(b, h));
      for (std::size_t t = 0; t < N; ++t) {
        const auto w = p.write_gain(b, t, h);
        for (std::size_t i = 0; i < K; ++i) m.write[t * K + i] = w[i];
      }
      const memory_head_gradients<T> gm = memory_backward<T>(m, detail::grad::head_tokens(cots.o, b, h),
                                                             detail::grad::head_state(cots.final_state, b, h));

      detail::grad::scatter_memory_gradients(gm, b, h, grads.q, grads.v, grads.initial_state);
      grads.scale += gm.tau;
      if (p.decays() && !scalar_gate) detail::grad::scatter_channel_gates(gm, m, b, h, p.gates(), *grads.g);
      for (std::size_t t = 0; t < N; ++t) {
        T d_beta(0), d_alpha_head(0);
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          if (!p.erases()) {
            grads.k(b, t, h, i) = gm.write[x];  // GLA: w = k
          } else if (p.given_gain()) {
            grads.k(b, t, h, i) = gm.erase[x];
            grads.gain->add(gm.write[x], b, t, h, i);
          } else {
            const T& beta = p.beta(b, t, h);
            grads.k(b, t, h, i) = beta * gm.write[x] + gm.erase[x];  // w = β k, e = k
            d_beta += m.erase[x] * gm.write[x];
          }
          if (p.decays() && scalar_gate) d_alpha_head += gm.alpha[x];  // GDN: one α_t for every channel
        }
        if (grads.beta) grads.beta->add(d_beta, b, t, h);
        if (p.decays() && scalar_gate) grads.g->add(gate_cotangent(d_alpha_head, m.alpha[t * K], p.gates()), b, t, h);
      }
    }
  return grads.take();
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
