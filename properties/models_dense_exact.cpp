// Exact laws of the dense Kalman memory (docs/math.md §2, §3), over GMP rationals (compared with ==):
//   - the moment form (§2) and the information form (§3) give the same posterior and outputs;
//   - with D = I and Ω = 0 the filter is recursive least squares: S_T equals the ridge solution
//     (P_0⁻¹ + Σ k kᵀ/r)⁻¹ (P_0⁻¹ S_0 + Σ k vᵀ/r), one linear solve (and P_T the inverse matrix);
//   - one-hot keys with diagonal D, Ω and P_0 keep P diagonal, each channel following the scalar
//     recursion diag_kdn_covariance_step with μ = 1 (docs/math.md §4 with the exact projection);
//   - every posterior covariance is exactly symmetric and positive definite (all leading principal
//     minors > 0), in both forms.
// Sizes are small (K <= 3, V <= 2, T <= 8) because exact rationals grow with every token.
#include <Eigen/LU>

#include <cstddef>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/algebra/recursion_steps.hpp"
#include "kalman_oracle/models/dense.hpp"
#include "kalman_oracle/models/information.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using R = rational;
using matrix = dense_matrix<R>;

namespace {

/// An integer in [lo, hi], uniformly: RapidCheck's inRange scales its range with the test's size
/// (small values first), which would leave the largest sizes almost untested in 100 cases.
long draw_int(long lo, long hi) { return *rc::gen::resize(100, rc::gen::inRange<long>(lo, hi + 1)); }
std::size_t draw_size(std::size_t lo, std::size_t hi) {
  return static_cast<std::size_t>(draw_int(static_cast<long>(lo), static_cast<long>(hi)));
}

/// n / d with |n| <= bound and d in 1..4: small exact values of either sign (zero included).
R draw_small(long bound = 4) { return R(draw_int(-bound, bound)) / R(draw_int(1, 4)); }
R draw_positive() { return R(draw_int(1, 8)) / R(draw_int(1, 4)); }

tensor<R> draw_tensor(const char* name, shape_t shape, R (*draw)()) {
  tensor<R> x(name, std::move(shape));
  for (auto& e : x.data()) e = draw();
  return x;
}
R draw_small_default() { return draw_small(); }

/// L Lᵀ + diag(δ), δ_i > 0 (or >= 0 when `semidefinite`): a random exactly symmetric positive
/// (semi)definite K x K matrix, written into x at flat offset `at`.
void draw_spd_into(tensor<R>& x, std::size_t at, std::size_t K, bool semidefinite) {
  matrix L(static_cast<Eigen::Index>(K), static_cast<Eigen::Index>(K));
  for (Eigen::Index i = 0; i < L.rows(); ++i)
    for (Eigen::Index j = 0; j < L.cols(); ++j) L(i, j) = j <= i ? draw_small(2) : R(0);
  matrix A = L * L.transpose();
  for (Eigen::Index i = 0; i < A.rows(); ++i) A(i, i) += semidefinite ? R(draw_int(0, 2)) / 2 : draw_positive();
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = 0; j < K; ++j)
      x.data()[at + i * K + j] = A(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j));
}

tensor<R> draw_spd(const char* name, shape_t shape, std::size_t K, bool semidefinite = false) {
  tensor<R> x(name, std::move(shape));
  for (std::size_t at = 0; at < x.size(); at += K * K) draw_spd_into(x, at, K, semidefinite);
  return x;
}

struct sizes {
  std::size_t B, L, H, K, V;
};

sizes draw_sizes() { return {1, draw_size(1, 8), draw_size(1, 2), draw_size(1, 3), draw_size(1, 2)}; }

/// General inputs: D absent, diagonal or full (any real entries); Ω diagonal > 0 or full SPD (so
/// the information form's M_t = D P Dᵀ + Ω is invertible whatever D); P_0 absent or SPD; S_0 absent
/// or random; r > 0; τ given (K need not be a perfect square).
dense_inputs<R> draw_general(const sizes& n) {
  const auto [B, L, H, K, V] = n;
  dense_inputs<R> in;
  in.q = draw_tensor("q", {B, L, H, K}, draw_small_default);
  in.k = draw_tensor("k", {B, L, H, K}, draw_small_default);
  in.v = draw_tensor("v", {B, L, H, V}, draw_small_default);
  in.r = draw_tensor("r", {B, L, H}, draw_positive);
  switch (draw_int(0, 2)) {
    case 0: break;  // D = I
    case 1:
      in.transition = dense_transition<R>::diagonal(draw_tensor("alpha", {B, L, H, K}, draw_small_default));
      break;
    default: in.transition = dense_transition<R>::full(draw_tensor("D", {B, L, H, K, K}, draw_small_default));
  }
  if (*rc::gen::arbitrary<bool>())
    in.process_noise = dense_process_noise<R>::full(draw_spd("Omega", {B, L, H, K, K}, K));
  else
    in.process_noise = dense_process_noise<R>::diagonal(draw_tensor("omega", {B, L, H, K}, draw_positive));
  if (*rc::gen::arbitrary<bool>()) in.initial_covariance = draw_spd("initial_covariance", {B, H, K, K}, K);
  if (*rc::gen::arbitrary<bool>()) in.initial_state = draw_tensor("initial_state", {B, H, K, V}, draw_small_default);
  in.scale = R(draw_int(1, 4)) / R(draw_int(1, 4));  // tau > 0 (models/query_scale.hpp)
  return in;
}

/// Leading principal minors of a symmetric matrix, all > 0 (Sylvester: positive definite).
bool leading_minors_positive(const matrix& a) {
  for (Eigen::Index i = 1; i <= a.rows(); ++i)
    if (!(a.topLeftCorner(i, i).fullPivLu().determinant() > 0)) return false;
  return true;
}

matrix slice(const tensor<R>& x, std::size_t offset, std::size_t rows, std::size_t cols) {
  matrix m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = x.data()[offset + i * cols + j];
  return m;
}

}  // namespace

TEST_SUITE("dense") {
  TEST_CASE("dense: the moment form equals the information form, exactly (rationals)") {
    check_property("dense_equals_information_exact", [] {
      const auto in = draw_general(draw_sizes());
      const run_options with_internals{1, true};
      const auto dense = dense_forward(in, with_internals);
      const auto info = information_forward(in, with_internals);
      RC_ASSERT(dense.o.data() == info.o.data());
      RC_ASSERT(dense.final_state.data() == info.final_state.data());
      RC_ASSERT(dense.final_covariance.data() == info.final_covariance.data());
      RC_ASSERT(dense.state->data() == info.state->data());
      RC_ASSERT(dense.covariance->data() == info.covariance->data());
      RC_ASSERT(dense.predicted_covariance->data() == info.predicted_covariance->data());
      RC_ASSERT(dense.gain->data() == info.gain->data());
      RC_ASSERT(dense.innovation_variance.data() == info.innovation_variance.data());
      RC_ASSERT(dense.mahalanobis.data() == info.mahalanobis.data());
      RC_ASSERT(dense.readout_variance.data() == info.readout_variance.data());
    });
  }

  TEST_CASE("dense: with D = I and Omega = 0 the filter is the ridge solution, exactly (rationals)") {
    check_property("dense_static_memory_is_ridge_exact", [] {
      const sizes n = draw_sizes();
      const auto [B, L, H, K, V] = n;
      dense_inputs<R> in = draw_general(n);
      // D = I and Ω = 0, either left out (the defaults) or spelled out.
      if (*rc::gen::arbitrary<bool>()) {
        in.transition.reset();
        in.process_noise.reset();
      } else {
        in.transition = dense_transition<R>::diagonal(tensor<R>("alpha", {K}, R(1)));
        in.process_noise = dense_process_noise<R>::full(tensor<R>("Omega", {K, K}));
      }
      if (!in.initial_covariance) in.initial_covariance = draw_spd("initial_covariance", {B, H, K, K}, K);
      const auto out = dense_forward(in);
      const Eigen::Index k_ = static_cast<Eigen::Index>(K), v_ = static_cast<Eigen::Index>(V);
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h) {
          // A = P_0⁻¹ + Σ k kᵀ / r, rhs = P_0⁻¹ S_0 + Σ k vᵀ / r, S_T = A⁻¹ rhs (one solve).
          const matrix P0 = slice(*in.initial_covariance, (b * H + h) * K * K, K, K);
          const matrix S0 =
              in.initial_state ? slice(*in.initial_state, (b * H + h) * K * V, K, V) : matrix(matrix::Zero(k_, v_));
          const matrix P0_inv = P0.fullPivLu().inverse();
          matrix A = P0_inv;
          matrix rhs = P0_inv * S0;
          for (std::size_t t = 0; t < L; ++t) {
            const matrix k = slice(in.k, ((b * L + t) * H + h) * K, K, 1);
            const matrix v = slice(in.v, ((b * L + t) * H + h) * V, 1, V);
            const R& r = in.r(b, t, h);
            A += k * k.transpose() / r;
            rhs += k * v / r;
          }
          const matrix ridge = A.fullPivLu().solve(rhs);
          RC_ASSERT(slice(out.final_state, (b * H + h) * K * V, K, V) == ridge);
          RC_ASSERT(slice(out.final_covariance, (b * H + h) * K * K, K, K) == matrix(A.fullPivLu().inverse()));
        }
    });
  }

  TEST_CASE("dense: one-hot keys with diagonal D, Omega, P_0 follow the scalar recursion, exactly") {
    check_property("dense_one_hot_keys_follow_diagonal_recursion", [] {
      const std::size_t L = draw_size(1, 8), K = draw_size(1, 4), V = draw_size(1, 2);
      dense_inputs<R> in;
      in.q = draw_tensor("q", {1, L, 1, K}, draw_small_default);
      in.v = draw_tensor("v", {1, L, 1, V}, draw_small_default);
      in.k = tensor<R>("k", {1, L, 1, K});
      for (std::size_t t = 0; t < L; ++t) {  // k_t = c e_j, c != 0
        const R c = *rc::gen::element(R(1), R(-1), R(2), R(1, 3), R(-3, 2));
        in.k(0, t, 0, draw_size(0, K - 1)) = c;
      }
      in.r = draw_tensor("r", {1, L, 1}, draw_positive);
      const tensor<R> alpha = draw_tensor("alpha", {1, L, 1, K}, draw_small_default);
      in.transition = dense_transition<R>::diagonal(alpha);
      tensor<R> omega("omega", {1, L, 1, K});
      for (auto& w : omega.data()) w = R(draw_int(0, 4)) / 4;  // >= 0, zeros included
      in.process_noise = dense_process_noise<R>::diagonal(omega);
      tensor<R> p0("initial_covariance", {1, 1, K, K});
      std::vector<R> p(K);
      for (std::size_t i = 0; i < K; ++i) p0(0, 0, i, i) = p[i] = draw_positive();
      in.initial_covariance = p0;
      in.scale = R(1);

      const auto out = dense_forward(in, run_options{1, true});
      for (std::size_t t = 0; t < L; ++t)
        for (std::size_t i = 0; i < K; ++i) {
          p[i] = diag_kdn_covariance_step(p[i], alpha(0, t, 0, i), omega(0, t, 0, i), in.k(0, t, 0, i), in.r(0, t, 0),
                                          R(1));
          for (std::size_t j = 0; j < K; ++j) {
            RC_ASSERT((*out.covariance)(0, t, 0, i, j) == (i == j ? p[i] : R(0)));
            if (i != j) RC_ASSERT((*out.predicted_covariance)(0, t, 0, i, j) == 0);
          }
        }
    });
  }

  TEST_CASE("dense: every posterior covariance is exactly symmetric and positive definite, in both forms") {
    check_property("dense_covariance_symmetric_positive_definite", [] {
      const sizes n = draw_sizes();
      const auto [B, L, H, K, V] = n;
      const auto in = draw_general(n);
      const auto dense = dense_forward(in, run_options{1, true});
      const auto info = information_forward(in, run_options{1, true});
      for (std::size_t at = 0; at < B * L * H * K * K; at += K * K)
        for (const auto* covariance : {&*dense.covariance, &*info.covariance, &*info.predicted_precision}) {
          const matrix P = slice(*covariance, at, K, K);
          RC_ASSERT(P == matrix(P.transpose()));
          RC_ASSERT(leading_minors_positive(P));
        }
      for (std::size_t at = 0; at < B * H * K * K; at += K * K) {
        const matrix Y = slice(info.final_precision, at, K, K);
        RC_ASSERT(Y == matrix(Y.transpose()));
        RC_ASSERT(leading_minors_positive(Y));
      }
      (void)V;
    });
  }
}
