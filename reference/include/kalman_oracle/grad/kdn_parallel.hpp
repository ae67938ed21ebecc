// The KDNs' adjoint in the parallel form's order (models/kdn_parallel.hpp): the backward a KDN kernel
// built from a gain kernel and a chunked memory kernel computes (gpu/'s whole KDN backward,
// docs/kernels.md, "The whole KDN backward").
//
//     gradients<T> diagonal_kdn_parallel_backward(const diagonal_kdn_inputs<T>&, const cotangents<T>&,
//                                                 const kdn_scan_options& = {})
//     gradients<T> isotropic_kdn_parallel_backward(const isotropic_kdn_inputs<T>&, const cotangents<T>&,
//                                                  const kdn_scan_options& = {})
//
// Same cotangents, gradient names and shapes as diagonal_kdn_backward / isotropic_kdn_backward, and the
// same values over exact arithmetic (tests/grad/kdn_parallel_test.cpp checks it over rationals, every
// memory chunk size, both associations). The order, as a kernel's:
//   1. the parallel forward (covariance scan, per-token gains): κ_t (diagonal) or β_t (isotropic);
//   2. the memory's backward in the chunked WY form (grad/fixed_gain_chunked.hpp, chunks of
//      scan.memory_chunk_size) from the cotangents of o and S_T, with those gains: the two-key rule
//      (e = k, w = κ; isotropic κ_t = fl(β_t k_t), and then dβ_t = Σ_i dκ_ti k_ti in channel order and
//      dk_t += β_t dκ_t), or for the isotropic model the β-form (β_t and k_t in the chunk's products);
//   3. the gain path's backward (the sequential references' scalar recursions, grad/diagonal.hpp,
//      grad/isotropic.hpp, given no memory cotangent) from dκ (or dβ) and the cotangents of the
//      covariance outputs and internals;
//   4. every input both read: the gain path's share plus the memory's, one rounding.
// Why it exists: the typical tier's ensemble (docs/error-model.md, "Typical tier") runs it in binary32 so
// that the KDN fixtures' gradient envelopes cover a chunked backward, as the fixed-gain fixtures' do.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/diagonal.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"
#include "kalman_oracle/grad/isotropic.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"

namespace kalman_oracle {

namespace detail::grad {

/// The cotangents of the memory's outputs (o, S_T) alone, and of everything else (the gain path's).
template <class T>
std::pair<cotangents<T>, cotangents<T>> split_kdn_cotangents(const cotangents<T>& cot) {
  cotangents<T> memory, rest;
  for (const tensor<T>& c : cot.items()) (c.name() == "o" || c.name() == "final_state" ? memory : rest).set(c);
  return {std::move(memory), std::move(rest)};
}

/// `gain_cotangent` added to the gain path's cotangent of that name (the caller's own, if any).
template <class T>
void add_cotangent(cotangents<T>& cot, tensor<T> gain_cotangent) {
  if (tensor<T>* own = cot.find(gain_cotangent.name()))
    for (std::size_t i = 0; i < own->size(); ++i) gain_cotangent.data()[i] += own->data()[i];
  cot.set(std::move(gain_cotangent));
}

/// The gain path's gradients plus the memory's where it has one (q, k, v, g, initial_state, scale).
template <class T>
gradients<T> add_memory_gradients(gradients<T> total, const gradients<T>& memory) {
  for (const char* name : {"q", "k", "v", "g", "initial_state", "scale"}) {
    const tensor<T>* m = memory.find(name);
    tensor<T>* t = total.find(name);
    if (m == nullptr || t == nullptr) continue;
    if (m->shape() != t->shape())
      throw std::logic_error(std::string("kdn parallel backward: the memory's and the gain path's d") + name +
                             " differ in shape");
    for (std::size_t i = 0; i < t->size(); ++i) t->data()[i] += m->data()[i];
  }
  return total;
}

/// The memory problem of a KDN's inputs with the gains given (kdn_parallel.hpp's phase 3).
template <class T, class Inputs>
fixed_gain_inputs<T> kdn_memory_problem(const Inputs& inputs, tensor<T> gain, const T& tau) {
  return kdn_memory_rule<T>(
      {inputs.q, inputs.k, inputs.v, inputs.g, inputs.gates, std::move(gain), inputs.initial_state, tau});
}

}  // namespace detail::grad

template <class T>
gradients<T> diagonal_kdn_parallel_backward(const diagonal_kdn_inputs<T>& inputs, const cotangents<T>& cot,
                                            const kdn_scan_options& scan = {}) {
  const detail::diagonal_kdn_problem<T> pb(inputs);
  auto [memory_cot, gain_cot] = detail::grad::split_kdn_cotangents(cot);
  // 1. The gains by the parallel forward.
  diagonal_kdn_outputs<T> forward = diagonal_kdn_parallel(inputs, scan, run_options{.threads = 1, .internals = true});
  // 2. The memory's chunked adjoint with those gains.
  const gradients<T> memory = fixed_gain_chunked_backward(
      detail::grad::kdn_memory_problem(inputs, std::move(*forward.gain), pb.tau), memory_cot, scan.memory_chunk_size);
  // 3. The gain path's adjoint from dκ and the covariance outputs' cotangents.
  tensor<T> d_gain = memory.at("gain");  // named "gain", the diagonal model's internal
  detail::grad::add_cotangent(gain_cot, std::move(d_gain));
  // 4. Both shares.
  return detail::grad::add_memory_gradients(diagonal_kdn_backward(inputs, gain_cot), memory);
}

template <class T>
gradients<T> isotropic_kdn_parallel_backward(const isotropic_kdn_inputs<T>& inputs, const cotangents<T>& cot,
                                             const kdn_scan_options& scan = {}) {
  const detail::isotropic_kdn_problem<T> pb(inputs);
  const detail::kdn_dims& d = pb.dims;
  const std::size_t B = d.batch, N = d.tokens, H = d.heads, K = d.key_dim;
  auto [memory_cot, gain_cot] = detail::grad::split_kdn_cotangents(cot);
  // 1. β_t by the parallel forward; κ_t = β_t k_t as its memory forms it.
  isotropic_kdn_outputs<T> forward = isotropic_kdn_parallel(inputs, scan, run_options{.threads = 1, .internals = true});
  const tensor<T>& beta = *forward.beta;
  tensor<T> gain("gain", {B, N, H, K});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < N; ++t)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < K; ++i) gain(b, t, h, i) = beta(b, t, h) * inputs.k(b, t, h, i);
  // 2. The memory's chunked adjoint, in the two-key association (then κ = β k undone) or the β-form.
  fixed_gain_inputs<T> rule = detail::grad::kdn_memory_problem(inputs, std::move(gain), pb.tau);
  const bool beta_form = scan.memory_association == kdn_memory_association::beta_form;
  if (beta_form) {
    rule.gain.reset();
    rule.beta = beta;
  }
  gradients<T> memory = fixed_gain_chunked_backward(rule, memory_cot, scan.memory_chunk_size);
  tensor<T> d_beta("beta", {B, N, H});
  if (beta_form) {
    d_beta.data() = memory.at("beta").data();
  } else {
    const tensor<T>& d_gain = memory.at("gain");
    tensor<T>* dk = memory.find("k");
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < N; ++t)
        for (std::size_t h = 0; h < H; ++h) {
          T sum(0);
          for (std::size_t i = 0; i < K; ++i) {
            sum += d_gain(b, t, h, i) * inputs.k(b, t, h, i);
            // (Planted bug grad_kdn_parallel_drops_key_share: κ = β k's share of dk left out.)
            (*dk)(b, t, h, i) +=
                KALMAN_ORACLE_MUTANT(grad_kdn_parallel_drops_key_share, T(beta(b, t, h) * d_gain(b, t, h, i)), T(0));
          }
          d_beta(b, t, h) = sum;
        }
  }
  // 3. The gain path's adjoint from dβ; 4. both shares.
  detail::grad::add_cotangent(gain_cot, std::move(d_beta));
  return detail::grad::add_memory_gradients(isotropic_kdn_backward(inputs, gain_cot), memory);
}

}  // namespace kalman_oracle
