// Precision laws of the dense Kalman memory (docs/math.md §2, §3) in MPFR at 256 bits (257 granted):
//   - the moment form and the information form both stay within a derived bound of the exact
//     filter, K = 4..8, T up to 64 (hence within twice that bound of each other);
//   - with D = I and Ω = 0 the moment form stays within the same bound of the ridge solution;
//   - threads = 3 gives bit-identical outputs to threads = 1, in both forms.
//
// Why not compare the two forms with each other directly? A bound on |dense - information| needs
// the error of each anyway; so each is compared with a certified exact value, and the property
// says which form is off when it fails.
//
// The exact value. The moment form evaluated in MPFI interval arithmetic at 512 bits encloses the
// exact filter output (every interval operation encloses the exact result of its operands; the
// inputs are exact point intervals). Its width stays below 2^-400 of the trajectory's scale here,
// and distances are measured to the farthest point of the enclosure. (The information form is not
// used for the reference: interval Gaussian elimination overestimates, and that compounds over
// tokens.)
//
// The bound, first order in u = 2^-p (p = 257, the granted precision). For the computed S̃_t, P̃_t,
// õ_t of either form:
//   |S̃_t - S_t|_max <= C u σ_S,   |P̃_t - P_t|_max <= C u σ_P,   |õ_t - o_t|_max <= C u σ_S τ |q_t|_1,
//   C = 2^8 K³ T κ̄²,
// where σ_S = max_t |S_t|_max and σ_P = max_t |P_t|_max over the sequence, and κ̄ = Λ / λ is the
// trajectory condition number: the largest eigenvalue over P_0, every P̂_t and every P_t, divided by
// the smallest over the same (so κ̄ >= κ₂ of each). Derivation:
//   Local error per token. The information form solves with M_t = P̂_t and Y_t = P_t⁻¹ by Gaussian
//     elimination without pivoting on SPD matrices: backward error γ_{3K} |L||U| with
//     || |L||U| ||₂ <= K ||A||₂ (growth factor 1), so a relative forward error <= 3K² u κ(A); plus a
//     fixed number (<= 8) of K x K products, <= γ_K each. The moment form has no solve; its one
//     cancellation, P̂ - u uᵀ / s, loses at most a factor κ(P̂_t). Either way <= 2^5 K² u κ̄ per token,
//     relative to the token's scale.
//   Propagation. The covariance map P_{t-1} -> P_t is non-expansive in Thompson's part metric
//     (congruence P -> D P Dᵀ, adding Ω ⪰ 0, and P̂ -> (P̂⁻¹ + k kᵀ / r)⁻¹ each are; Bougerol 1993),
//     and the mean's error map e -> (I - κ kᵀ) D e = P_t P̂_t⁻¹ D e is non-expansive from the
//     P_{t-1}⁻¹-norm to the P_t⁻¹-norm (because P_t ⪯ P̂_t and Dᵀ P̂_t⁻¹ D ⪯ P_{t-1}⁻¹). Moving a
//     perturbation into these norms and back to the max norm costs at most K κ̄.
//   Sum. T tokens: 2^5 K² u κ̄ · K κ̄ · T = 2^5 K³ T κ̄² u; the extra 2^3 absorbs the second-order
//     terms and the slack between entrywise and normwise statements in this sketch.
// It is a first-order estimate, not a proof (a proof obligation for proofs/). The inputs keep the
// problem in a moderate regime: dyadic entries (exact at 257 bits and in binary64), |D|_∞ <= 1,
// Ω ⪰ 2^-3 I or diagonal ω >= 2^-3, r in [1/4, 4]. Observed over the 100 cases: the largest error
// is 2^-17.5 of the bound (information form, S_t; the moment form's largest is 2^-19.8, P_t), and
// C >= 2^14. A planted bug moves outputs by O(σ), about 2^200 times the bound.
#include <mpfi.h>
#include <mpfr.h>

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/models/dense.hpp"
#include "kalman_oracle/models/information.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using R = rational;

namespace {

/// An integer in [lo, hi], uniformly (RapidCheck's inRange favours small values at small sizes).
long draw_int(long lo, long hi) { return *rc::gen::resize(100, rc::gen::inRange<long>(lo, hi + 1)); }
std::size_t draw_size(std::size_t lo, std::size_t hi) {
  return static_cast<std::size_t>(draw_int(static_cast<long>(lo), static_cast<long>(hi)));
}
R pow2(long e) { return scalar_traits<R>::ldexp(R(1), e); }

/// n 2^e, |n| <= bound: dyadic, so exact in binary64 and at any MPFR precision.
tensor<R> draw_tensor(const char* name, shape_t shape, long bound, long exponent) {
  tensor<R> x(name, std::move(shape));
  for (auto& e : x.data()) e = R(draw_int(-bound, bound)) * pow2(exponent);
  return x;
}

/// L Lᵀ + diag(2^-3 .. 1) per K x K block: exactly symmetric, positive definite, dyadic.
tensor<R> draw_spd(const char* name, shape_t shape, std::size_t K) {
  using matrix = dense_matrix<R>;
  tensor<R> x(name, std::move(shape));
  const auto n = static_cast<Eigen::Index>(K);
  for (std::size_t at = 0; at < x.size(); at += K * K) {
    matrix L = matrix::Zero(n, n);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j <= i; ++j) L(i, j) = R(draw_int(-2, 2)) * pow2(-3);
    matrix A = L * L.transpose();
    for (Eigen::Index i = 0; i < n; ++i) A(i, i) += pow2(draw_int(-3, 0));
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < n; ++j) x.data()[at + static_cast<std::size_t>(i * n + j)] = A(i, j);
  }
  return x;
}

/// Inputs in the moderate regime of the bound (see the top): D absent, diagonal |alpha| <= 1 or full
/// with |D|_∞ <= 1; Ω full SPD or diagonal >= 2^-3; P_0 absent (I) or SPD; S_0 absent or random.
dense_inputs<R> draw_inputs(std::size_t B, std::size_t L, std::size_t H, std::size_t K, std::size_t V) {
  dense_inputs<R> in;
  in.q = draw_tensor("q", {B, L, H, K}, 4, -2);
  in.k = draw_tensor("k", {B, L, H, K}, 4, -2);
  in.v = draw_tensor("v", {B, L, H, V}, 4, -1);
  in.r = tensor<R>("r", {B, L, H});
  for (auto& r : in.r.data()) r = pow2(draw_int(-2, 2));
  switch (draw_int(0, 2)) {
    case 0: break;
    case 1: in.transition = dense_transition<R>::diagonal(draw_tensor("alpha", {B, L, H, K}, 8, -3)); break;
    default: in.transition = dense_transition<R>::full(draw_tensor("D", {B, L, H, K, K}, 4, -5));  // K <= 8
  }
  if (draw_int(0, 1)) {
    in.process_noise = dense_process_noise<R>::full(draw_spd("Omega", {B, L, H, K, K}, K));
  } else {
    tensor<R> omega("omega", {B, L, H, K});
    for (auto& w : omega.data()) w = R(draw_int(1, 8)) * pow2(-3);
    in.process_noise = dense_process_noise<R>::diagonal(omega);
  }
  if (draw_int(0, 1)) in.initial_covariance = draw_spd("initial_covariance", {B, H, K, K}, K);
  if (draw_int(0, 1)) in.initial_state = draw_tensor("initial_state", {B, H, K, V}, 4, -1);
  in.scale = R(draw_int(1, 4)) * pow2(-2);
  return in;
}

template <class T>
tensor<T> convert(const tensor<R>& x) {
  tensor<T> y(x.name(), x.shape());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = to_double(x.data()[i]);
    RC_ASSERT(R(d) == x.data()[i]);  // dyadic inputs: exact
    y.data()[i] = from_double<T>(d);
  }
  return y;
}

/// The same inputs in T (exactly: every input is a short dyadic).
template <class T>
dense_inputs<T> convert(const dense_inputs<R>& in) {
  dense_inputs<T> out;
  out.q = convert<T>(in.q);
  out.k = convert<T>(in.k);
  out.v = convert<T>(in.v);
  out.r = convert<T>(in.r);
  if (in.transition)
    out.transition = dense_transition<T>{in.transition->form, in.transition->space, convert<T>(in.transition->values)};
  if (in.process_noise)
    out.process_noise = dense_process_noise<T>{in.process_noise->form, convert<T>(in.process_noise->values)};
  if (in.initial_state) out.initial_state = convert<T>(*in.initial_state);
  if (in.initial_covariance) out.initial_covariance = convert<T>(*in.initial_covariance);
  if (in.scale) out.scale = from_double<T>(to_double(*in.scale));
  return out;
}

/// sup |x - X| over the points X of the enclosure, rounded up (in interval arithmetic).
double distance_up(const mpfr_real& x, const mpfi_interval& enclosure) {
  mpfi_t difference;
  mpfr_t magnitude;
  mpfi_init2(difference, mpfi_get_prec(enclosure.backend().data()));
  mpfr_init2(magnitude, 64);
  mpfi_fr_sub(difference, x.backend().data(), enclosure.backend().data());
  mpfi_mag(magnitude, difference);  // sup |difference|, rounded up
  const double out = mpfr_get_d(magnitude, MPFR_RNDU);
  mpfr_clear(magnitude);
  mpfi_clear(difference);
  return out;
}

double midpoint(const mpfi_interval& x) { return to_double(x); }

/// The trajectory condition number κ̄ = Λ / λ over the given K x K blocks (see the top). Condition
/// numbers need no certification: binary64 eigenvalues of matrices known to 2^-400 suffice.
struct eigen_range {
  double largest = 0, smallest = INFINITY;
  void add(const Eigen::MatrixXd& a) {
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(a, Eigen::EigenvaluesOnly);
    largest = std::max(largest, solver.eigenvalues().maxCoeff());
    smallest = std::min(smallest, solver.eigenvalues().minCoeff());
  }
  template <class T>
  void add_blocks(const tensor<T>& x, std::size_t K) {
    for (std::size_t at = 0; at < x.size(); at += K * K) {
      Eigen::MatrixXd a(K, K);
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < K; ++j)
          a(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = to_double(x.data()[at + i * K + j]);
      add(a);
    }
  }
  double condition() const { return largest / smallest; }
};

double max_abs(const tensor<mpfi_interval>& x) {
  double m = 0;
  for (const auto& e : x.data()) m = std::max(m, std::fabs(midpoint(e)));
  return m;
}

/// Every element of `computed` within tolerance(i) of the enclosure `exact`; RC_ASSERT otherwise.
template <class Tolerance>
void require_within(const tensor<mpfr_real>& computed, const tensor<mpfi_interval>& exact, Tolerance tolerance,
                    const char* form) {
  RC_ASSERT(computed.shape() == exact.shape());
  for (std::size_t i = 0; i < computed.size(); ++i) {
    const double distance = distance_up(computed.data()[i], exact.data()[i]);
    if (!(distance <= tolerance(i))) {
      RC_LOG() << form << ": " << computed.name() << " element " << to_string(computed.index_of(i)) << " is "
               << distance << " from the exact value, bound " << tolerance(i) << "\n";
      RC_FAIL("outside the bound");
    }
  }
}

}  // namespace

TEST_SUITE("dense") {
  TEST_CASE("dense: both forms within the derived bound of the exact filter (MPFR 256 bits, K = 4..8, T <= 64)") {
    check_property("dense_and_information_within_bound_mpfr", [] {
      const std::size_t K = draw_size(4, 8), V = draw_size(1, 3), L = draw_size(1, 64);  // V < K
      const auto in = draw_inputs(1, L, 1, K, V);
      const run_options with_internals{1, true};
      dense_outputs<mpfi_interval> exact;
      {
        precision_scope reference_precision(512);
        exact = dense_forward(convert<mpfi_interval>(in), with_internals);
      }
      precision_scope scope(256);
      const auto dense = dense_forward(convert<mpfr_real>(in), with_internals);
      const auto info = information_forward(convert<mpfr_real>(in), with_internals);

      eigen_range eigenvalues;
      eigenvalues.add_blocks(*exact.predicted_covariance, K);
      eigenvalues.add_blocks(*exact.covariance, K);
      if (in.initial_covariance)
        eigenvalues.add_blocks(*in.initial_covariance, K);
      else
        eigenvalues.add(Eigen::MatrixXd::Identity(static_cast<Eigen::Index>(K), static_cast<Eigen::Index>(K)));
      const double kappa = eigenvalues.condition();
      const double u = std::ldexp(1.0, -static_cast<int>(scalar_traits<mpfr_real>::precision_bits()));
      const double C = 256.0 * std::pow(static_cast<double>(K), 3) * static_cast<double>(L) * kappa * kappa;
      const double sigma_S = max_abs(*exact.state), sigma_P = max_abs(*exact.covariance);
      const double tau = to_double(*in.scale);
      std::vector<double> query_norm(L, 0.0);  // τ |q_t|_1
      for (std::size_t t = 0; t < L; ++t)
        for (std::size_t i = 0; i < K; ++i) query_norm[t] += tau * std::fabs(to_double(in.q(0, t, 0, i)));

      const auto state_bound = [&](std::size_t) { return C * u * sigma_S; };
      const auto covariance_bound = [&](std::size_t) { return C * u * sigma_P; };
      const auto output_bound = [&](std::size_t i) { return C * u * sigma_S * query_norm[i / V]; };
      for (const auto* form : {static_cast<const dense_outputs<mpfr_real>*>(&dense),
                               static_cast<const dense_outputs<mpfr_real>*>(&info)}) {
        const char* name = form == &dense ? "moment form" : "information form";
        require_within(*form->state, *exact.state, state_bound, name);
        require_within(*form->covariance, *exact.covariance, covariance_bound, name);
        require_within(form->o, exact.o, output_bound, name);
      }
    });
  }

  TEST_CASE("dense: with D = I and Omega = 0 the moment form is within the bound of the ridge solution (MPFR)") {
    check_property("dense_static_memory_is_ridge_mpfr", [] {
      const std::size_t K = draw_size(4, 8), V = draw_size(1, 3), L = draw_size(1, 64);
      dense_inputs<R> in = draw_inputs(1, L, 1, K, V);
      in.transition.reset();
      in.process_noise.reset();
      if (!in.initial_covariance) in.initial_covariance = draw_spd("initial_covariance", {1, 1, K, K}, K);

      // The closed form in MPFI at 512 bits: A = P_0⁻¹ + Σ k kᵀ / r, S_T = A⁻¹ (P_0⁻¹ S_0 + Σ k vᵀ / r)
      // (one solve; P_0⁻¹ is a solve too). Its enclosure holds the exact ridge solution.
      using interval_matrix = dense_matrix<mpfi_interval>;
      tensor<mpfi_interval> ridge_state, ridge_covariance;
      {
        precision_scope reference_precision(512);
        ridge_state = tensor<mpfi_interval>("final_state", {1, 1, K, V});
        ridge_covariance = tensor<mpfi_interval>("final_covariance", {1, 1, K, K});
        const auto exact_in = convert<mpfi_interval>(in);
        const auto n = static_cast<Eigen::Index>(K), m = static_cast<Eigen::Index>(V);
        interval_matrix P0(n, n), S0 = interval_matrix::Zero(n, m);
        for (Eigen::Index i = 0; i < n; ++i) {
          for (Eigen::Index j = 0; j < n; ++j) P0(i, j) = (*exact_in.initial_covariance)(0, 0, i, j);
          if (exact_in.initial_state)
            for (Eigen::Index j = 0; j < m; ++j) S0(i, j) = (*exact_in.initial_state)(0, 0, i, j);
        }
        const auto P0_inv = detail::information::spd_inverse<mpfi_interval>(P0);
        RC_ASSERT(P0_inv.has_value());
        interval_matrix A = *P0_inv;
        interval_matrix rhs = detail::dense::multiply<mpfi_interval>(*P0_inv, S0);
        for (std::size_t t = 0; t < L; ++t) {
          dense_vector<mpfi_interval> k(n), v(m);
          for (Eigen::Index i = 0; i < n; ++i) k(i) = exact_in.k(0, t, 0, i);
          for (Eigen::Index j = 0; j < m; ++j) v(j) = exact_in.v(0, t, 0, j);
          A += detail::dense::outer<mpfi_interval>(k, k, exact_in.r(0, t, 0));
          rhs += detail::dense::outer<mpfi_interval>(k, v, exact_in.r(0, t, 0));
        }
        const auto S = detail::information::spd_solve<mpfi_interval>(A, rhs);
        const auto P = detail::information::spd_inverse<mpfi_interval>(A);
        RC_ASSERT(S.has_value() && P.has_value());
        for (Eigen::Index i = 0; i < n; ++i) {
          for (Eigen::Index j = 0; j < m; ++j) ridge_state(0, 0, i, j) = (*S)(i, j);
          for (Eigen::Index j = 0; j < n; ++j) ridge_covariance(0, 0, i, j) = (*P)(i, j);
        }
      }
      precision_scope scope(256);
      const auto dense = dense_forward(convert<mpfr_real>(in), run_options{1, true});
      eigen_range eigenvalues;  // here P̂_t = P_{t-1}: the posteriors and P_0 cover it
      eigenvalues.add_blocks(*dense.covariance, K);
      eigenvalues.add_blocks(*in.initial_covariance, K);
      const double kappa = eigenvalues.condition();
      const double u = std::ldexp(1.0, -static_cast<int>(scalar_traits<mpfr_real>::precision_bits()));
      const double C = 256.0 * std::pow(static_cast<double>(K), 3) * static_cast<double>(L) * kappa * kappa;
      double sigma_S = 0, sigma_P = 0;
      for (const auto& x : dense.state->data()) sigma_S = std::max(sigma_S, std::fabs(to_double(x)));
      for (const auto& x : dense.covariance->data()) sigma_P = std::max(sigma_P, std::fabs(to_double(x)));
      if (in.initial_state)
        for (const auto& x : in.initial_state->data()) sigma_S = std::max(sigma_S, std::fabs(to_double(x)));
      require_within(
          dense.final_state, ridge_state, [&](std::size_t) { return C * u * sigma_S; }, "moment form");
      require_within(
          dense.final_covariance, ridge_covariance, [&](std::size_t) { return C * u * sigma_P; }, "moment form");
    });
  }

  TEST_CASE("dense: threads = 3 is bit-identical to threads = 1 (MPFR, both forms)") {
    precision_scope scope(256);
    check_property("dense_threads_bit_identical", [] {
      const std::size_t B = draw_size(1, 2), H = draw_size(2, 3), K = draw_size(1, 5), V = draw_size(1, 3);
      const auto in = convert<mpfr_real>(draw_inputs(B, draw_size(1, 8), H, K, V));
      const auto same = [](const tensor<mpfr_real>& a, const tensor<mpfr_real>& b) {
        if (a.shape() != b.shape()) return false;
        for (std::size_t i = 0; i < a.size(); ++i)
          if (mpfr_equal_p(a.data()[i].backend().data(), b.data()[i].backend().data()) == 0) return false;
        return true;
      };
      const auto one = dense_forward(in, run_options{1, true}), three = dense_forward(in, run_options{3, true});
      const auto info_one = information_forward(in, run_options{1, true});
      const auto info_three = information_forward(in, run_options{3, true});
      using outputs = dense_outputs<mpfr_real>;
      const std::pair<const outputs*, const outputs*> pairs[] = {{&one, &three}, {&info_one, &info_three}};
      for (const auto& [a, b] : pairs) {
        RC_ASSERT(same(a->o, b->o));
        RC_ASSERT(same(a->final_state, b->final_state));
        RC_ASSERT(same(a->final_covariance, b->final_covariance));
        RC_ASSERT(same(*a->log_likelihood, *b->log_likelihood));
        RC_ASSERT(same(a->readout_variance, b->readout_variance));
        RC_ASSERT(same(*a->gain, *b->gain));
        RC_ASSERT(same(*a->predicted_covariance, *b->predicted_covariance));
      }
      RC_ASSERT(same(info_one.final_precision, info_three.final_precision));
      RC_ASSERT(same(info_one.final_information, info_three.final_information));
    });
  }
}
