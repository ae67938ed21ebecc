// What every reference adjoint (grad/*.hpp) shares: named sets of tensors for cotangents and
// gradients, the broadcasting rule for gradients, the gate rule, and the memory (delta-rule)
// adjoint used by the fixed-gain family and both KDN models. docs/gradients.md derives everything.
//
// Conventions (MATH.md §9):
//   * The loss is L = Σ_outputs ⟨output, cotangent⟩: Σ_t ⟨o_t, do_t⟩ + ⟨S_T, dS_T⟩ + the other
//     outputs a model has (final covariance / λ_T, η_T, readout variances, ...), as fla's tests do.
//     A cotangent is given per output name ("o", "final_state", ...), in the output's full shape;
//     an output without a cotangent contributes nothing (a zero cotangent).
//   * The gradient of L is returned for EVERY input of the model's inputs struct, under the
//     field's name ("q", "k", "v", "g", "beta", ...; "scale" for τ, a rank-0 tensor).
//   * Broadcasting: an input given in a shape that broadcasts to its full shape is read many times;
//     its gradient is the sum over the broadcast axes, shaped like the tensor given.
//   * An optional input that is absent (a default prior, S_0 = 0, ...) gets the gradient of L with
//     respect to that default, in the input's FULL shape (so a caller can always read it).
//   * Gates: with gate_space::log the input is g and α = e^g, so dL/dg = α dL/dα; with
//     gate_space::linear the input is α itself.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/models/options.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "kalman_oracle/tensor/validate.hpp"

namespace kalman_oracle {

/// An ordered set of tensors looked up by name: cotangents (by output name) and gradients (by
/// input name).
template <class T>
class named_tensors {
 public:
  named_tensors() = default;
  named_tensors(std::initializer_list<tensor<T>> items) : items_(items) {}

  /// Adds x under x.name(), replacing a tensor of the same name.
  void set(tensor<T> x) {
    for (auto& item : items_)
      if (item.name() == x.name()) {
        item = std::move(x);
        return;
      }
    items_.push_back(std::move(x));
  }
  const tensor<T>* find(std::string_view name) const {
    for (const auto& item : items_)
      if (item.name() == name) return &item;
    return nullptr;
  }
  tensor<T>* find(std::string_view name) {
    for (auto& item : items_)
      if (item.name() == name) return &item;
    return nullptr;
  }
  const tensor<T>& at(std::string_view name) const {
    if (const tensor<T>* x = find(name)) return *x;
    throw std::out_of_range("no tensor named '" + std::string(name) + "'");
  }
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  const std::vector<tensor<T>>& items() const { return items_; }
  std::vector<tensor<T>>& items() { return items_; }

 private:
  std::vector<tensor<T>> items_;
};

/// Cotangents of a model's outputs, by output name (missing: zero).
template <class T>
using cotangents = named_tensors<T>;
/// Gradients of the loss, by input name (the field names of the model's inputs struct).
template <class T>
using gradients = named_tensors<T>;

namespace detail::grad {

/// The cotangent of output `name` with the output's shape `shape`, or nullptr when none is given.
/// A given cotangent must have exactly that shape and be finite.
template <class T>
const tensor<T>* cotangent(const cotangents<T>& cot, const std::string& name, const shape_t& shape) {
  const tensor<T>* c = cot.find(name);
  if (c == nullptr) return nullptr;
  if (c->shape() != shape)
    throw input_error("cotangent " + name + ": shape " + to_string(c->shape()) + ", expected the output's shape " +
                      to_string(shape));
  require_finite(*c);
  return c;
}

/// Every cotangent names an output of the model (a misspelt name would silently be a zero).
template <class T>
void require_known_cotangents(const cotangents<T>& cot, std::initializer_list<std::string_view> outputs,
                              const std::string& model) {
  for (const auto& c : cot.items()) {
    bool known = false;
    for (std::string_view name : outputs) known = known || c.name() == name;
    if (!known) {
      std::ostringstream os;
      os << "cotangent " << c.name() << ": " << model << " has no output of that name; outputs:";
      for (std::string_view name : outputs) os << ' ' << name;
      throw input_error(os.str());
    }
  }
}

/// The cotangent's element, or zero.
template <class T, class... I>
T cotangent_at(const tensor<T>* c, I... index) {
  return c ? (*c)(index...) : T(0);
}

}  // namespace detail::grad

/// The former spelling of detail::grad, for properties/grad_*.cpp only: those files are being
/// rewritten in a change of their own, which switches them to detail::grad and removes this alias.
namespace grad_detail = detail::grad;

/// A gradient being accumulated for an input given in shape `given` and read through a broadcast
/// view of shape `full`: add(x, full index) adds x to the element that index reads, so broadcast
/// axes are summed (numpy's rule reversed). The result has the given shape and the given name.
template <class T>
class broadcast_accumulator {
 public:
  broadcast_accumulator(std::string name, const shape_t& given, const shape_t& full)
      : result_(std::move(name), given, T(0)), strides_(full.size(), 0) {
    if (given.size() > full.size())
      throw input_error(result_.name() + ": shape " + to_string(given) + " has more dimensions than " + to_string(full));
    const std::size_t pad = full.size() - given.size();
    std::size_t stride = 1;
    for (std::size_t axis = full.size(); axis-- > pad;) {
      const std::size_t have = given[axis - pad];
      if (have != full[axis] && have != 1)
        throw input_error(result_.name() + ": shape " + to_string(given) + " cannot broadcast to " + to_string(full));
      strides_[axis] = have == 1 ? 0 : stride;
      stride *= have;
    }
  }

  template <class... I>
  void add(const T& x, I... index) {
    static_assert(sizeof...(I) > 0);
    const std::size_t idx[] = {static_cast<std::size_t>(index)...};
    std::size_t off = 0;
    for (std::size_t axis = 0; axis < sizeof...(I); ++axis) off += idx[axis] * strides_[axis];
    // Broadcast axes are summed (planted bug grad_broadcast_overwrites: the last read wins).
    T& slot = result_.data()[off];
    slot = KALMAN_ORACLE_MUTANT(grad_broadcast_overwrites, T(slot + x), x);
  }

  tensor<T>& result() { return result_; }
  tensor<T> take() { return std::move(result_); }

 private:
  tensor<T> result_;
  std::vector<std::size_t> strides_;
};

/// dL/dg from dL/dα for a gate g as the model reads it: α = e^g (log gates) gives α dL/dα; a
/// linear gate is α itself. (Planted bug grad_log_gate_linear_branch: the linear rule applied to
/// log gates, i.e. differentiating through the wrong branch of the gate conversion.)
template <class T>
T gate_cotangent(const T& d_alpha, const T& alpha, gate_space gates) {
  if (KALMAN_ORACLE_MUTANT(grad_log_gate_linear_branch, gates == gate_space::log, false)) return alpha * d_alpha;
  return d_alpha;
}

// ---- The memory adjoint: one head of the generic delta rule ---------------------------------------
//
// Forward (models/delta_rule.hpp, fla's order), per token t, state S (K x V):
//     Ŝ_t = diag(α_t) S_{t−1}
//     S_t = Ŝ_t + w_t (v_t − Ŝ_tᵀ e_t)ᵀ      (erasing rules: e_t the erase key, w_t the write)
//     S_t = Ŝ_t + w_t v_tᵀ                   (GLA: no erase)
//     o_t = S_tᵀ (τ q_t)
// DeltaNet/GDN/KDA: e = k, w = β k; given gain (two-key rule, both KDNs): e = k, w = κ; GLA: w = k.
// Reverse (dS ← dS_T, then t = T..1), with res_t = v_t − Ŝ_tᵀ e_t:
//     dS   += τ q_t do_tᵀ ;  dq_t = τ S_t do_t ;  dτ += q_tᵀ S_t do_t
//     dw_t  = dS res_t ;  dres = dSᵀ w_t ;  dv_t = dres
//     dŜ    = dS − e_t dresᵀ ;  de_t = −Ŝ_t dres
//     dα_t,i = Σ_j dŜ_ij S_{t−1,ij} ;  dS ← diag(α_t) dŜ      (this is dS_{t−1})
// and dS_0 = dS at the end. The states S_t are recomputed forward first (stored: a reference).

template <class T>
struct memory_head {
  std::size_t tokens = 0, key_dim = 0, value_dim = 0;
  bool erases = true;
  T tau{1};
  // Per token, row-major [t * K + i] / [t * V + j]:
  std::vector<T> alpha, erase, write, value, query;  // α, e (unused without erase), w, v, q
  std::vector<T> initial_state;                      // S_0, K x V
};

template <class T>
struct memory_head_gradients {
  std::vector<T> alpha, erase, write, value, query;  // dL/d(each), same layout as memory_head
  std::vector<T> initial_state;                      // dL/dS_0
  T tau{0};
};

/// The memory adjoint of one head (see above). `d_output` is do [t * V + j] (empty: zero) and
/// `d_final_state` dS_T (K x V; empty: zero).
template <class T>
memory_head_gradients<T> memory_backward(const memory_head<T>& m, std::span<const T> d_output,
                                         std::span<const T> d_final_state) {
  const std::size_t N = m.tokens, K = m.key_dim, V = m.value_dim;
  // Forward, storing S_0..S_N and Ŝ_1..Ŝ_N and the residuals.
  std::vector<std::vector<T>> S(N + 1), S_hat(N), residual(N);
  S[0] = m.initial_state;
  for (std::size_t t = 0; t < N; ++t) {
    S_hat[t] = S[t];
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) S_hat[t][i * V + j] *= m.alpha[t * K + i];
    residual[t].assign(V, T(0));
    for (std::size_t j = 0; j < V; ++j) {
      T predicted(0);
      if (m.erases)
        for (std::size_t i = 0; i < K; ++i) predicted += S_hat[t][i * V + j] * m.erase[t * K + i];
      residual[t][j] = m.value[t * V + j] - predicted;
    }
    S[t + 1] = S_hat[t];
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) S[t + 1][i * V + j] += m.write[t * K + i] * residual[t][j];
  }

  memory_head_gradients<T> g;
  g.alpha.assign(N * K, T(0));
  g.erase.assign(N * K, T(0));
  g.write.assign(N * K, T(0));
  g.value.assign(N * V, T(0));
  g.query.assign(N * K, T(0));
  std::vector<T> dS(K * V, T(0));
  if (!d_final_state.empty())
    for (std::size_t x = 0; x < K * V; ++x) dS[x] = d_final_state[x];

  std::vector<T> d_res(V);
  for (std::size_t t = N; t-- > 0;) {
    const std::vector<T>& St = S[t + 1];
    // o_t = S_tᵀ (τ q_t).
    if (!d_output.empty()) {
      for (std::size_t i = 0; i < K; ++i) {
        T row(0);
        for (std::size_t j = 0; j < V; ++j) {
          const T& d_o = d_output[t * V + j];
          dS[i * V + j] += m.tau * m.query[t * K + i] * d_o;
          row += St[i * V + j] * d_o;
        }
        g.query[t * K + i] += m.tau * row;
        g.tau += m.query[t * K + i] * row;
      }
    }
    // S_t = Ŝ_t + w_t res_tᵀ, res_t = v_t − Ŝ_tᵀ e_t (GLA: res_t = v_t).
    for (std::size_t i = 0; i < K; ++i) {
      T dw(0);
      for (std::size_t j = 0; j < V; ++j) dw += dS[i * V + j] * residual[t][j];
      g.write[t * K + i] += dw;
    }
    for (std::size_t j = 0; j < V; ++j) {
      T r(0);
      for (std::size_t i = 0; i < K; ++i) r += dS[i * V + j] * m.write[t * K + i];
      d_res[j] = r;
      g.value[t * V + j] += r;
    }
    if (m.erases) {
      for (std::size_t i = 0; i < K; ++i) {
        T de(0);
        for (std::size_t j = 0; j < V; ++j) de += S_hat[t][i * V + j] * d_res[j];
        // de_t = −Ŝ_t dres (planted bug grad_memory_erase_sign: the sign flipped).
        g.erase[t * K + i] += KALMAN_ORACLE_MUTANT(grad_memory_erase_sign, T(-de), de);
        for (std::size_t j = 0; j < V; ++j) dS[i * V + j] -= m.erase[t * K + i] * d_res[j];  // dŜ = dS − e dresᵀ
      }
    }
    // Ŝ_t = diag(α_t) S_{t−1}: dα and dS_{t−1}.
    for (std::size_t i = 0; i < K; ++i) {
      T da(0);
      for (std::size_t j = 0; j < V; ++j) da += dS[i * V + j] * S[t][i * V + j];
      g.alpha[t * K + i] += da;
      for (std::size_t j = 0; j < V; ++j) dS[i * V + j] *= m.alpha[t * K + i];
    }
  }
  g.initial_state = std::move(dS);
  return g;
}

}  // namespace kalman_oracle
