// What the adjoints of the diagonal and the isotropic KDN share (docs/math.md §4, §5, §9;
// docs/gradients.md, "Isotropic KDN", "Diagonal KDN"; grad/diagonal.hpp, grad/isotropic.hpp): the
// cotangents of their four outputs, the gradient of every input (accumulated in the shape it was
// given, the covariance shapes taken from the problem, models/kdn_common.hpp), the memory head of
// one (batch, head) and the scatter of its adjoint (grad/memory.hpp), and, for grad/truth.hpp, the
// transform of the inputs and the list of outputs (both models have the same field and output
// names). Each model's own file keeps only its covariance path and its reverse recursion.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/memory.hpp"
#include "kalman_oracle/models/kdn_common.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle {

/// The KDN covariance update b = b̂ / (1 + c b̂) (docs/math.md §4, §5: c = μ k_i²/r per channel for
/// the diagonal model, μ‖k‖²/(K r) for the isotropic one), in the models' order. A function of its
/// own so that a scalar type may give the step a rule: the first-order running error
/// (scalar/running_error.hpp) carries b̂'s error by the exact derivative 1/(1 + c b̂)² (the
/// contraction), which the rule per operation cannot see (it adds the numerator's and the
/// denominator's relative errors, and grows like Π(1 + c b̂/(1 + c b̂)) over the tokens).
template <class T>
T kdn_posterior_step(const T& predicted, const T& c) {
  return predicted / (T(1) + c * predicted);
}

namespace detail::grad {

/// The cotangents of a KDN's outputs (nullptr: none given, a zero cotangent). Besides the four
/// outputs, the internals of run_options::internals may have cotangents: the prediction p̂_t or b̂_t
/// and the gain (κ_t, named "gain", or β_t, named "beta"), as a caller has them that runs the gain
/// path and the memory apart (the GPU's gain kernels, docs/kernels.md "KDN gain backward").
template <class T>
struct kdn_cotangents {
  const tensor<T>* o;                     ///< [B, T, H, V]
  const tensor<T>* final_state;           ///< [B, H, K, V]
  const tensor<T>* final_covariance;      ///< p_T [B, H, K] or b_T [B, H]
  const tensor<T>* readout_variance;      ///< [B, T, H]
  const tensor<T>* predicted_covariance;  ///< p̂_t [B, T, H, K] or b̂_t [B, T, H]
  const tensor<T>* gain;                  ///< κ_t [B, T, H, K] or β_t [B, T, H]
};

/// Checks the names and shapes of the cotangents (`model` names the model in messages; `gain` is
/// the name of the model's gain internal, "gain" or "beta").
template <class T, kdn_covariance Shape>
kdn_cotangents<T> kdn_cotangents_of(const kdn_problem<T, Shape>& pb, const cotangents<T>& cot, const std::string& model,
                                    const std::string& gain) {
  const kdn_dims& d = pb.dims;
  require_known_cotangents(
      cot, {"o", "final_state", "final_covariance", "readout_variance", "predicted_covariance", gain}, model);
  return {cotangent(cot, "o", {d.batch, d.tokens, d.heads, d.value_dim}),
          cotangent(cot, "final_state", {d.batch, d.heads, d.key_dim, d.value_dim}),
          cotangent(cot, "final_covariance", pb.prior_shape()),
          cotangent(cot, "readout_variance", {d.batch, d.tokens, d.heads}),
          cotangent(cot, "predicted_covariance", pb.noise_shape()),
          cotangent(cot, gain, pb.noise_shape())};
}

/// The gradient of every KDN input, named as the inputs structs' fields: q, k, v in full;
/// g, omega, r shaped as given; mu, initial_covariance, initial_state as given or, for a default,
/// in full (grad/common.hpp's convention); scale a rank-0 tensor.
template <class T>
struct kdn_gradients {
  tensor<T> q, k, v;
  broadcast_accumulator<T> g, omega, r, mu, initial_covariance, initial_state;
  T scale{0};

  template <kdn_covariance Shape, class Inputs>
  kdn_gradients(const kdn_problem<T, Shape>& pb, const Inputs& in)
      : q("q", {pb.dims.batch, pb.dims.tokens, pb.dims.heads, pb.dims.key_dim}),
        k("k", {pb.dims.batch, pb.dims.tokens, pb.dims.heads, pb.dims.key_dim}),
        v("v", {pb.dims.batch, pb.dims.tokens, pb.dims.heads, pb.dims.value_dim}),
        g("g", in.g.shape(), pb.g.shape()),
        omega("omega", in.omega.shape(), pb.noise_shape()),
        r("r", in.r.shape(), pb.r.shape()),
        mu("mu", in.mu ? in.mu->shape() : pb.mu.shape(), pb.mu.shape()),
        initial_covariance("initial_covariance",
                           in.initial_covariance ? in.initial_covariance->shape() : pb.prior_shape(), pb.prior_shape()),
        initial_state("initial_state", in.initial_state ? in.initial_state->shape() : pb.s0.shape(), pb.s0.shape()) {}

  gradients<T> take() {
    gradients<T> out;
    out.set(std::move(q));
    out.set(std::move(k));
    out.set(std::move(v));
    out.set(g.take());
    out.set(omega.take());
    out.set(r.take());
    out.set(mu.take());
    out.set(initial_covariance.take());
    out.set(initial_state.take());
    out.set(tensor<T>("scale", {}, std::vector<T>{scale}));
    return out;
  }
};

/// The memory head of (b, h): α_{t,i} from the gates, erase key k, q, v, S_0 and τ from the
/// problem. The write keys (the model's gain κ_t or β_t k_t) are the caller's.
template <class T, kdn_covariance Shape, class Inputs>
memory_head<T> kdn_memory_head(const kdn_problem<T, Shape>& pb, const Inputs& in, std::size_t b, std::size_t h) {
  return gather_memory_head(
      in.q, in.k, in.v, b, h, [&](std::size_t t, std::size_t i) { return pb.decay(b, t, h, i); }, /*erases=*/true,
      pb.tau, pb.initial_state(b, h));
}

/// The memory adjoint of (b, h) (grad/memory.hpp) with the cotangents of o and S_T.
template <class T>
memory_head_gradients<T> kdn_memory_backward(const memory_head<T>& m, const kdn_cotangents<T>& c, std::size_t b,
                                             std::size_t h) {
  const std::vector<T> d_out = head_tokens(c.o, b, h), d_state = head_state(c.final_state, b, h);
  return memory_backward<T>(m, d_out, d_state);
}

/// Scatters the memory adjoint of (b, h), once the model's covariance path has added its own terms
/// to gm.query and gm.alpha: dq, dv, dS_0, dτ, and the gates (dL/dg from dα, grad/gates.hpp).
template <class T>
void kdn_scatter_memory(const memory_head_gradients<T>& gm, const memory_head<T>& m, std::size_t b, std::size_t h,
                        gate_space gates, kdn_gradients<T>& grads) {
  scatter_memory_gradients(gm, b, h, grads.q, grads.v, grads.initial_state);
  scatter_channel_gates(gm, m, b, h, gates, grads.g);
  grads.scale += gm.tau;
}

/// The KDN models' inputs differ only in shapes, so one transform serves both (grad/truth.hpp).
template <class U, class T, template <class> class Inputs, class F>
Inputs<U> transform_kdn_inputs(const Inputs<T>& in, F&& f) {
  Inputs<U> out;
  out.q = f("q", in.q);
  out.k = f("k", in.k);
  out.v = f("v", in.v);
  out.g = f("g", in.g);
  out.gates = in.gates;
  out.omega = f("omega", in.omega);
  out.r = f("r", in.r);
  if (in.mu) out.mu = f("mu", *in.mu);
  if (in.initial_covariance) out.initial_covariance = f("initial_covariance", *in.initial_covariance);
  if (in.initial_state) out.initial_state = f("initial_state", *in.initial_state);
  if (in.scale) out.scale = f("scale", tensor<T>("scale", {}, std::vector<T>{*in.scale})).data()[0];
  return out;
}

/// The outputs both KDN models have, by name (grad/truth.hpp's for_each_output), then the internals
/// where the forward returned them (`gain`: the model's gain internal, κ_t or β_t).
template <class Outputs, class Gain, class F>
void kdn_outputs(const Outputs& out, const Gain& gain, F&& f) {
  f("o", out.o);
  f("final_state", out.final_state);
  f("final_covariance", out.final_covariance);
  f("readout_variance", out.readout_variance);
  if (out.predicted_covariance) f("predicted_covariance", *out.predicted_covariance);
  if (gain) f(gain->name(), *gain);
}

}  // namespace detail::grad

}  // namespace kalman_oracle
