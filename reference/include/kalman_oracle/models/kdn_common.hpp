// What the diagonal and the isotropic Kalman Delta Network share (docs/math.md §4, §5): the sizes, the
// checks of q, k, v, decays from gates (models/gates.hpp), the defaults of the papers (μ = K, prior
// covariance 1, S_0 = 0), the query scale (models/query_scale.hpp), and the validated problem with
// every parameter broadcast to its full shape. The two models differ only in the shape of their
// covariance: one variance per key channel (diagonal, §4: ω [B, T, H, K], p_0 [B, H, K]) or one
// scalar per head (isotropic, §5: ω [B, T, H], b_0 [B, H]); kdn_problem takes it as a parameter.
// The sequential forms (models/diagonal.hpp, models/isotropic.hpp), the parallel forms
// (models/kdn_parallel.hpp) and the adjoints (grad/diagonal.hpp, grad/isotropic.hpp) all read
// their inputs through it.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/models/query_scale.hpp"
#include "kalman_oracle/tensor/broadcast_view.hpp"
#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "kalman_oracle/tensor/validate.hpp"

namespace kalman_oracle {

namespace detail {

/// The sizes of one KDN problem.
struct kdn_dims {
  std::size_t batch = 0, tokens = 0, heads = 0, key_dim = 0, value_dim = 0;
};

/// q, k [B, T, H, K] and v [B, T, H, V]: ranks, agreeing sizes, T >= 1, K >= 1, all finite.
template <class T>
kdn_dims kdn_check_qkv(const tensor<T>& q, const tensor<T>& k, const tensor<T>& v) {
  if (q.rank() != 4)
    throw input_error(q.name() + ": shape " + to_string(q.shape()) + ", expected 4 dimensions [B, T, H, K]");
  kdn_dims d{q.dim(0), q.dim(1), q.dim(2), q.dim(3), 0};
  require_tokens(q.name(), d.tokens);
  if (d.key_dim == 0)
    throw input_error(q.name() + ": shape " + to_string(q.shape()) +
                      " has K = 0; rule: the key dimension must be >= 1");
  require_shape(k, q.shape());  // e.g. a K that differs between q and k
  if (v.rank() != 4 || v.dim(0) != d.batch || v.dim(1) != d.tokens || v.dim(2) != d.heads)
    throw input_error(v.name() + ": shape " + to_string(v.shape()) +
                      ", expected [B, T, H, V] with [B, T, H] = " + to_string(shape_t{d.batch, d.tokens, d.heads}));
  d.value_dim = v.dim(3);
  require_finite(q);
  require_finite(k);
  require_finite(v);
  return d;
}

/// A broadcast view of `x` to `full`, checked: first the shape (broadcast_view names the axis), then
/// every source element with `check`.
template <class T, class Check>
broadcast_view<T> kdn_view(const tensor<T>& x, const shape_t& full, Check check) {
  broadcast_view<T> view(x, full);
  check(x);
  return view;
}

/// The given optional tensor, or the default one.
template <class T>
const tensor<T>& kdn_or(const std::optional<tensor<T>>& given, const tensor<T>& fallback) {
  return given ? *given : fallback;
}

/// The shape of a KDN's covariance: one variance per key channel (§4) or one scalar per head (§5).
enum class kdn_covariance { diagonal, isotropic };

/// Validated KDN inputs with defaults filled in and parameters broadcast; `Shape` fixes the shapes
/// of ω and of the prior covariance (see the top). Every check happens in the constructor, before
/// any arithmetic. `Inputs` is diagonal_kdn_inputs or isotropic_kdn_inputs (same fields). Views
/// point into the inputs and into the default tensors held here, so the object stays where it was
/// built.
template <class T, kdn_covariance Shape>
struct kdn_problem {
  static constexpr bool per_channel = Shape == kdn_covariance::diagonal;

  // Defaults (papers): μ = K, prior covariance 1, S_0 = 0. Declared first: the views below point at
  // them.
  tensor<T> mu_default, prior_default, s0_default;
  kdn_dims dims;
  gate_space gates;
  broadcast_view<T> g;      ///< gates, [B, T, H, K]
  broadcast_view<T> omega;  ///< process noise ω, [B, T, H, K] (diagonal) or [B, T, H] (isotropic)
  broadcast_view<T> r;      ///< observation noise, [B, T, H]
  broadcast_view<T> mu;     ///< information scale, [H]
  broadcast_view<T> prior;  ///< prior covariance p_0 [B, H, K] (diagonal) or b_0 [B, H] (isotropic)
  broadcast_view<T> s0;     ///< prior mean S_0, [B, H, K, V]
  T tau;                    ///< query scale

  template <class Inputs>
  explicit kdn_problem(const Inputs& inputs)
      : mu_default("mu", {1}, T(static_cast<long>(inputs.q.rank() == 4 ? inputs.q.dim(3) : 1))),
        prior_default("initial_covariance", {1}, T(1)),
        s0_default("initial_state", {1}, T(0)),
        dims(kdn_check_qkv(inputs.q, inputs.k, inputs.v)),
        gates(inputs.gates),
        g(kdn_view(inputs.g, {dims.batch, dims.tokens, dims.heads, dims.key_dim},
                   [&](const tensor<T>& x) { require_gates(x, inputs.gates, gate_range::decay); })),
        omega(kdn_view(inputs.omega, noise_shape(),
                       [](const tensor<T>& x) { require_nonnegative(x, "process noise omega"); })),
        r(kdn_view(inputs.r, {dims.batch, dims.tokens, dims.heads},
                   [](const tensor<T>& x) { require_positive(x, "observation noise r"); })),
        mu(kdn_view(kdn_or(inputs.mu, mu_default), {dims.heads},
                    [](const tensor<T>& x) { require_positive(x, "information scale mu"); })),
        prior(kdn_view(kdn_or(inputs.initial_covariance, prior_default), prior_shape(),
                       [](const tensor<T>& x) {
                         require_positive(x, per_channel ? "prior covariance p_0" : "prior covariance b_0");
                       })),
        s0(kdn_view(kdn_or(inputs.initial_state, s0_default), {dims.batch, dims.heads, dims.key_dim, dims.value_dim},
                    [](const tensor<T>& x) { require_finite(x); })),
        tau(query_scale(inputs.scale, dims.key_dim)) {}
  kdn_problem(const kdn_problem&) = delete;
  kdn_problem& operator=(const kdn_problem&) = delete;

  /// The full shape of ω: per channel (§4) or per head (§5).
  shape_t noise_shape() const {
    if constexpr (per_channel) return {dims.batch, dims.tokens, dims.heads, dims.key_dim};
    return {dims.batch, dims.tokens, dims.heads};
  }
  /// The full shape of the prior covariance: p_0 per channel (§4) or b_0 per head (§5).
  shape_t prior_shape() const {
    if constexpr (per_channel) return {dims.batch, dims.heads, dims.key_dim};
    return {dims.batch, dims.heads};
  }

  /// α_{t,i} of head (b, h) (models/gates.hpp).
  T decay(std::size_t b, std::size_t t, std::size_t h, std::size_t i) const {
    return decay_of_gate(g(b, t, h, i), gates);
  }

  /// S_0 of head (b, h), K x V row-major (§2: quantities with index 0 are the prior).
  std::vector<T> initial_state(std::size_t b, std::size_t h) const {
    const std::size_t K = dims.key_dim, V = dims.value_dim;
    std::vector<T> state(K * V);
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) state[i * V + j] = s0(b, h, i, j);
    return state;
  }
};

}  // namespace detail

}  // namespace kalman_oracle
