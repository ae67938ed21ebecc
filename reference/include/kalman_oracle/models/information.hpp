// The dense Kalman associative memory in information form (docs/math.md §3): the same filter as
// models/dense.hpp, carried as the precision Y = P⁻¹ and the information matrix H = Y S.
//
// Per (batch b, head h), from Y_0 = P_0⁻¹, H_0 = Y_0 S_0, per token t (docs/math.md §3, line by line):
//
//   M_t = D_t Y_{t-1}⁻¹ D_tᵀ + Ω_t              (the predicted covariance P̂_t; must be invertible)
//   Ŷ_t = M_t⁻¹                                 Ĥ_t = Ŷ_t D_t Y_{t-1}⁻¹ H_{t-1}
//   Y_t = Ŷ_t + k_t k_tᵀ / r_t                   H_t = Ĥ_t + k_t v_tᵀ / r_t
//   S_t = Y_t⁻¹ H_t                              o_t = S_tᵀ (τ q_t)
//
// It takes the same inputs as dense_forward (information_inputs = dense_inputs) and reports the same
// outputs, each computed the information form's way: P_t = Y_t⁻¹; P̂_t = M_t; s_t = k_tᵀ M_t k_t + r_t;
// Ŝ_t = D_t Y_{t-1}⁻¹ H_{t-1} (= Ŷ_t⁻¹ Ĥ_t); the gain κ_t = Y_t⁻¹ k_t / r_t, which equals §2's
// P̂_t k_t / s_t (push-through identity: (P̂⁻¹ + k kᵀ/r)⁻¹ k / r = P̂ k / (kᵀ P̂ k + r)). It adds the
// final Y_T and H_T, and, with internals, Ŷ_t.
//
// Inverses. Every matrix inverted here is symmetric positive definite when the inputs are valid (Y_0
// because P_0 is; M_t ⪰ Ω_t is PSD and is PD iff invertible; Y_t ⪰ Ŷ_t). So the solver is Gaussian
// elimination without pivoting, which (a) is exact over rationals (no square root, unlike a
// Cholesky/LLT), (b) is backward stable for SPD matrices (the Schur complements stay SPD, growth
// factor 1; Higham, "Accuracy and Stability of Numerical Algorithms", §10.4), (c) tests positive
// definiteness on the way (pivot i = det of the leading (i+1) block / det of the leading i block,
// all > 0 iff PD), and (d) performs the same operation sequence whatever the values, so an interval
// run (MPFI) at the same precision encloses the point run (tests/models/dense_test.cpp checks it).
// A pivot that is not > 0 in T's arithmetic (exactly 0 over rationals) means M_t is singular:
// input_error names the token and the head. P_t = Y_t⁻¹ is formed once per token (the next token,
// the gain and the readout variance need it), and S_t = P_t H_t.
#pragma once

#include <optional>
#include <sstream>
#include <string>

#include "kalman_oracle/models/dense.hpp"

namespace kalman_oracle {

template <class T>
using information_inputs = dense_inputs<T>;

template <class T>
struct information_outputs : dense_outputs<T> {
  tensor<T> final_precision;                     // Y_T [B, H, K, K]
  tensor<T> final_information;                   // H_T [B, H, K, V]
  std::optional<tensor<T>> predicted_precision;  // Ŷ_t [B, T, H, K, K] (internals)
};

namespace detail::information {

using detail::dense::index;

/// X with A X = B, by Gaussian elimination without pivoting; nullopt when a pivot is not > 0,
/// i.e. A is not positive definite (for symmetric A: singular or indefinite), or, for intervals,
/// when a pivot is not certainly > 0. See the top.
template <class T>
std::optional<dense_matrix<T>> spd_solve(dense_matrix<T> a, dense_matrix<T> rhs) {
  const index n = a.rows(), m = rhs.cols();
  for (index i = 0; i < n; ++i) {
    const T& pivot = a(i, i);
    if (!detail::dense::certainly_positive(pivot)) return std::nullopt;
    for (index row = i + 1; row < n; ++row) {
      const T factor = a(row, i) / pivot;
      for (index col = i + 1; col < n; ++col) a(row, col) -= factor * a(i, col);
      for (index col = 0; col < m; ++col) rhs(row, col) -= factor * rhs(i, col);
    }
  }
  dense_matrix<T> x(n, m);
  for (index i = n; i-- > 0;)
    for (index col = 0; col < m; ++col) {
      T acc = rhs(i, col);
      for (index j = i + 1; j < n; ++j) acc -= a(i, j) * x(j, col);
      x(i, col) = acc / a(i, i);
    }
  return x;
}

/// A⁻¹ for symmetric positive definite A (nullopt otherwise).
template <class T>
std::optional<dense_matrix<T>> spd_inverse(const dense_matrix<T>& a) {
  return spd_solve<T>(a, dense_matrix<T>::Identity(a.rows(), a.cols()));
}

[[noreturn]] inline void throw_singular(const std::string& what, std::size_t b, std::size_t t, std::size_t h,
                                        const std::string& rule) {
  std::ostringstream os;
  os << "information: " << what << " is singular (not positive definite) at token " << t << " of [b, h] = [" << b
     << ", " << h << "]; rule: " << rule;
  throw input_error(os.str());
}

}  // namespace detail::information

/// The sequential reference of the dense filter in information form (docs/math.md §3).
template <class T>
information_outputs<T> information_forward(const information_inputs<T>& in, const run_options& options = {}) {
  using matrix = dense_matrix<T>;
  using vector = dense_vector<T>;
  using detail::dense::ix;
  using detail::dense::multiply;
  using detail::dense::outer;
  using detail::dense::transpose;
  using detail::information::spd_inverse;
  const detail::dense::problem<T> pb(in);  // the same checks as dense_forward
  information_outputs<T> out;
  detail::dense::allocate_outputs(out, pb, options.internals);
  const std::size_t B = pb.batch, L = pb.tokens, H = pb.heads, K = pb.key_dim, V = pb.value_dim;
  out.final_precision = tensor<T>("final_precision", {B, H, K, K});
  out.final_information = tensor<T>("final_information", {B, H, K, V});
  if (options.internals) out.predicted_precision = tensor<T>("predicted_precision", {B, L, H, K, K});

  detail::parallel_for(B * H, options.threads, [&](std::size_t problem_index) {
    const std::size_t b = problem_index / H, h = problem_index % H;
    // Y_0 = P_0⁻¹ (P_0 was checked positive definite; in floating point the elimination may still
    // fail for a P_0 singular to working precision), H_0 = Y_0 S_0.
    const auto prior_precision = spd_inverse<T>(pb.initial_covariance(b, h));
    if (!prior_precision)
      detail::information::throw_singular("the prior covariance P_0", b, 0, h,
                                          "the information form needs P_0 invertible (docs/math.md §3)");
    matrix Y = *prior_precision;
    matrix H_info = multiply(Y, pb.initial_state(b, h));
    // Y_{t-1}⁻¹, carried from the previous token (Y_0⁻¹ is recomputed from Y_0, not taken from P_0:
    // the state of this form is (Y, H)).
    auto covariance = spd_inverse<T>(Y);
    if (!covariance)
      detail::information::throw_singular("the prior precision Y_0", b, 0, h,
                                          "the information form needs P_0 invertible (docs/math.md §3)");
    matrix P_prev = *covariance;
    for (std::size_t t = 0; t < L; ++t) {
      const matrix D = pb.transition(b, t, h);
      const matrix Omega = pb.process_noise(b, t, h);
      const vector k = pb.key(b, t, h);
      const vector v = pb.value(b, t, h);
      const T& r = pb.observation_noise(b, t, h);

      // M_t = D Y⁻¹ Dᵀ + Ω (planted bug: Ω dropped), Ŷ_t = M_t⁻¹.
      const matrix M = multiply(multiply(D, P_prev), transpose(D)) +
                       KALMAN_ORACLE_MUTANT(information_missing_noise, Omega, matrix(matrix::Zero(ix(K), ix(K))));
      const auto Y_hat = spd_inverse<T>(M);
      if (!Y_hat)
        detail::information::throw_singular("D_t Y_{t-1}^-1 D_t^T + Omega_t", b, t, h,
                                            "the information form needs the predicted covariance invertible "
                                            "(docs/math.md §3)");
      // Ĥ_t = Ŷ_t D Y⁻¹ H, via the predicted mean Ŝ_t = D Y⁻¹ H.
      const matrix S_hat = multiply(D, multiply(P_prev, H_info));
      const matrix H_hat = multiply(*Y_hat, S_hat);
      // Y_t = Ŷ_t + k kᵀ / r, H_t = Ĥ_t + k vᵀ / r.
      Y = *Y_hat + outer(k, k, r);
      H_info = H_hat + outer(k, v, r);
      covariance = spd_inverse<T>(Y);
      if (!covariance)
        detail::information::throw_singular("the posterior precision Y_t", b, t, h,
                                            "Y_t must stay positive definite (docs/math.md §3)");
      const matrix& P = *covariance;
      // S_t = Y_t⁻¹ H_t.
      const matrix S = multiply(P, H_info);

      // The per-token reports, in the information form's own terms (see the top).
      T quadratic(0);
      const vector Mk = multiply(M, k);
      for (std::size_t i = 0; i < K; ++i) quadratic += k(ix(i)) * Mk(ix(i));
      const T s = quadratic + r;
      const vector e = detail::dense::innovation<T>(S_hat, k, v);
      const vector kappa = multiply(P, k) / r;
      detail::dense::write_token(out, pb, b, t, h, detail::dense::token_report<T>{M, e, s, kappa, S, P}, S);
      if (out.predicted_precision)
        for (std::size_t i = 0; i < K; ++i)
          for (std::size_t j = 0; j < K; ++j) (*out.predicted_precision)(b, t, h, i, j) = (*Y_hat)(ix(i), ix(j));
      P_prev = P;
      if (t + 1 == L) detail::dense::write_final(out, pb, b, h, S, P);
    }
    for (std::size_t i = 0; i < K; ++i) {
      for (std::size_t j = 0; j < K; ++j) out.final_precision(b, h, i, j) = Y(ix(i), ix(j));
      for (std::size_t j = 0; j < V; ++j) out.final_information(b, h, i, j) = H_info(ix(i), ix(j));
    }
  });
  return out;
}

}  // namespace kalman_oracle
