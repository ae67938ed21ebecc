// The chunked WY form's first-order error bound for the pseudo-values Ũ = 𝒯Y − (𝒯X)S of one chunk,
// with the errors of the triangular inverse 𝒯 = (I + A)⁻¹ taken through 𝒯 itself instead of entry by
// entry (docs/error-model.md, "Tensor-core tiers", "Inside a chunk").
//
// Why. Over running_error the forward substitution 𝒯_tj = −Σ_m A_tm 𝒯_mj carries its errors through
// |A|: err(𝒯_t) <= Σ_m |A_tm| err(𝒯_m) + …, which grows like Π (1 + Σ_m |A_tm|), up to 10¹⁸ in a chunk
// of 64 keys without decay, although 𝒯 itself stays bounded (the delta rule is non-expansive). And Ũ
// then takes 𝒯's errors through U = 𝒯Y and W S = (𝒯X)S apart, losing their cancellation in
// 𝒯(Y − XS). The exact identity instead: the computed 𝒯̂ satisfies (I + Â)𝒯̂ = I + ε, ε the forward
// substitution's own roundings (strictly lower; the diagonal is 1 exactly) and Â = A + ΔA the
// computed A (its roundings and operand roundings), so (I + A)(𝒯̂ − 𝒯) = ε − ΔA 𝒯̂ and, with
// Z = Y − X S and Ũ = 𝒯Z (to first order 𝒯̂Z),
//     (𝒯̂ − 𝒯) Z = 𝒯 (ε Z − ΔA Ũ),    |(𝒯̂ − 𝒯) Z| <= |𝒯| (|ε| |Z| + err(A) |Ũ|)    (entrywise).
// For the error of A alone the right-hand side is the exact first-order worst case: for output
// (x, j) the perturbation ΔA_tm = −err(A)_tm sign(𝒯_xt Ũ_mj) attains it (the property
// wy_pseudo_value_bound_attained). The rest of Ũ's error (operand roundings of 𝒯, the products' and
// sums' roundings, the errors of X, Y and S) is the running error of the same products with 𝒯 taken
// as exact; the two add (first order). Every term is a non-negative combination of running errors,
// which are affine in the operand format's u_op, so the bound is affine in u_op (the tiers'
// interpolation, fixtures/lib/tensor_core_tier.cpp). Used with the norm-wise carry
// (normwise_chunk_bound_scope); plain scalars and the entrywise runs ignore it. The bound on the residual
// F = ε − ΔA 𝒯̂ (𝒯̂ − 𝒯 = 𝒯F) is kept in the chunk for the chunked adjoint (grad/wy_chunk_adjoint_bound.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/models/wy_chunk_error_bound.hpp"

namespace kalman_oracle {

namespace detail::fixed_gain {

/// The bound above for one product P = 𝒯Z of the chunk (n x columns): δ = |ε| |Z| + err(A) |P| >= |E Z|
/// (planted bug wy_pseudo_value_bound_drops_key_products: A's errors forgotten, as if A were computed
/// exactly), then err(P) = err(rest) + |𝒯| δ, `rest` the product's running error with 𝒯 exact;
/// `local` holds |ε| (the forward substitution's own roundings) and `z` holds |Z|.
template <class B>
void bound_through_inverse(const std::vector<std::vector<running_error<B>>>& Tm,
                           const std::vector<std::vector<running_error<B>>>& A,
                           const std::vector<std::vector<B>>& local, const std::vector<std::vector<B>>& z,
                           const std::vector<std::vector<running_error<B>>>& rest,
                           std::vector<std::vector<running_error<B>>>& product) {
  using std::abs;
  const std::size_t n = Tm.size(), columns = z.empty() ? 0 : z[0].size();
  std::vector<std::vector<B>> d(n, std::vector<B>(columns, B(0)));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < columns; ++j) {
      B own(0), through_a(0);
      for (std::size_t m = 0; m < t; ++m) {
        own += local[t][m] * z[m][j];
        through_a += A[t][m].error() * abs(product[m][j].value());
      }
      d[t][j] = own + KALMAN_ORACLE_MUTANT(wy_pseudo_value_bound_drops_key_products, through_a, B(0));
    }
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < columns; ++j) {
      B y(0);
      for (std::size_t m = 0; m <= t; ++m) y += abs(Tm[t][m].value()) * d[m][j];
      product[t][j] = running_error<B>(product[t][j].value(), rest[t][j].error() + y);
    }
}

}  // namespace detail::fixed_gain

/// The hook: the chunk `c` (its 𝒯, X, Y, W and Ũ computed) of a rule that erases, with its matrix A
/// (n x n, strictly lower) and start state S (K x V, row-major); `pseudo_values(Tm, W)` recomputes Ũ
/// (n x V, returned) and W (n x K) from another 𝒯. Both bounds are replaced (W's since 2026-12-05, for
/// the chunked adjoint). Plain scalars carry no bound: nothing to do.
template <class T, class Chunk, class PseudoValues>
void bound_pseudo_values(Chunk&, const std::vector<std::vector<T>>&, const std::vector<T>&, PseudoValues&&) {}

template <class B, class Chunk, class PseudoValues>
void bound_pseudo_values(Chunk& c, const std::vector<std::vector<running_error<B>>>& A,
                         const std::vector<running_error<B>>& S, PseudoValues&& pseudo_values) {
  using R = running_error<B>;
  using std::abs;
  if (!detail::fixed_gain::normwise_chunk_bound || c.n == 0) return;
  const std::size_t n = c.n, K = c.X[0].size(), V = c.U[0].size();

  // Ũ's and W's errors with 𝒯 taken as exact (its operand roundings still counted).
  std::vector<std::vector<R>> exact_inverse(n, std::vector<R>(n));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t m = 0; m < n; ++m) exact_inverse[t][m] = R(c.Tm[t][m].value());
  std::vector<std::vector<R>> rest_W;
  const std::vector<std::vector<R>> rest = pseudo_values(exact_inverse, rest_W);

  // The forward substitution's own rounding of 𝒯̂_tm: its sum recomputed from exact operands.
  std::vector<std::vector<B>> local(n, std::vector<B>(n, B(0)));
  for (std::size_t m = 0; m < n; ++m)
    for (std::size_t t = m + 1; t < n; ++t) {
      R sum(0);
      for (std::size_t l = m; l < t; ++l) sum += R(A[t][l].value()) * R(c.Tm[l][m].value());
      local[t][m] = sum.error();
    }

  // |F| <= |ε| + err(A) |𝒯̂| (F = ε − ΔA 𝒯̂), kept for the chunked adjoint: 𝒯̂ − 𝒯 = 𝒯F enters its dA
  // (grad/wy_chunk_adjoint_bound.hpp).
  c.inverse_residual.assign(n, std::vector<R>(n, R(0)));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t m = 0; m < t; ++m) {
      B f = local[t][m];
      for (std::size_t l = m; l < t; ++l) f += A[t][l].error() * abs(c.Tm[l][m].value());
      c.inverse_residual[t][m] = R(B(0), f);
    }

  // Z = Y − X S (values).
  std::vector<std::vector<B>> z(n, std::vector<B>(V, B(0)));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < V; ++j) {
      B xs(0);
      for (std::size_t i = 0; i < K; ++i) xs += c.X[t][i].value() * S[i * V + j].value();
      z[t][j] = abs(c.Y[t][j].value() - xs);
    }

  // err(Ũ) = rest + |𝒯| (|ε| |Z| + err(A) |Ũ|).
  detail::fixed_gain::bound_through_inverse(c.Tm, A, local, z, rest, c.U);
  // W = 𝒯X likewise (Z = X): (𝒯̂ − 𝒯) X = 𝒯 (ε X − ΔA W). Ũ does not need W's bound (its own is above),
  // but the chunked adjoint reads W (dS_prev −= Wᵀ dŨ, d𝒯 = dŨ Yᵀ + dW Xᵀ): without it 𝒯's entrywise
  // errors reach the gradients through W.
  std::vector<std::vector<B>> x(n, std::vector<B>(K, B(0)));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t i = 0; i < K; ++i) x[t][i] = abs(c.X[t][i].value());
  detail::fixed_gain::bound_through_inverse(c.Tm, A, local, x, rest_W, c.W);
}

}  // namespace kalman_oracle
