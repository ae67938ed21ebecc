// The structured first-order bound of a chunk's pseudo-values (models/wy_pseudo_value_error_bound.hpp;
// docs/error-model.md, "Tensor-core tiers", "Inside a chunk"): for the errors of A it is the exact
// first-order worst case. For a random chunk (A strictly lower, 𝒯 = (I + A)⁻¹, X, Y, S, Ũ = 𝒯(Y − XS)
// in 256-bit MPFR) and a random output (x, j), A is perturbed by ΔA_tm = −η err(A)_tm sign(𝒯_xt Ũ_mj)
// (a perturbation the bound admits, η = 2⁻⁸⁰ the unit), the chunk recomputed exactly, and the change
// of Ũ_xj must equal η times the bound's share for A's errors (the bound with them minus the bound
// without them) to 2⁻⁴⁰ relative (the second-order terms, η² in size), and stay within η times the
// whole bound. A bound that forgets A's errors (the planted bug
// wy_pseudo_value_bound_drops_key_products) or takes them through the wrong factor fails the equality.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kalman_oracle/models/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "kalman_oracle/scalar/running_error.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;

namespace {

using R = running_error<mpfr_real>;
using matrix = std::vector<std::vector<mpfr_real>>;

/// (I + A)⁻¹ for a strictly lower A, by forward substitution (exact to the working precision).
matrix unit_lower_inverse(const matrix& A) {
  const std::size_t n = A.size();
  matrix inverse(n, std::vector<mpfr_real>(n, mpfr_real(0)));
  for (std::size_t j = 0; j < n; ++j) {
    inverse[j][j] = 1;
    for (std::size_t t = j + 1; t < n; ++t) {
      mpfr_real sum(0);
      for (std::size_t m = j; m < t; ++m) sum += A[t][m] * inverse[m][j];
      inverse[t][j] = -sum;
    }
  }
  return inverse;
}

/// 𝒯 Z (n x V).
matrix times(const matrix& Tm, const matrix& Z) {
  const std::size_t n = Tm.size(), V = Z.empty() ? 0 : Z[0].size();
  matrix out(n, std::vector<mpfr_real>(V, mpfr_real(0)));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t m = 0; m <= t; ++m)
      for (std::size_t j = 0; j < V; ++j) out[t][j] += Tm[t][m] * Z[m][j];
  return out;
}

/// The bound on Ũ (units of u) for the chunk whose A has the values `A` and the errors `a_error`,
/// the rest of Ũ's error taken as zero (the property looks at A's share only).
matrix pseudo_value_bound(const matrix& A, const matrix& a_error, const matrix& Tm, const matrix& X, const matrix& Y,
                          const std::vector<mpfr_real>& S, const matrix& U) {
  const std::size_t n = A.size(), V = Y[0].size();
  detail::fixed_gain::wy_chunk<R> c;
  c.n = n;
  const auto lift = [](const matrix& m) {
    std::vector<std::vector<R>> r(m.size());
    for (std::size_t i = 0; i < m.size(); ++i)
      for (const auto& x : m[i]) r[i].push_back(R(x));
    return r;
  };
  c.Tm = lift(Tm), c.X = lift(X), c.Y = lift(Y), c.U = lift(U), c.W = lift(times(Tm, X));
  std::vector<std::vector<R>> a(n, std::vector<R>(n));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t m = 0; m < n; ++m) a[t][m] = R(A[t][m], a_error[t][m]);
  std::vector<R> state(S.begin(), S.end());
  normwise_chunk_bound_scope structured;
  bound_pseudo_values(c, a, state, [&](const std::vector<std::vector<R>>&, std::vector<std::vector<R>>& W) {
    W.assign(n, std::vector<R>(X[0].size(), R(0)));
    return std::vector<std::vector<R>>(n, std::vector<R>(V, R(0)));
  });
  matrix bound(n, std::vector<mpfr_real>(V));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < V; ++j) bound[t][j] = c.U[t][j].error();
  return bound;
}

}  // namespace

TEST_SUITE("error_bound") {
  TEST_CASE("error_bound: the pseudo-value bound is the exact first-order worst case of A's errors") {
    check_property("wy_pseudo_value_bound_attained", [] {
      precision_scope precision(256);
      const std::size_t n = *rc::gen::inRange<std::size_t>(2, 40);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 6);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
      const double write = *rc::gen::element(0.05, 1.0, 2.0);  // β: weak to full writes
      std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
      std::uniform_real_distribution<double> unit(-1, 1), spread(0.5, 2);

      // A chunk of the β-form rules (A_tm = β_t k_tᵀ k_m, unit keys), arbitrary X, Y, S.
      matrix keys(n, std::vector<mpfr_real>(K)), X(n, std::vector<mpfr_real>(K)), Y(n, std::vector<mpfr_real>(V));
      std::vector<mpfr_real> beta(n), S(K * V);
      for (std::size_t t = 0; t < n; ++t) {
        mpfr_real norm(0);
        for (auto& k : keys[t]) k = unit(rng), norm += k * k;
        for (auto& k : keys[t]) k /= sqrt(norm);
        beta[t] = write * (unit(rng) + 1) / 2;
        for (auto& x : X[t]) x = unit(rng);
        for (auto& y : Y[t]) y = unit(rng);
      }
      for (auto& s : S) s = unit(rng);
      matrix A(n, std::vector<mpfr_real>(n, mpfr_real(0))), a_error = A, no_error = A;
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t m = 0; m < t; ++m) {
          mpfr_real dot(0), size(0);
          for (std::size_t i = 0; i < K; ++i) dot += keys[t][i] * keys[m][i], size += abs(keys[t][i] * keys[m][i]);
          A[t][m] = beta[t] * dot;
          a_error[t][m] = beta[t] * size * K * spread(rng);  // as a K-term dot product's
        }
      matrix Z(n, std::vector<mpfr_real>(V));
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t j = 0; j < V; ++j) {
          mpfr_real xs(0);
          for (std::size_t i = 0; i < K; ++i) xs += X[t][i] * S[i * V + j];
          Z[t][j] = Y[t][j] - xs;
        }
      const matrix Tm = unit_lower_inverse(A), U = times(Tm, Z);

      const matrix with_a = pseudo_value_bound(A, a_error, Tm, X, Y, S, U);
      const matrix without_a = pseudo_value_bound(A, no_error, Tm, X, Y, S, U);

      // The worst perturbation for output (x, j).
      const std::size_t x = *rc::gen::inRange<std::size_t>(1, n), j = *rc::gen::inRange<std::size_t>(0, V);
      const mpfr_real eta = ldexp(mpfr_real(1), -80);
      matrix perturbed = A;
      for (std::size_t t = 1; t < n; ++t)
        for (std::size_t m = 0; m < t; ++m) {
          const mpfr_real s = Tm[x][t] * U[m][j];
          perturbed[t][m] -= eta * a_error[t][m] * (s > 0 ? 1 : s < 0 ? -1 : 0);
        }
      const matrix moved = times(unit_lower_inverse(perturbed), Z);
      const mpfr_real change = abs(moved[x][j] - U[x][j]) / eta;
      const mpfr_real share = with_a[x][j] - without_a[x][j];
      RC_ASSERT(change <= with_a[x][j] * (1 + ldexp(mpfr_real(1), -40)));
      RC_ASSERT(abs(change - share) <= ldexp(mpfr_real(1), -40) * share + ldexp(mpfr_real(1), -200));
    });
  }
}
