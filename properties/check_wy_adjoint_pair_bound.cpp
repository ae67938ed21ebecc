// The chunked adjoint's bound on dA through dA = −dY Ũᵀ (grad/wy_chunk_adjoint_bound.hpp, (b);
// bound_key_pair_cotangent; docs/error-model.md, "The chunked binary32 tier", Gradients): it covers the
// exact first-order change of dA as the chunked backward forms it, dA = −𝒯ᵀ (dŨ Yᵀ + dW Xᵀ) 𝒯ᵀ with
// dW = −dŨ Sᵀ, when dŨ, the chunk-start state S and the inverse 𝒯 are perturbed.
//
// For a random chunk (A strictly lower from unit keys, 𝒯 = (I + A)⁻¹, X, Y, S, dŨ; 256-bit MPFR), the
// inputs are moved by η = 2⁻⁸⁰ times random perturbations: dŨ by δdŨ, S by δS, 𝒯 by 𝒯F (F strictly
// lower: the computed inverse's residual); each source is switched on or off at random, so that each is
// sometimes alone. dA is recomputed exactly from its own formula, and its change over η must stay within
// the bound given the errors that the backward hands it: dY = 𝒯ᵀdŨ with error |𝒯ᵀ δdŨ|, Ũ with error
// |𝒯FZ − W δS| (Z = Y − XS: how Ũ = 𝒯Z moves), the residual |F|, and no local rounding. Likewise dX = 𝒯ᵀdW
// (dW = −dŨ Sᵀ) within (c)'s bound (bound_key_cotangent), S with error |δS|. A bound that forgets dY's
// errors (the planted bug wy_adjoint_bound_drops_cotangent_error) fails when δdŨ acts alone.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kalman_oracle/grad/wy_chunk_adjoint_bound.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "kalman_oracle/scalar/running_error.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;

namespace {

using R = running_error<mpfr_real>;
using matrix = std::vector<std::vector<mpfr_real>>;

matrix zeros(std::size_t rows, std::size_t columns) {
  return matrix(rows, std::vector<mpfr_real>(columns, mpfr_real(0)));
}

/// a b (a: rows x inner, b: inner x columns).
matrix product(const matrix& a, const matrix& b) {
  matrix out = zeros(a.size(), b.empty() ? 0 : b[0].size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t l = 0; l < b.size(); ++l)
      for (std::size_t j = 0; j < out[i].size(); ++j) out[i][j] += a[i][l] * b[l][j];
  return out;
}

matrix transposed(const matrix& a) {
  matrix out = zeros(a.empty() ? 0 : a[0].size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) out[j][i] = a[i][j];
  return out;
}

matrix plus(const matrix& a, const matrix& b, const mpfr_real& scale) {
  matrix out = a;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) out[i][j] += scale * b[i][j];
  return out;
}

matrix absolute(const matrix& a) {
  matrix out = a;
  for (auto& row : out)
    for (auto& x : row) x = abs(x);
  return out;
}

/// dA as the chunked backward forms it (grad/fixed_gain_chunked.hpp, steps 3–5), every entry:
/// −𝒯ᵀ (dŨ Yᵀ + dW Xᵀ) 𝒯ᵀ with dW = −dŨ Sᵀ.
matrix pair_cotangent(const matrix& Tm, const matrix& dU, const matrix& S, const matrix& X, const matrix& Y) {
  const matrix dW = plus(zeros(dU.size(), S.size()), product(dU, transposed(S)), mpfr_real(-1));
  const matrix dTm = plus(product(dU, transposed(Y)), product(dW, transposed(X)), mpfr_real(1));
  return plus(zeros(Tm.size(), Tm.size()), product(product(transposed(Tm), dTm), transposed(Tm)), mpfr_real(-1));
}

/// dX as the chunked backward forms it (step 4): 𝒯ᵀ dW with dW = −dŨ Sᵀ.
matrix key_cotangent(const matrix& Tm, const matrix& dU, const matrix& S) {
  return plus(zeros(Tm.size(), S.size()), product(transposed(Tm), product(dU, transposed(S))), mpfr_real(-1));
}

/// A random n x m matrix with entries in [-1, 1] times `scale`.
matrix random_matrix(std::mt19937_64& rng, std::size_t rows, std::size_t columns, double scale) {
  std::uniform_real_distribution<double> unit(-1, 1);
  matrix out = zeros(rows, columns);
  for (auto& row : out)
    for (auto& x : row) x = scale * unit(rng);
  return out;
}

}  // namespace

TEST_SUITE("error_bound") {
  TEST_CASE("error_bound: the chunked adjoint's bounds on dA and dX cover their first-order change") {
    check_property("wy_adjoint_pair_bound_holds", [] {
      precision_scope precision(256);
      const std::size_t n = *rc::gen::inRange<std::size_t>(2, 24);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 6);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
      const double write = *rc::gen::element(0.05, 1.0, 2.0);  // β: weak to full writes
      // Which inputs move (each alone at times).
      const double cotangent_moves = *rc::gen::element(0.0, 1.0), state_moves = *rc::gen::element(0.0, 1.0),
                   inverse_moves = *rc::gen::element(0.0, 1.0);
      std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
      std::uniform_real_distribution<double> unit(-1, 1);

      // A of the β-form rules (A_tm = β_t k_tᵀ k_m, unit keys), 𝒯 = (I + A)⁻¹ by forward substitution.
      matrix keys = random_matrix(rng, n, K, 1.0), A = zeros(n, n), Tm = zeros(n, n);
      for (auto& k : keys) {
        mpfr_real norm(0);
        for (const auto& x : k) norm += x * x;
        for (auto& x : k) x /= sqrt(norm);
      }
      for (std::size_t t = 0; t < n; ++t) {
        const mpfr_real beta = write * (unit(rng) + 1) / 2;
        for (std::size_t m = 0; m < t; ++m)
          for (std::size_t i = 0; i < K; ++i) A[t][m] += beta * keys[t][i] * keys[m][i];
      }
      for (std::size_t j = 0; j < n; ++j) {
        Tm[j][j] = 1;
        for (std::size_t t = j + 1; t < n; ++t) {
          mpfr_real sum(0);
          for (std::size_t m = j; m < t; ++m) sum += A[t][m] * Tm[m][j];
          Tm[t][j] = -sum;
        }
      }
      const matrix X = random_matrix(rng, n, K, 1.0), Y = random_matrix(rng, n, V, 1.0);
      const matrix S = random_matrix(rng, K, V, 1.0), dU = random_matrix(rng, n, V, 1.0);
      const matrix Z = plus(Y, product(X, S), mpfr_real(-1)), U = product(Tm, Z), W = product(Tm, X);
      const matrix dY = product(transposed(Tm), dU);

      // The perturbations: δdŨ, δS, and F strictly lower (2²⁰ times larger than the values, so that dX's
      // local roundings, which its bound counts in units of u, are small beside their share).
      const double large = 0x1p20;
      const matrix d_cotangent = random_matrix(rng, n, V, large * cotangent_moves);
      const matrix d_state = random_matrix(rng, K, V, large * state_moves);
      matrix F = random_matrix(rng, n, n, large * inverse_moves);
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t m = t; m < n; ++m) F[t][m] = 0;

      // The exact change of dA over η.
      const mpfr_real eta = ldexp(mpfr_real(1), -80);
      const matrix before = pair_cotangent(Tm, dU, S, X, Y);
      const matrix after =
          pair_cotangent(plus(Tm, product(Tm, F), eta), plus(dU, d_cotangent, eta), plus(S, d_state, eta), X, Y);
      const matrix key_before = key_cotangent(Tm, dU, S);
      const matrix key_after =
          key_cotangent(plus(Tm, product(Tm, F), eta), plus(dU, d_cotangent, eta), plus(S, d_state, eta));

      // The bound, from the errors the backward hands it.
      const matrix dY_error = absolute(product(transposed(Tm), d_cotangent));
      const matrix U_error =
          absolute(plus(product(product(Tm, F), Z), product(W, d_state), mpfr_real(-1)));  // |𝒯FZ − WδS|
      detail::fixed_gain::wy_chunk<R> c;
      c.n = n;
      c.U.assign(n, std::vector<R>(V));
      c.inverse_residual.assign(n, std::vector<R>(n, R(0)));
      for (std::size_t t = 0; t < n; ++t) {
        for (std::size_t j = 0; j < V; ++j) c.U[t][j] = R(U[t][j], U_error[t][j]);
        for (std::size_t m = 0; m < n; ++m) c.inverse_residual[t][m] = R(mpfr_real(0), abs(F[t][m]));
      }
      std::vector<std::vector<R>> dY_bounded(n, std::vector<R>(V)), local(n, std::vector<R>(n, R(0)));
      std::vector<std::vector<R>> dA(n, std::vector<R>(n));
      for (std::size_t t = 0; t < n; ++t) {
        for (std::size_t j = 0; j < V; ++j) dY_bounded[t][j] = R(dY[t][j], dY_error[t][j]);
        for (std::size_t j = 0; j < n; ++j)
          dA[t][j] = R(before[t][j], mpfr_real(std::numeric_limits<double>::infinity()));
      }
      // dX's: dW = −dŨ Sᵀ exact, S with error |δS|.
      c.Tm.assign(n, std::vector<R>(n));
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t m = 0; m < n; ++m) c.Tm[t][m] = R(Tm[t][m]);
      const matrix dW = plus(zeros(n, K), product(dU, transposed(S)), mpfr_real(-1));
      std::vector<std::vector<R>> dW_exact(n, std::vector<R>(K)), dX(n, std::vector<R>(K));
      std::vector<R> S_bounded(K * V);
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t i = 0; i < K; ++i) {
          dW_exact[t][i] = R(dW[t][i]);
          dX[t][i] = R(key_before[t][i], mpfr_real(std::numeric_limits<double>::infinity()));
        }
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) S_bounded[i * V + j] = R(S[i][j], abs(d_state[i][j]));
      normwise_chunk_bound_scope structured;
      bound_key_pair_cotangent(c, local, dY_bounded, dA);
      bound_key_cotangent(c, dW_exact, dY_bounded, S_bounded, dX);

      for (std::size_t t = 1; t < n; ++t)
        for (std::size_t j = 0; j < t; ++j) {
          const mpfr_real change = abs(after[t][j] - before[t][j]) / eta;
          RC_ASSERT(change <= dA[t][j].error() * (1 + ldexp(mpfr_real(1), -40)) + ldexp(mpfr_real(1), -200));
        }
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t i = 0; i < K; ++i) {
          const mpfr_real change = abs(key_after[t][i] - key_before[t][i]) / eta;
          RC_ASSERT(change <= dX[t][i].error() * (1 + ldexp(mpfr_real(1), -40)) + ldexp(mpfr_real(1), -200));
        }
    });
  }
}
