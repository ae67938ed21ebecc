// The dense Kalman associative memory in moment form (docs/math.md §2): the exact Bayesian filter, the
// ground truth every other member of the family approximates.
//
// Per (batch b, head h), memory mean S (K x V, key rows, value columns) and covariance P (K x K,
// shared by the V columns). Per token t (docs/math.md §2, line by line):
//
//   predict   Ŝ_t = D_t S_{t-1}                  P̂_t = D_t P_{t-1} D_tᵀ + Ω_t
//   gain      s_t = k_tᵀ P̂_t k_t + r_t           κ_t = P̂_t k_t / s_t
//   update    S_t = Ŝ_t + κ_t (v_t - Ŝ_tᵀ k_t)ᵀ   P_t = P̂_t - (P̂_t k_t)(P̂_t k_t)ᵀ / s_t
//   read      o_t = S_tᵀ (τ q_t)                  (read after write, as fla)
//
// Covariance update form. P_t = P̂ - u uᵀ / s with u = P̂ k is algebraically equal to the spec's
// (I - κ kᵀ) P̂, because κ kᵀ P̂ = P̂ k kᵀ P̂ / s = u uᵀ / s (P̂ is symmetric); docs/math.md §2 allows any
// equal form. We choose it because (1) it is symmetric by construction: each P_ij, i <= j, is
// computed once and mirrored, so the computed P_t is bitwise symmetric in every arithmetic, as the
// exact one is, where (I - κ kᵀ) P̂ rounds its two triangles differently; (2) it costs O(K²) after u,
// against O(K³) for (I - κ kᵀ) P̂ and for Joseph's form. Joseph's form (I - κkᵀ) P̂ (I - κkᵀ)ᵀ + r κκᵀ
// keeps P positive semidefinite under rounding even for a wrong gain; at the reference's precisions
// (256 bits and up) and with the optimal gain that buys nothing. Likewise P̂_t = D P Dᵀ + Ω is
// computed in full and its upper triangle mirrored. Over rationals both choices change nothing: the
// exact values are symmetric.
//
// Inputs (token-major, fla order; every parameter may be given in any shape that broadcasts,
// numpy-style, to its full shape):
//   q, k [B, T, H, K]; v [B, T, H, V]                          (q, k, v: full shapes)
//   transition D_t: diagonal, alpha [B, T, H, K] (linear) or fla's log gates g (alpha = e^g), or
//                   full D [B, T, H, K, K];  absent: D = I (a static memory). Any finite entries:
//                   §2 allows any K x K transition (a decay in (0, 1] is the models' practice, not
//                   a condition of the filter), and log gates may be of either sign
//                   (models/gates.hpp, gate_range::any_finite).
//   process noise Ω_t: diagonal omega [B, T, H, K] >= 0, or full Omega [B, T, H, K, K] exactly
//                   symmetric positive semidefinite;  absent: Ω = 0
//   r [B, T, H] > 0 (observation noise)
//   initial_state S_0 [B, H, K, V] (absent: 0), initial_covariance P_0 [B, H, K, K] exactly
//                   symmetric positive definite (absent: I, the papers' c_0⁻¹ I with c_0 = 1)
//   scale τ (absent: 1/√K as in fla; exact types need K a perfect square or τ given)
// The last two axes of a full D, Ω or P_0 must be exactly K x K (a matrix is never broadcast
// within itself, so its symmetry can be checked on the tensor given).
//
// Outputs: o [B, T, H, V], final_state S_T [B, H, K, V], final_covariance P_T [B, H, K, K], per
// token s_t, the Mahalanobis term m_t = |v_t - Ŝ_tᵀ k_t|² / s_t, the readout variance
// τ² q_tᵀ P_t q_t, and for floating types the log marginal likelihood
// log N(v_t; Ŝ_tᵀ k_t, s_t I_V) = -(V log(2π s_t) + m_t) / 2 (exact types have no log: use s_t and
// m_t). Internals (run_options::internals): P̂_t, κ_t, P_t and S_t per token.
#pragma once

// Eigen must learn about the Boost number types before its own headers are read.
#include <Eigen/Core>
#include <boost/multiprecision/eigen.hpp>

#include <cmath>
#include <cstddef>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/models/options.hpp"
#include "kalman_oracle/models/query_scale.hpp"
#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/scalar/types.hpp"
#include "kalman_oracle/tensor/broadcast_view.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "kalman_oracle/tensor/validate.hpp"

namespace kalman_oracle {

template <class T>
using dense_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using dense_vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Whether a per-token matrix parameter is given by its diagonal or in full.
enum class dense_form { diagonal, full };

/// The transition D_t (docs/math.md §2): diagonal (decays alpha, or fla's log gates g, [B, T, H, K];
/// a last axis of 1 gives the scalar decay alpha_t I) or full [B, T, H, K, K].
template <class T>
struct dense_transition {
  dense_form form = dense_form::diagonal;
  gate_space space = gate_space::linear;  // diagonal form only
  tensor<T> values;

  static dense_transition diagonal(tensor<T> alpha_or_g, gate_space space = gate_space::linear) {
    return {dense_form::diagonal, space, std::move(alpha_or_g)};
  }
  static dense_transition full(tensor<T> d) { return {dense_form::full, gate_space::linear, std::move(d)}; }
};

/// The process noise Ω_t (docs/math.md §2): diagonal omega >= 0 [B, T, H, K] or full, exactly symmetric
/// positive semidefinite [B, T, H, K, K].
template <class T>
struct dense_process_noise {
  dense_form form = dense_form::diagonal;
  tensor<T> values;

  static dense_process_noise diagonal(tensor<T> omega) { return {dense_form::diagonal, std::move(omega)}; }
  static dense_process_noise full(tensor<T> omega) { return {dense_form::full, std::move(omega)}; }
};

template <class T>
struct dense_inputs {
  tensor<T> q;                                          // [B, T, H, K]
  tensor<T> k;                                          // [B, T, H, K]
  tensor<T> v;                                          // [B, T, H, V]
  std::optional<dense_transition<T>> transition;        // D_t; absent: I
  std::optional<dense_process_noise<T>> process_noise;  // Ω_t; absent: 0
  tensor<T> r;                                          // [B, T, H], > 0
  std::optional<tensor<T>> initial_state;               // S_0 [B, H, K, V]; absent: 0
  std::optional<tensor<T>> initial_covariance;          // P_0 [B, H, K, K]; absent: I
  std::optional<T> scale;                               // τ; absent: 1/√K
};

template <class T>
struct dense_outputs {
  tensor<T> o;                              // [B, T, H, V]
  tensor<T> final_state;                    // S_T [B, H, K, V]
  tensor<T> final_covariance;               // P_T [B, H, K, K]
  tensor<T> innovation_variance;            // s_t [B, T, H]
  tensor<T> mahalanobis;                    // |v_t - Ŝ_tᵀ k_t|² / s_t [B, T, H]
  tensor<T> readout_variance;               // τ² q_tᵀ P_t q_t [B, T, H]
  std::optional<tensor<T>> log_likelihood;  // log N(v_t; Ŝ_tᵀ k_t, s_t I_V) [B, T, H]; floating T only
  // Internals (run_options::internals):
  std::optional<tensor<T>> predicted_covariance;  // P̂_t [B, T, H, K, K]
  std::optional<tensor<T>> gain;                  // κ_t [B, T, H, K]
  std::optional<tensor<T>> covariance;            // P_t [B, T, H, K, K]
  std::optional<tensor<T>> state;                 // S_t [B, T, H, K, V]
};

namespace detail::dense {

using index = Eigen::Index;
inline index ix(std::size_t i) { return static_cast<index>(i); }

/// log(2π) in T (for the log marginal likelihood; floating types only).
template <class T>
T log_two_pi() {
  if constexpr (std::is_same_v<T, mpfr_real>) {
    mpfr_real pi;
    mpfr_const_pi(pi.backend().data(), MPFR_RNDN);
    return log(2 * pi);
  } else if constexpr (std::is_same_v<T, mpfi_interval>) {
    mpfi_interval pi;
    mpfi_const_pi(pi.backend().data());
    return log(2 * pi);
  } else {
    using std::log;
    return log(2 * std::numbers::pi_v<T>);
  }
}

/// Sign and identity tests that are safe for every scalar type. Boost's MPFI comparisons abort
/// (an exception inside a noexcept function) when two intervals overlap without being equal, so
/// for intervals these ask whether the property certainly holds; elsewhere they are the comparisons.
template <class T>
bool certainly_positive(const T& x) {
  if constexpr (scalar_traits<T>::is_interval)
    return mpfi_is_strictly_pos(x.backend().data()) > 0;
  else
    return x > 0;
}
template <class T>
bool certainly_negative(const T& x) {
  if constexpr (scalar_traits<T>::is_interval)
    return mpfi_is_strictly_neg(x.backend().data()) > 0;
  else
    return x < 0;
}
template <class T>
bool identical(const T& x, const T& y) {
  if constexpr (scalar_traits<T>::is_interval)
    return mpfr_equal_p(&x.backend().data()->left, &y.backend().data()->left) &&
           mpfr_equal_p(&x.backend().data()->right, &y.backend().data()->right);
  else
    return x == y;
}

/// The first failing pivot of the symmetric elimination A = L D Lᵀ (no pivoting, no square roots,
/// so exact over rationals). d_i = det(A[0..i]) / det(A[0..i-1]), so all d_i > 0 iff A is positive
/// definite (Sylvester). For semidefiniteness a zero pivot is allowed when the rest of its column
/// is zero (a PSD matrix with a zero diagonal entry has a zero row and column, and Schur
/// complements of PSD matrices are PSD). Returns (index, pivot) of the first violation.
template <class T>
std::optional<std::pair<std::size_t, T>> definiteness_violation(dense_matrix<T> a, bool semidefinite) {
  const index n = a.rows();
  for (index i = 0; i < n; ++i) {
    const T pivot = a(i, i);
    if (certainly_negative(pivot) || (!semidefinite && !certainly_positive(pivot)))
      return std::pair{static_cast<std::size_t>(i), pivot};
    if (!certainly_positive(pivot)) {  // semidefinite, zero pivot: its column below must vanish
      for (index j = i + 1; j < n; ++j)
        if (!identical(a(j, i), T(0))) return std::pair{static_cast<std::size_t>(i), pivot};
      continue;
    }
    for (index j = i + 1; j < n; ++j) {
      const T factor = a(j, i) / pivot;
      for (index l = i + 1; l < n; ++l) a(j, l) -= factor * a(i, l);
    }
  }
  return std::nullopt;
}

/// A B by the textbook loop, each sum in increasing index order. Every product of both forms goes
/// through these (not Eigen's product kernels, which pick blocked paths by size and type): the
/// reference reads as the formula, and the operation sequence is the same for every scalar type,
/// so an interval run (MPFI) encloses the point run (MPFR) at the same precision: a certified
/// running-error bound (tests/models/dense_test.cpp checks it). (With Eigen's product kernels, MPFI
/// runs at K = 7 gave NaN intervals.)
template <class T>
dense_matrix<T> multiply(const dense_matrix<T>& a, const dense_matrix<T>& b) {
  dense_matrix<T> c(a.rows(), b.cols());
  for (index i = 0; i < a.rows(); ++i)
    for (index j = 0; j < b.cols(); ++j) {
      T acc(0);
      for (index l = 0; l < a.cols(); ++l) acc += a(i, l) * b(l, j);
      c(i, j) = acc;
    }
  return c;
}
template <class T>
dense_vector<T> multiply(const dense_matrix<T>& a, const dense_vector<T>& x) {
  dense_vector<T> y(a.rows());
  for (index i = 0; i < a.rows(); ++i) {
    T acc(0);
    for (index l = 0; l < a.cols(); ++l) acc += a(i, l) * x(l);
    y(i) = acc;
  }
  return y;
}
template <class T>
dense_matrix<T> transpose(const dense_matrix<T>& a) {
  return a.transpose();
}
/// x yᵀ and x yᵀ / c (the rank-one terms of both forms).
template <class T>
dense_matrix<T> outer(const dense_vector<T>& x, const dense_vector<T>& y) {
  dense_matrix<T> m(x.size(), y.size());
  for (index i = 0; i < x.size(); ++i)
    for (index j = 0; j < y.size(); ++j) m(i, j) = x(i) * y(j);
  return m;
}
template <class T>
dense_matrix<T> outer(const dense_vector<T>& x, const dense_vector<T>& y, const T& c) {
  dense_matrix<T> m(x.size(), y.size());
  for (index i = 0; i < x.size(); ++i)
    for (index j = 0; j < y.size(); ++j) m(i, j) = x(i) * y(j) / c;
  return m;
}

/// Mirrors the upper triangle onto the lower one (the exact value is symmetric; see the top).
template <class T>
dense_matrix<T> symmetric_from_upper(dense_matrix<T> a) {
  for (index i = 0; i < a.rows(); ++i)
    for (index j = i + 1; j < a.cols(); ++j) a(j, i) = a(i, j);
  return a;
}

/// A required tensor that was never set (default-constructed) is reported by its role.
template <class T>
void require_present(const tensor<T>& x, const std::string& role) {
  if (x.shape().empty() && x.data().empty()) throw input_error(role + ": missing; rule: this input is required");
}

/// Every K x K matrix of a full-form tensor is exactly symmetric and positive (semi)definite.
template <class T>
void require_matrices(const tensor<T>& x, std::size_t key_dim, bool semidefinite, const std::string& what) {
  const std::size_t rank = x.rank();
  if (rank < 2 || x.dim(rank - 1) != key_dim || x.dim(rank - 2) != key_dim)
    throw input_error(x.name() + ": shape " + to_string(x.shape()) + ", expected its last two axes to be K x K = " +
                      std::to_string(key_dim) + " x " + std::to_string(key_dim));
  const std::size_t per = key_dim * key_dim;
  for (std::size_t m = 0; m * per < x.size(); ++m) {
    shape_t lead = x.index_of(m * per);
    lead.resize(rank - 2);
    const std::string where = x.name() + ": the matrix at " + to_string(lead);
    dense_matrix<T> a(ix(key_dim), ix(key_dim));
    for (std::size_t i = 0; i < key_dim; ++i)
      for (std::size_t j = 0; j < key_dim; ++j) a(ix(i), ix(j)) = x.data()[m * per + i * key_dim + j];
    for (std::size_t i = 0; i < key_dim; ++i)
      for (std::size_t j = i + 1; j < key_dim; ++j)
        if (!identical(a(ix(i), ix(j)), a(ix(j), ix(i)))) {
          std::ostringstream os;
          shape_t ij = lead, ji = lead;
          ij.push_back(i), ij.push_back(j), ji.push_back(j), ji.push_back(i);
          os << where << " is not symmetric: element " << to_string(ij) << " is " << a(ix(i), ix(j)) << " but element "
             << to_string(ji) << " is " << a(ix(j), ix(i)) << "; rule: " << what << " must be exactly symmetric";
          throw input_error(os.str());
        }
    if (const auto bad = definiteness_violation<T>(a, semidefinite)) {
      std::ostringstream os;
      const char* kind = semidefinite ? "semidefinite" : "definite";
      os << where << " is not positive " << kind << " (pivot " << bad->first << " of its LDL^T factorisation is "
         << bad->second << "); rule: " << what << " must be symmetric positive " << kind;
      throw input_error(os.str());
    }
  }
}

/// A validated problem: sizes, the query scale and broadcast views of every parameter, with the
/// per-token matrices and vectors the filters read. Every check of the inputs happens here, before
/// any arithmetic of the filter.
template <class T>
class problem {
 public:
  std::size_t batch = 0, tokens = 0, heads = 0, key_dim = 0, value_dim = 0;
  T tau;

  explicit problem(const dense_inputs<T>& in) : in_(&in) {
    require_present(in.q, "q");
    require_present(in.k, "k");
    require_present(in.v, "v");
    require_present(in.r, "r");
    if (in.q.rank() != 4)
      throw input_error(in.q.name() + ": shape " + to_string(in.q.shape()) + ", expected [B, T, H, K]");
    batch = in.q.dim(0), tokens = in.q.dim(1), heads = in.q.dim(2), key_dim = in.q.dim(3);
    require_tokens(in.q.name(), tokens);
    if (batch == 0 || heads == 0 || key_dim == 0)
      throw input_error(in.q.name() + ": shape " + to_string(in.q.shape()) + "; rule: B, H and K must be >= 1");
    require_shape(in.k, in.q.shape());
    if (in.v.rank() != 4 || in.v.dim(0) != batch || in.v.dim(1) != tokens || in.v.dim(2) != heads || in.v.dim(3) == 0)
      throw input_error(in.v.name() + ": shape " + to_string(in.v.shape()) + ", expected [" + std::to_string(batch) +
                        ", " + std::to_string(tokens) + ", " + std::to_string(heads) +
                        ", V] with V >= 1 (B, T, H of q)");
    value_dim = in.v.dim(3);

    require_finite(in.q);
    require_finite(in.k);
    require_finite(in.v);
    require_positive(in.r, "observation noise");
    r_.emplace(in.r, shape_t{batch, tokens, heads});

    if (in.transition) {
      const auto& d = *in.transition;
      if (d.form == dense_form::full) {
        require_finite(d.values);
        if (d.values.rank() < 2 || d.values.dim(d.values.rank() - 1) != key_dim ||
            d.values.dim(d.values.rank() - 2) != key_dim)
          throw input_error(d.values.name() + ": shape " + to_string(d.values.shape()) +
                            ", expected its last two axes to be K x K = " + std::to_string(key_dim) + " x " +
                            std::to_string(key_dim));
        transition_.emplace(d.values, shape_t{batch, tokens, heads, key_dim, key_dim});
      } else {
        // Any finite decay or log gate: §2 takes any transition (models/gates.hpp, the second range).
        require_gates(d.values, d.space, gate_range::any_finite);
        transition_.emplace(d.values, shape_t{batch, tokens, heads, key_dim});
      }
    }
    if (in.process_noise) {
      const auto& w = *in.process_noise;
      if (w.form == dense_form::full) {
        require_finite(w.values);
        require_matrices(w.values, key_dim, /*semidefinite=*/true, "process noise");
        noise_.emplace(w.values, shape_t{batch, tokens, heads, key_dim, key_dim});
      } else {
        require_nonnegative(w.values, "process noise");
        noise_.emplace(w.values, shape_t{batch, tokens, heads, key_dim});
      }
    }
    if (in.initial_state) {
      require_finite(*in.initial_state);
      state0_.emplace(*in.initial_state, shape_t{batch, heads, key_dim, value_dim});
    }
    if (in.initial_covariance) {
      require_finite(*in.initial_covariance);
      require_matrices(*in.initial_covariance, key_dim, /*semidefinite=*/false, "the prior covariance P_0");
      covariance0_.emplace(*in.initial_covariance, shape_t{batch, heads, key_dim, key_dim});
    }
    tau = query_scale(in.scale, key_dim);
  }

  dense_vector<T> query(std::size_t b, std::size_t t, std::size_t h) const { return row(in_->q, b, t, h); }
  dense_vector<T> key(std::size_t b, std::size_t t, std::size_t h) const { return row(in_->k, b, t, h); }
  dense_vector<T> value(std::size_t b, std::size_t t, std::size_t h) const { return row(in_->v, b, t, h); }
  const T& observation_noise(std::size_t b, std::size_t t, std::size_t h) const { return (*r_)(b, t, h); }

  /// D_t as a K x K matrix (diagonal forms give diag(alpha), with alpha = e^g for log gates).
  dense_matrix<T> transition(std::size_t b, std::size_t t, std::size_t h) const {
    const index n = ix(key_dim);
    if (!transition_) return dense_matrix<T>::Identity(n, n);
    dense_matrix<T> d = dense_matrix<T>::Zero(n, n);
    if (in_->transition->form == dense_form::full) {
      for (std::size_t i = 0; i < key_dim; ++i)
        for (std::size_t j = 0; j < key_dim; ++j) d(ix(i), ix(j)) = (*transition_)(b, t, h, i, j);
    } else {
      for (std::size_t i = 0; i < key_dim; ++i)
        d(ix(i), ix(i)) = decay_of_gate((*transition_)(b, t, h, i), in_->transition->space);
    }
    return d;
  }

  /// Ω_t as a K x K matrix.
  dense_matrix<T> process_noise(std::size_t b, std::size_t t, std::size_t h) const {
    const index n = ix(key_dim);
    dense_matrix<T> w = dense_matrix<T>::Zero(n, n);
    if (!noise_) return w;
    if (in_->process_noise->form == dense_form::full) {
      for (std::size_t i = 0; i < key_dim; ++i)
        for (std::size_t j = 0; j < key_dim; ++j) w(ix(i), ix(j)) = (*noise_)(b, t, h, i, j);
    } else {
      for (std::size_t i = 0; i < key_dim; ++i) w(ix(i), ix(i)) = (*noise_)(b, t, h, i);
    }
    return w;
  }

  dense_matrix<T> initial_state(std::size_t b, std::size_t h) const {
    dense_matrix<T> s = dense_matrix<T>::Zero(ix(key_dim), ix(value_dim));
    if (state0_)
      for (std::size_t i = 0; i < key_dim; ++i)
        for (std::size_t j = 0; j < value_dim; ++j) s(ix(i), ix(j)) = (*state0_)(b, h, i, j);
    return s;
  }

  dense_matrix<T> initial_covariance(std::size_t b, std::size_t h) const {
    const index n = ix(key_dim);
    if (!covariance0_) return dense_matrix<T>::Identity(n, n);
    dense_matrix<T> p(n, n);
    for (std::size_t i = 0; i < key_dim; ++i)
      for (std::size_t j = 0; j < key_dim; ++j) p(ix(i), ix(j)) = (*covariance0_)(b, h, i, j);
    return p;
  }

 private:
  static dense_vector<T> row(const tensor<T>& x, std::size_t b, std::size_t t, std::size_t h) {
    const std::size_t n = x.dim(3);
    dense_vector<T> out(ix(n));
    for (std::size_t i = 0; i < n; ++i) out(ix(i)) = x(b, t, h, i);
    return out;
  }

  const dense_inputs<T>* in_;
  std::optional<broadcast_view<T>> r_, transition_, noise_, state0_, covariance0_;
};

/// Output tensors of the right shapes, named as fla names them where it has a name.
template <class T, class Outputs>
void allocate_outputs(Outputs& out, const problem<T>& pb, bool internals) {
  const std::size_t B = pb.batch, L = pb.tokens, H = pb.heads, K = pb.key_dim, V = pb.value_dim;
  out.o = tensor<T>("o", {B, L, H, V});
  out.final_state = tensor<T>("final_state", {B, H, K, V});
  out.final_covariance = tensor<T>("final_covariance", {B, H, K, K});
  out.innovation_variance = tensor<T>("innovation_variance", {B, L, H});
  out.mahalanobis = tensor<T>("mahalanobis", {B, L, H});
  out.readout_variance = tensor<T>("readout_variance", {B, L, H});
  if constexpr (!scalar_traits<T>::is_exact) out.log_likelihood = tensor<T>("log_likelihood", {B, L, H});
  if (internals) {
    out.predicted_covariance = tensor<T>("predicted_covariance", {B, L, H, K, K});
    out.gain = tensor<T>("gain", {B, L, H, K});
    out.covariance = tensor<T>("covariance", {B, L, H, K, K});
    out.state = tensor<T>("state", {B, L, H, K, V});
  }
}

/// What both forms report per token, once they have S_t, P_t and the predicted quantities.
template <class T>
struct token_report {
  const dense_matrix<T>& predicted_covariance;  // P̂_t
  const dense_vector<T>& residual;              // v_t - Ŝ_tᵀ k_t
  const T& innovation_variance;                 // s_t
  const dense_vector<T>& gain;                  // κ_t
  const dense_matrix<T>& state;                 // S_t
  const dense_matrix<T>& covariance;            // P_t
};

/// Writes token t's outputs: o_t = S_tᵀ (τ q_t) (docs/math.md §2 read; `read_state` supplies S or, in a
/// planted bug, Ŝ), the readout variance (τq)ᵀ P_t (τq) = τ² qᵀ P_t q, s_t, the Mahalanobis term
/// and the log likelihood, and the internals.
template <class T, class Outputs>
void write_token(Outputs& out, const problem<T>& pb, std::size_t b, std::size_t t, std::size_t h,
                 const token_report<T>& rep, const dense_matrix<T>& read_state) {
  const std::size_t K = pb.key_dim, V = pb.value_dim;
  const dense_vector<T> q = pb.query(b, t, h);
  dense_vector<T> scaled_query(ix(K));
  for (std::size_t i = 0; i < K; ++i) scaled_query(ix(i)) = pb.tau * q(ix(i));
  for (std::size_t j = 0; j < V; ++j) {
    T o(0);
    for (std::size_t i = 0; i < K; ++i) o += read_state(ix(i), ix(j)) * scaled_query(ix(i));
    out.o(b, t, h, j) = o;
  }
  T variance(0);
  for (std::size_t i = 0; i < K; ++i) {
    T row(0);
    for (std::size_t j = 0; j < K; ++j) row += rep.covariance(ix(i), ix(j)) * scaled_query(ix(j));
    variance += scaled_query(ix(i)) * row;
  }
  out.readout_variance(b, t, h) = variance;
  T squared(0);
  for (std::size_t j = 0; j < V; ++j) squared += rep.residual(ix(j)) * rep.residual(ix(j));
  const T mahalanobis = squared / rep.innovation_variance;
  out.innovation_variance(b, t, h) = rep.innovation_variance;
  out.mahalanobis(b, t, h) = mahalanobis;
  if constexpr (!scalar_traits<T>::is_exact) {
    using std::log;
    const T value_count(static_cast<long>(V));
    (*out.log_likelihood)(b, t, h) =
        -(value_count * (log_two_pi<T>() + T(log(rep.innovation_variance))) + mahalanobis) / 2;
  }
  if (out.predicted_covariance) {
    for (std::size_t i = 0; i < K; ++i) {
      (*out.gain)(b, t, h, i) = rep.gain(ix(i));
      for (std::size_t j = 0; j < K; ++j) {
        (*out.predicted_covariance)(b, t, h, i, j) = rep.predicted_covariance(ix(i), ix(j));
        (*out.covariance)(b, t, h, i, j) = rep.covariance(ix(i), ix(j));
      }
      for (std::size_t j = 0; j < V; ++j) (*out.state)(b, t, h, i, j) = rep.state(ix(i), ix(j));
    }
  }
}

template <class T, class Outputs>
void write_final(Outputs& out, const problem<T>& pb, std::size_t b, std::size_t h, const dense_matrix<T>& state,
                 const dense_matrix<T>& covariance) {
  for (std::size_t i = 0; i < pb.key_dim; ++i) {
    for (std::size_t j = 0; j < pb.value_dim; ++j) out.final_state(b, h, i, j) = state(ix(i), ix(j));
    for (std::size_t j = 0; j < pb.key_dim; ++j) out.final_covariance(b, h, i, j) = covariance(ix(i), ix(j));
  }
}

/// v - Ŝᵀ k, the innovation (one column per value channel). The planted bug reads Ŝ with its index
/// order swapped (element (j, i) of a V x K layout of the same K*V numbers).
template <class T>
dense_vector<T> innovation(const dense_matrix<T>& predicted_state, const dense_vector<T>& k, const dense_vector<T>& v) {
  const index K = predicted_state.rows(), V = predicted_state.cols();
  dense_vector<T> e(V);
  for (index j = 0; j < V; ++j) {
    T predicted(0);
    for (index i = 0; i < K; ++i)
      // Eigen is column-major: (i, j) is data()[i + j K]; the bug takes data()[j + i V].
      predicted +=
          KALMAN_ORACLE_MUTANT(dense_transposed_state, predicted_state(i, j), predicted_state.data()[j + i * V]) * k(i);
    e(j) = v(j) - predicted;
  }
  return e;
}

}  // namespace detail::dense

/// The sequential reference of the dense Kalman associative memory (docs/math.md §2).
template <class T>
dense_outputs<T> dense_forward(const dense_inputs<T>& in, const run_options& options = {}) {
  using matrix = dense_matrix<T>;
  using vector = dense_vector<T>;
  using detail::dense::ix;
  using detail::dense::multiply;
  using detail::dense::outer;
  using detail::dense::transpose;
  const detail::dense::problem<T> pb(in);  // every input check, before any arithmetic
  dense_outputs<T> out;
  detail::dense::allocate_outputs(out, pb, options.internals);
  const std::size_t K = pb.key_dim;

  detail::parallel_for(pb.batch * pb.heads, options.threads, [&](std::size_t problem_index) {
    const std::size_t b = problem_index / pb.heads, h = problem_index % pb.heads;
    matrix S = pb.initial_state(b, h);
    matrix P = pb.initial_covariance(b, h);
    for (std::size_t t = 0; t < pb.tokens; ++t) {
      const matrix D = pb.transition(b, t, h);
      const matrix Omega = pb.process_noise(b, t, h);
      const vector k = pb.key(b, t, h);
      const vector v = pb.value(b, t, h);
      const T& r = pb.observation_noise(b, t, h);

      // predict: Ŝ_t = D_t S_{t-1}, P̂_t = D_t P_{t-1} D_tᵀ + Ω_t. (Planted bug: D applied after the
      // update instead, below.)
      const matrix S_hat = KALMAN_ORACLE_MUTANT(dense_decay_after_update, multiply(D, S), S);
      const matrix P_hat = detail::dense::symmetric_from_upper<T>(multiply(multiply(D, P), transpose(D)) + Omega);

      // gain: u = P̂_t k_t, s_t = k_tᵀ u + r_t (> 0: P̂_t is PSD and r_t > 0).
      const vector u = multiply(P_hat, k);
      T quadratic(0);
      for (std::size_t i = 0; i < K; ++i) quadratic += k(ix(i)) * u(ix(i));
      const T s = quadratic + r;

      // update: P_t = P̂_t - u uᵀ / s_t (= (I - κ kᵀ) P̂_t, see the top), bitwise symmetric.
      matrix P_new(ix(K), ix(K));
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = i; j < K; ++j) {
          P_new(ix(i), ix(j)) = P_hat(ix(i), ix(j)) - u(ix(i)) * u(ix(j)) / s;
          // (no self-assignment on the diagonal: Boost's MPFI backend resets a value assigned to itself)
          if (j != i) P_new(ix(j), ix(i)) = P_new(ix(i), ix(j));
        }
      // κ_t = P̂_t k_t / s_t, from the prediction (planted bug: from the posterior P_t).
      const vector kappa = KALMAN_ORACLE_MUTANT(dense_gain_after_write, vector(u / s), vector(multiply(P_new, k) / s));
      // S_t = Ŝ_t + κ_t (v_t - Ŝ_tᵀ k_t)ᵀ.
      const vector e = detail::dense::innovation<T>(S_hat, k, v);
      const matrix S_updated = S_hat + outer(kappa, e);
      const matrix S_new = KALMAN_ORACLE_MUTANT(dense_decay_after_update, S_updated, multiply(D, S_updated));

      // read after write: o_t = S_tᵀ (τ q_t) (planted bug: read Ŝ_t, before the write).
      const matrix& read = KALMAN_ORACLE_MUTANT(dense_read_before_write, S_new, S_hat);
      detail::dense::write_token(out, pb, b, t, h, detail::dense::token_report<T>{P_hat, e, s, kappa, S_new, P_new},
                                 read);
      S = S_new;
      P = P_new;
    }
    detail::dense::write_final(out, pb, b, h, S, P);
  });
  return out;
}

}  // namespace kalman_oracle
