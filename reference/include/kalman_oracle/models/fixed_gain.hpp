// The fixed-gain family of docs/math.md §7, sequential reference: GLA, DeltaNet, Gated DeltaNet (GDN),
// KDA, and the given-gain (two-key) delta rule. Per (batch, head), on the K x V state S:
//
//     GLA:      S_t = diag(α_t) S_{t−1} + k_t v_tᵀ                          (α_t ∈ (0, 1]^K)
//     DeltaNet: S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ
//     GDN:      S_t = (I − β_t k_t k_tᵀ) α_t S_{t−1} + β_t k_t v_tᵀ          (α_t ∈ (0, 1] scalar)
//     KDA:      S_t = (I − β_t k_t k_tᵀ) diag(α_t) S_{t−1} + β_t k_t v_tᵀ    (α_t ∈ (0, 1]^K)
//     given gain: β_t k_t replaced by κ_t in the erase and in the write (the two-key rule of §7):
//               S_t = (I − κ_t k_tᵀ) D_t S_{t−1} + κ_t v_tᵀ, with D_t the rule's decay
//     o_t = S_tᵀ (τ q_t)                                                     (read after write)
//
// with α_t = e^{g_t} for fla's log-space gates g_t ≤ 0, or α_t given directly (gate_space::linear,
// what exact rational tests use). Computed in fla's order (models/delta_rule.hpp): decay first,
// then the delta correction against the *decayed* state, then the read:
//     S ← D_t S;   S ← S + gain_t (v_t − Sᵀ k_t)ᵀ;   o_t = Sᵀ (τ q_t)
// which expands to the §7 formulas, since (I − κ kᵀ) D S + κ vᵀ = D S + κ (v − (D S)ᵀ k)ᵀ.
//
// Tensors (fla names and layout, token-major): q, k [B, T, H, K]; v [B, T, H, V]; g: GLA and KDA
// [B, T, H, K], GDN [B, T, H]; beta [B, T, H]; gain (κ) [B, T, H, K]; initial_state [B, H, K, V]
// (default 0, as in the papers and fla). Every parameter (g, beta, gain, initial_state) may be any
// tensor that broadcasts (numpy rules) to its full shape: beta [H], a KDA gate g [B, T, H, 1], ...
// Outputs: o [B, T, H, V], final_state [B, H, K, V], and with run_options.internals the gain used
// per token [B, T, H, K] (β_t k_t, κ_t, or for GLA its write key k_t: GLA never erases).
//
// The chunked (WY / UT-transform) form a kernel follows is in fixed_gain_chunked.hpp; it shares the
// validation and the per-token parameters below, not the recursion.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/delta_rule.hpp"
#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/models/options.hpp"
#include "kalman_oracle/models/query_scale.hpp"
#include "kalman_oracle/tensor/broadcast_view.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "kalman_oracle/tensor/validate.hpp"

namespace kalman_oracle {

/// The member of the §7 family.
enum class fixed_gain_rule { gla, delta_net, gated_delta_net, kda };

inline std::string to_string(fixed_gain_rule rule) {
  switch (rule) {
    case fixed_gain_rule::gla: return "GLA";
    case fixed_gain_rule::delta_net: return "DeltaNet";
    case fixed_gain_rule::gated_delta_net: return "GDN";
    case fixed_gain_rule::kda: return "KDA";
  }
  return "unknown fixed_gain_rule";
}

template <class T>
struct fixed_gain_inputs {
  fixed_gain_rule rule = fixed_gain_rule::kda;
  tensor<T> q;  ///< [B, T, H, K]
  tensor<T> k;  ///< [B, T, H, K]
  tensor<T> v;  ///< [B, T, H, V]
  /// Gates: GLA and KDA [B, T, H, K], GDN [B, T, H] (broadcastable); absent for DeltaNet.
  std::optional<tensor<T>> g;
  gate_space gates = gate_space::log;
  /// β [B, T, H] (broadcastable), any finite real; the delta rules need it unless `gain` is given.
  std::optional<tensor<T>> beta;
  /// κ [B, T, H, K] (broadcastable): replaces β k in the erase and the write (two-key rule).
  std::optional<tensor<T>> gain;
  /// S_0 [B, H, K, V] (broadcastable); default 0.
  std::optional<tensor<T>> initial_state;
  /// Query scale τ; default 1/√K as in fla (over rationals only when K is a perfect square).
  std::optional<T> scale;
};

template <class T>
struct fixed_gain_outputs {
  tensor<T> o;            ///< [B, T, H, V]
  tensor<T> final_state;  ///< [B, H, K, V]
  /// With run_options.internals: the gain used per token [B, T, H, K].
  std::optional<tensor<T>> gain;
  /// With run_options.internals (sequential form only): ‖S_t‖_F² after token t [B, T, H], the state
  /// size the norm-wise error scale of the delta rules uses (docs/error-model.md).
  std::optional<tensor<T>> state_norm_squared;
};

namespace detail::fixed_gain {

template <class T>
void require_rank(const tensor<T>& x, std::size_t rank, const std::string& layout) {
  if (x.rank() != rank)
    throw input_error(x.name() + ": shape " + to_string(x.shape()) + " has rank " + std::to_string(x.rank()) +
                      ", expected rank " + std::to_string(rank) + " " + layout);
}

/// Checks every input (shapes, presence per rule, values) and holds the per-token parameters of one
/// validated problem: the decay α_{t,i} per channel, the gain (write vector) and the query scale.
/// Both the sequential and the chunked forms read their parameters from here.
template <class T>
class problem {
 public:
  explicit problem(const fixed_gain_inputs<T>& in) : in_(in) { validate(); }

  std::size_t batch() const { return B_; }
  std::size_t tokens() const { return T_; }
  std::size_t heads() const { return H_; }
  std::size_t key_dim() const { return K_; }
  std::size_t value_dim() const { return V_; }
  const T& scale() const { return scale_; }
  fixed_gain_rule rule() const { return in_.rule; }
  gate_space gates() const { return in_.gates; }
  /// GLA writes k_t vᵀ without erasing; every other rule erases along k_t.
  bool erases() const { return in_.rule != fixed_gain_rule::gla; }
  /// The rule has a decay (all but DeltaNet).
  bool decays() const { return in_.rule != fixed_gain_rule::delta_net; }
  /// The gain is the given κ (two-key rule), not β k.
  bool given_gain() const { return in_.gain.has_value(); }

  const fixed_gain_inputs<T>& inputs() const { return in_; }

  /// The gate as given (log g or linear α) for token t, channel i; GDN's scalar gate for every i.
  /// Only for rules that decay.
  const T& gate(std::size_t b, std::size_t t, std::size_t h, std::size_t i) const {
    return in_.rule == fixed_gain_rule::gated_delta_net ? (*g_scalar_)(b, t, h) : (*g_vector_)(b, t, h, i);
  }

  /// α_{t,i}: e^{g} or the linear decay (models/gates.hpp); 1 for DeltaNet.
  T decay(std::size_t b, std::size_t t, std::size_t h, std::size_t i) const {
    if (!decays()) return T(1);
    return decay_of_gate(gate(b, t, h, i), in_.gates);
  }

  /// β_t (the β-form delta rules only).
  const T& beta(std::size_t b, std::size_t t, std::size_t h) const { return (*beta_)(b, t, h); }

  /// κ_{t,i} (given-gain form only).
  const T& kappa(std::size_t b, std::size_t t, std::size_t h, std::size_t i) const { return (*gain_)(b, t, h, i); }

  /// The write vector of token t: β_t k_t, κ_t, or k_t for GLA.
  std::vector<T> write_gain(std::size_t b, std::size_t t, std::size_t h) const {
    std::vector<T> w(K_);
    for (std::size_t i = 0; i < K_; ++i) {
      if (given_gain())
        w[i] = kappa(b, t, h, i);
      else if (erases())
        w[i] = beta(b, t, h) * in_.k(b, t, h, i);
      else
        w[i] = in_.k(b, t, h, i);
    }
    return w;
  }

  /// S_0 of (b, h), row-major K x V.
  std::vector<T> initial_state(std::size_t b, std::size_t h) const {
    std::vector<T> s(K_ * V_, T(0));
    if (state_)
      for (std::size_t i = 0; i < K_; ++i)
        for (std::size_t j = 0; j < V_; ++j) s[i * V_ + j] = (*state_)(b, h, i, j);
    return s;
  }

  std::vector<T> key(std::size_t b, std::size_t t, std::size_t h) const { return row(in_.k, b, t, h); }
  std::vector<T> query(std::size_t b, std::size_t t, std::size_t h) const { return row(in_.q, b, t, h); }
  std::vector<T> value(std::size_t b, std::size_t t, std::size_t h) const { return row(in_.v, b, t, h); }

 private:
  static std::vector<T> row(const tensor<T>& x, std::size_t b, std::size_t t, std::size_t h) {
    std::vector<T> r(x.dim(3));
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = x(b, t, h, i);
    return r;
  }

  void validate() {
    const auto& rule_name = to_string(in_.rule);
    // q, k, v: the shapes every other tensor is checked against.
    require_rank(in_.k, 4, "[B, T, H, K]");
    B_ = in_.k.dim(0), T_ = in_.k.dim(1), H_ = in_.k.dim(2), K_ = in_.k.dim(3);
    require_tokens(in_.k.name(), T_);
    if (K_ == 0) throw input_error(in_.k.name() + ": K = 0 key channels; rule: the state needs K >= 1 rows");
    require_shape(in_.q, {B_, T_, H_, K_});
    require_rank(in_.v, 4, "[B, T, H, V]");
    V_ = in_.v.dim(3);
    require_shape(in_.v, {B_, T_, H_, V_});
    if (V_ == 0) throw input_error(in_.v.name() + ": V = 0 value channels; rule: the state needs V >= 1 columns");
    require_finite(in_.q);
    require_finite(in_.k);
    require_finite(in_.v);

    // Gates: present exactly for the rules that decay.
    if (!decays()) {
      if (in_.g) throw input_error(in_.g->name() + ": given for " + rule_name + "; rule: DeltaNet has no gate");
    } else {
      if (!in_.g)
        throw input_error("g: missing; rule: " + rule_name + " needs gates g " +
                          (in_.rule == fixed_gain_rule::gated_delta_net ? "[B, T, H]" : "[B, T, H, K]"));
      if (in_.rule == fixed_gain_rule::gated_delta_net)
        g_scalar_.emplace(*in_.g, shape_t{B_, T_, H_});
      else
        g_vector_.emplace(*in_.g, shape_t{B_, T_, H_, K_});
      // The decay range α ∈ (0, 1] (g ≤ 0): the image of the finite log gates, as fla's
      // log-sigmoid gates always are; α > 1 would be an expanding map that the stability arguments
      // (non-expansive steps, docs/math.md) exclude (models/gates.hpp).
      require_gates(*in_.g, in_.gates, gate_range::decay);
    }

    // β or κ: the delta rules need exactly one; GLA neither.
    if (!erases()) {
      if (in_.beta)
        throw input_error(in_.beta->name() + ": given for GLA; rule: GLA has no delta correction (no beta)");
      if (in_.gain)
        throw input_error(in_.gain->name() + ": given for GLA; rule: GLA has no delta correction (no gain)");
    } else if (in_.gain) {
      if (in_.beta)
        throw input_error(in_.beta->name() + ": given together with " + in_.gain->name() +
                          "; rule: the gain kappa replaces beta k, give one of them");
      gain_.emplace(*in_.gain, shape_t{B_, T_, H_, K_});
      // κ: any finite vector (§4's diagonal-KDN gain is one such; the reference computes any).
      require_finite(*in_.gain);
    } else {
      if (!in_.beta) throw input_error("beta: missing; rule: " + rule_name + " needs beta [B, T, H] or a gain");
      beta_.emplace(*in_.beta, shape_t{B_, T_, H_});
      // β: any finite real. fla's models produce β ∈ (0, 1) (or (0, 2) with allow_neg_eigval);
      // the formulas hold for every β, so the reference computes any.
      require_finite(*in_.beta);
    }

    if (in_.initial_state) {
      state_.emplace(*in_.initial_state, shape_t{B_, H_, K_, V_});
      require_finite(*in_.initial_state);
    }

    scale_ = query_scale(in_.scale, K_);
  }

  const fixed_gain_inputs<T>& in_;
  std::size_t B_ = 0, T_ = 0, H_ = 0, K_ = 0, V_ = 0;
  std::optional<broadcast_view<T>> g_scalar_, g_vector_, beta_, gain_, state_;
  T scale_{};
};

/// The planted-bug twin of predict_value: Sᵀ k read from the K x V buffer as if it were V x K
/// (indices swapped), i.e. "S k". Only the fixed_gain_transposed_state mutant uses it.
template <class T>
std::vector<T> predict_value_transposed(std::span<const T> state, std::size_t value_dim, std::span<const T> key) {
  const std::size_t key_dim = key.size();
  std::vector<T> out(value_dim, T(0));
  for (std::size_t i = 0; i < key_dim; ++i)
    for (std::size_t j = 0; j < value_dim; ++j) out[j] += state[j * key_dim + i] * key[i];
  return out;
}

/// Output tensors of the right shapes (shared with the chunked form).
template <class T>
fixed_gain_outputs<T> make_outputs(const problem<T>& p, const run_options& options) {
  fixed_gain_outputs<T> out;
  out.o = tensor<T>("o", {p.batch(), p.tokens(), p.heads(), p.value_dim()});
  out.final_state = tensor<T>("final_state", {p.batch(), p.heads(), p.key_dim(), p.value_dim()});
  if (options.internals) out.gain.emplace("gain", shape_t{p.batch(), p.tokens(), p.heads(), p.key_dim()});
  return out;
}

/// Records the gains (internals) and the final state of one (b, h).
template <class T>
void store_state(fixed_gain_outputs<T>& out, const problem<T>& p, std::size_t b, std::size_t h,
                 const std::vector<T>& state) {
  for (std::size_t i = 0; i < p.key_dim(); ++i)
    for (std::size_t j = 0; j < p.value_dim(); ++j) out.final_state(b, h, i, j) = state[i * p.value_dim() + j];
  if (out.gain)
    for (std::size_t t = 0; t < p.tokens(); ++t) {
      const auto w = p.write_gain(b, t, h);
      for (std::size_t i = 0; i < p.key_dim(); ++i) (*out.gain)(b, t, h, i) = w[i];
    }
}

/// The sequential recursion of one (b, h), line by line as in docs/math.md §7 (fla's order).
template <class T>
void run_head(const problem<T>& p, std::size_t b, std::size_t h, fixed_gain_outputs<T>& out) {
  const std::size_t K = p.key_dim(), V = p.value_dim();
  std::vector<T> S = p.initial_state(b, h);
  std::vector<T> o(V), alpha(K);
  const std::span<T> state(S);

  const auto decay = [&](std::size_t t) {
    switch (p.rule()) {
      case fixed_gain_rule::delta_net: break;                                                  // no decay
      case fixed_gain_rule::gated_delta_net: decay_all<T>(state, p.decay(b, t, h, 0)); break;  // S ← α_t S
      case fixed_gain_rule::gla:
      case fixed_gain_rule::kda:
        for (std::size_t i = 0; i < K; ++i) alpha[i] = p.decay(b, t, h, i);
        decay_rows<T>(state, V, alpha);  // S ← diag(α_t) S
        break;
    }
  };
  const auto write = [&](std::size_t t) {
    const auto k = p.key(b, t, h), v = p.value(b, t, h);
    if (!p.erases()) {
      outer_write<T>(state, k, v);  // GLA: S ← S + k_t v_tᵀ
      return;
    }
    // Delta correction: S ← S + gain_t (v_t − Sᵀ k_t)ᵀ, the residual against the current
    // (already decayed) state, gain_t = β_t k_t or κ_t (the erase direction stays k_t).
    const auto predicted = KALMAN_ORACLE_MUTANT(fixed_gain_transposed_state, predict_value<T>(state, V, k),
                                                predict_value_transposed<T>(state, V, k));
    std::vector<T> residual(V);
    for (std::size_t j = 0; j < V; ++j) residual[j] = v[j] - predicted[j];
    outer_write<T>(state, p.write_gain(b, t, h), residual);
  };
  const auto read = [&](std::size_t t) {
    read_state<T>(state, p.query(b, t, h), p.scale(), o);  // o_t = S_tᵀ (τ q_t)
    for (std::size_t j = 0; j < V; ++j) out.o(b, t, h, j) = o[j];
    if (out.state_norm_squared) {
      T sum(0);
      for (const T& s : S) sum += s * s;
      (*out.state_norm_squared)(b, t, h) = sum;
    }
  };

  const bool decay_after = KALMAN_ORACLE_MUTANT(fixed_gain_decay_after_delta, false, true);
  const bool read_before = KALMAN_ORACLE_MUTANT(fixed_gain_read_before_write, false, true);
  for (std::size_t t = 0; t < p.tokens(); ++t) {
    if (read_before) read(t);
    if (!decay_after) decay(t);  // fla: decay first ...
    write(t);                    // ... then the correction against the decayed state ...
    if (decay_after) decay(t);
    if (!read_before) read(t);  // ... then read after write
  }
  store_state(out, p, b, h, S);
}

}  // namespace detail::fixed_gain

/// The sequential reference of docs/math.md §7 (see the top of this file). Validates every input first;
/// bad input throws input_error naming the tensor, the index and the rule.
template <class T>
fixed_gain_outputs<T> fixed_gain_forward(const fixed_gain_inputs<T>& inputs, const run_options& options = {}) {
  const detail::fixed_gain::problem<T> p(inputs);
  auto out = detail::fixed_gain::make_outputs(p, options);
  if (options.internals)
    out.state_norm_squared.emplace("state_norm_squared", shape_t{p.batch(), p.tokens(), p.heads()});
  detail::parallel_for(p.batch() * p.heads(), options.threads,
                       [&](std::size_t bh) { detail::fixed_gain::run_head(p, bh / p.heads(), bh % p.heads(), out); });
  return out;
}

}  // namespace kalman_oracle
