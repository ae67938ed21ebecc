// Kalman Linear Attention (KLA), docs/math.md §6: the sequential reference.
//
// No heads. Per batch row, M channels and a state of size S; every element (m, s) is an
// independent scalar Kalman filter in information form, observing
//     v_{t,m} = k_{t,s} x_{t,m,s} + noise(1 / Lambda_{t,m}),    x_{t,m,s} = ā x_{t-1,m,s} + noise(p̄),
// with precision lambda = 1 / P and information mean eta = lambda x̂. Per element and token
// (docs/math.md §6, line by line):
//     phi_t = Lambda_{t,m} k_{t,s}^2 ;      rho_t = v_{t,m} Lambda_{t,m} k_{t,s}
//     den_t = ā^2 + p̄ lambda_{t-1}
//     lambda_t = lambda_{t-1} / den_t + phi_t
//     alpha_t = ā / den_t ;   eta_t = alpha_t eta_{t-1} + rho_t
//     y_{t,m} = sum_s q_{t,s} eta_t / lambda_t ;   y_var_{t,m} = sum_s q_{t,s}^2 / lambda_t
// The readout uses the posterior of token t (read after write). KLA has no query scale.
//
// Shapes (token-major, docs/math.md conventions): q, k [B, T, S]; v [B, T, M]; Lambda broadcast to
// [B, T, M]; ā (a_bar) and p̄ (p_bar) broadcast to [B, T, M, S] (static [M, S] in the original
// model); lambda_0, eta_0 broadcast to [B, M, S] (defaults 1 and 0, as in the paper). Outputs
// y, y_var [B, T, M]; final_lambda, final_eta [B, M, S]; with run_options.internals, lambda and
// eta for every token [B, T, M, S].
//
// The parallel (scan) form a kernel follows is models/kla_parallel.hpp; over exact arithmetic it
// equals this reference exactly (properties/models_kla_laws.cpp).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kalman_oracle/algebra/ou_discretisation.hpp"
#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/options.hpp"
#include "kalman_oracle/tensor/broadcast_view.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "kalman_oracle/tensor/validate.hpp"

namespace kalman_oracle {

/// KLA inputs. Error messages name each tensor by its own name(); give them the names below.
template <class T>
struct kla_inputs {
  tensor<T> q;                        // "q"      [B, T, S] query, shared by every channel
  tensor<T> k;                        // "k"      [B, T, S] key, shared by every channel
  tensor<T> v;                        // "v"      [B, T, M] value
  tensor<T> Lambda;                   // "Lambda" value precision, broadcast to [B, T, M]; > 0
  tensor<T> a_bar;                    // "a_bar"  decay ā, broadcast to [B, T, M, S]; in (0, 1]
  tensor<T> p_bar;                    // "p_bar"  process noise p̄, broadcast to [B, T, M, S]; >= 0
  std::optional<tensor<T>> lambda_0;  // "lambda_0" prior precision, broadcast to [B, M, S]; > 0 (default 1)
  std::optional<tensor<T>> eta_0;     // "eta_0"    prior information mean, broadcast to [B, M, S] (default 0)
};

template <class T>
struct kla_outputs {
  tensor<T> y;                      // "y"            [B, T, M]  sum_s q eta_t / lambda_t
  tensor<T> y_var;                  // "y_var"        [B, T, M]  sum_s q^2 / lambda_t
  tensor<T> final_lambda;           // "final_lambda" [B, M, S]  lambda_T
  tensor<T> final_eta;              // "final_eta"    [B, M, S]  eta_T
  std::optional<tensor<T>> lambda;  // "lambda" [B, T, M, S], with run_options.internals
  std::optional<tensor<T>> eta;     // "eta"    [B, T, M, S], with run_options.internals
};

namespace detail {

struct kla_dims {
  std::size_t batch, tokens, channels, state;  // B, T, M, S
};

/// B, T, S from k; M from v; q must match k. Shapes only (values are checked afterwards).
template <class T>
kla_dims kla_check_dims(const kla_inputs<T>& in) {
  const tensor<T>& k = in.k;
  if (k.rank() != 3) throw input_error(k.name() + ": shape " + to_string(k.shape()) + ", expected [B, T, S] (rank 3)");
  const std::size_t batch = k.dim(0), tokens = k.dim(1), state = k.dim(2);
  require_tokens(k.name(), tokens);
  if (state == 0) throw input_error(k.name() + ": S = 0; rule: the state size S must be >= 1");
  require_shape(in.q, {batch, tokens, state});
  const tensor<T>& v = in.v;
  if (v.rank() != 3 || v.dim(0) != batch || v.dim(1) != tokens)
    throw input_error(v.name() + ": shape " + to_string(v.shape()) + ", expected [" + std::to_string(batch) + ", " +
                      std::to_string(tokens) + ", M] (B and T of k)");
  if (v.dim(2) == 0) throw input_error(v.name() + ": M = 0; rule: the channel count M must be >= 1");
  return {batch, tokens, v.dim(2), state};
}

/// The inputs, validated, with every parameter read through a broadcast view. Holds the default
/// prior tensors the views may point to, so it is neither copied nor moved.
template <class T>
class kla_checked_inputs {
 public:
  explicit kla_checked_inputs(const kla_inputs<T>& in)
      : dims(kla_check_dims(in)),
        default_lambda_0_("lambda_0", {1}, T(1)),  // the paper's prior: lambda_0 = 1
        default_eta_0_("eta_0", {1}, T(0)),        // and eta_0 = 0
        q(in.q),
        k(in.k),
        v(in.v),
        Lambda(in.Lambda, {dims.batch, dims.tokens, dims.channels}),
        a_bar(in.a_bar, {dims.batch, dims.tokens, dims.channels, dims.state}),
        p_bar(in.p_bar, {dims.batch, dims.tokens, dims.channels, dims.state}),
        lambda_0(in.lambda_0 ? *in.lambda_0 : default_lambda_0_, {dims.batch, dims.channels, dims.state}),
        eta_0(in.eta_0 ? *in.eta_0 : default_eta_0_, {dims.batch, dims.channels, dims.state}) {
    // Values, in the order of the struct. Each check reports the first bad element by its index in
    // the tensor as given (before broadcasting).
    require_finite(in.q);
    require_finite(in.k);
    require_finite(in.v);
    require_positive(in.Lambda, "value precision Lambda");
    require_each(
        in.a_bar, [](const T& a) { return a > 0 && a <= 1; }, "decay a_bar must be in (0, 1]");
    require_nonnegative(in.p_bar, "process noise p_bar");
    if (in.lambda_0) require_positive(*in.lambda_0, "prior precision lambda_0");
    if (in.eta_0) require_finite(*in.eta_0);
  }
  kla_checked_inputs(const kla_checked_inputs&) = delete;
  kla_checked_inputs& operator=(const kla_checked_inputs&) = delete;

  kla_dims dims;

 private:
  tensor<T> default_lambda_0_, default_eta_0_;

 public:
  const tensor<T>& q;
  const tensor<T>& k;
  const tensor<T>& v;
  broadcast_view<T> Lambda, a_bar, p_bar, lambda_0, eta_0;
};

/// The outputs, allocated and named.
template <class T>
kla_outputs<T> kla_allocate_outputs(const kla_dims& d, bool internals) {
  kla_outputs<T> out{tensor<T>("y", {d.batch, d.tokens, d.channels}),
                     tensor<T>("y_var", {d.batch, d.tokens, d.channels}),
                     tensor<T>("final_lambda", {d.batch, d.channels, d.state}),
                     tensor<T>("final_eta", {d.batch, d.channels, d.state}),
                     std::nullopt,
                     std::nullopt};
  if (internals) {
    out.lambda.emplace("lambda", shape_t{d.batch, d.tokens, d.channels, d.state});
    out.eta.emplace("eta", shape_t{d.batch, d.tokens, d.channels, d.state});
  }
  return out;
}

}  // namespace detail

/// The sequential reference of docs/math.md §6. Validates every input first (input_error naming the
/// tensor, the element and the rule), then runs the batch rows in parallel (bit-identical for
/// any thread count: each row writes only its own slices).
template <class T>
kla_outputs<T> kla_forward(const kla_inputs<T>& inputs, const run_options& options = {}) {
  const detail::kla_checked_inputs<T> in(inputs);
  const std::size_t B = in.dims.batch, TT = in.dims.tokens, M = in.dims.channels, S = in.dims.state;
  kla_outputs<T> out = detail::kla_allocate_outputs<T>(in.dims, options.internals);

  detail::parallel_for(B, options.threads, [&](std::size_t b) {
    // The filter state of every element (m, s) of this batch row, starting from the prior.
    std::vector<T> lambda(M * S), eta(M * S);
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t s = 0; s < S; ++s) {
        lambda[m * S + s] = in.lambda_0(b, m, s);
        eta[m * S + s] = in.eta_0(b, m, s);
      }
    for (std::size_t t = 0; t < TT; ++t) {
      for (std::size_t m = 0; m < M; ++m) {
        T y(0), y_var(0);
        for (std::size_t s = 0; s < S; ++s) {
          const T& a = in.a_bar(b, t, m, s);
          const T& p = in.p_bar(b, t, m, s);
          const T& key = in.k(b, t, s);
          const T& query = in.q(b, t, s);
          const T& precision = in.Lambda(b, t, m);
          T& lambda_ms = lambda[m * S + s];
          T& eta_ms = eta[m * S + s];
          const T lambda_prev = lambda_ms, eta_prev = eta_ms;

          const T phi = precision * key * key;            // φ_t = Λ_{t,m} k_{t,s}²
          const T rho = in.v(b, t, m) * precision * key;  // ρ_t = v_{t,m} Λ_{t,m} k_{t,s}
          // den_t = ā² + p̄ λ_{t-1}: the predicted variance ā²/λ_{t-1} + p̄, times λ_{t-1}.
          const T den = KALMAN_ORACLE_MUTANT(kla_precision_decay_not_squared, a * a, a) + p * lambda_prev;
          lambda_ms = lambda_prev / den + phi;  // λ_t = λ_{t-1} / den_t + φ_t
          // α_t = ā / den_t: the decay of the information mean uses the *previous* precision.
          const T alpha = KALMAN_ORACLE_MUTANT(kla_mean_decay_wrong_time, a / den, a / (a * a + p * lambda_ms));
          eta_ms = alpha * eta_prev + rho;  // η_t = α_t η_{t-1} + ρ_t

          // Read after write: the posterior mean of token t is η_t / λ_t, its variance 1 / λ_t.
          y += KALMAN_ORACLE_MUTANT(kla_read_before_write, query * eta_ms / lambda_ms, query * eta_prev / lambda_prev);
          y_var += KALMAN_ORACLE_MUTANT(kla_yvar_missing_square, query * query / lambda_ms, query / lambda_ms);
          if (options.internals) {
            (*out.lambda)(b, t, m, s) = lambda_ms;
            (*out.eta)(b, t, m, s) = eta_ms;
          }
        }
        out.y(b, t, m) = y;
        out.y_var(b, t, m) = y_var;
      }
    }
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t s = 0; s < S; ++s) {
        out.final_lambda(b, m, s) = lambda[m * S + s];
        out.final_eta(b, m, s) = eta[m * S + s];
      }
  });
  return out;
}

// ---- Optional: ā and p̄ from the Ornstein–Uhlenbeck prior (docs/math.md §6) ------------------------

enum class kla_ou_variant {
  exact,            // p̄ = p (-expm1(2 a Delta)) / (2 |a|)  (p Delta at a = 0)
  zero_order_hold,  // p̄ = p Delta
};

template <class T>
struct kla_ou_parameters {
  tensor<T> a_bar;  // "a_bar"
  tensor<T> p_bar;  // "p_bar"
};

namespace detail {
/// numpy's broadcast shape of several shapes, or input_error naming the first tensor that clashes.
template <class T>
shape_t kla_broadcast_shape(std::initializer_list<const tensor<T>*> xs) {
  shape_t out;
  for (const tensor<T>* x : xs) {
    const shape_t& s = x->shape();
    if (s.size() > out.size()) out.insert(out.begin(), s.size() - out.size(), 1);
    const std::size_t pad = out.size() - s.size();
    for (std::size_t axis = 0; axis < s.size(); ++axis) {
      std::size_t& have = out[pad + axis];
      if (s[axis] == have || s[axis] == 1) continue;
      if (have != 1)
        throw input_error(x->name() + ": shape " + to_string(s) + " cannot broadcast with the other OU parameters " +
                          "(its dimension " + std::to_string(axis) + " is " + std::to_string(s[axis]) +
                          ", the others have " + std::to_string(have) + ")");
      have = s[axis];
    }
  }
  return out;
}

/// The element of x that a full index into the broadcast shape reads (numpy rules: x's shape is
/// padded with 1s on the left, and size-1 axes repeat).
template <class T>
const T& kla_broadcast_element(const tensor<T>& x, const shape_t& full_index) {
  const shape_t& s = x.shape();
  const std::size_t pad = full_index.size() - s.size();
  std::size_t offset = 0;
  for (std::size_t axis = 0; axis < s.size(); ++axis)
    offset = offset * s[axis] + (s[axis] == 1 ? 0 : full_index[pad + axis]);
  return x.data()[offset];
}
}  // namespace detail

/// ā = exp(a Delta) and p̄ (algebra/ou_discretisation.hpp) for every element of the broadcast of
/// the rate a (<= 0), the step Delta (> 0) and the diffusion p (>= 0), e.g. a [M, S] with a
/// per-token Delta [B, T, 1, 1]. Floating types only (exp, expm1).
template <class T>
kla_ou_parameters<T> kla_ou_discretise(const tensor<T>& rate, const tensor<T>& step, const tensor<T>& diffusion,
                                       kla_ou_variant variant = kla_ou_variant::exact) {
  require_each(
      rate, [](const T& a) { return a <= 0; }, "OU rate a must be <= 0");
  require_positive(step, "OU step Delta");
  require_nonnegative(diffusion, "OU diffusion p");
  const shape_t shape = detail::kla_broadcast_shape<T>({&rate, &step, &diffusion});
  kla_ou_parameters<T> out{tensor<T>("a_bar", shape), tensor<T>("p_bar", shape)};
  for (std::size_t flat = 0; flat < out.a_bar.size(); ++flat) {
    const shape_t index = out.a_bar.index_of(flat);
    const T& a = detail::kla_broadcast_element(rate, index);
    const T& delta = detail::kla_broadcast_element(step, index);
    const T& p = detail::kla_broadcast_element(diffusion, index);
    const ou_step<T> discrete =
        variant == kla_ou_variant::exact ? ou_discretise(a, delta, p) : ou_discretise_zero_order_hold(a, delta, p);
    out.a_bar.data()[flat] = discrete.decay;
    out.p_bar.data()[flat] = discrete.process_noise;
  }
  return out;
}

}  // namespace kalman_oracle
