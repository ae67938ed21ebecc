// The dense Kalman memory in moment form (models/dense.hpp, docs/math.md §2): a hand-worked example,
// defaults, broadcasting, gates, and the exact messages for bad inputs.
#include "kalman_oracle/models/dense.hpp"

#include <doctest/doctest.h>

#include <mpfi.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "kalman_oracle/models/information.hpp"

using namespace kalman_oracle;
using R = rational;

namespace {

template <class T>
tensor<T> make(const char* name, shape_t shape, std::vector<double> values) {
  std::vector<T> data;
  for (double x : values) data.push_back(from_double<T>(x));
  return tensor<T>(name, std::move(shape), std::move(data));
}

/// The hand-worked example: B = H = 1, T = 2, K = 2, V = 1, D = I, Ω = diag(1, 1/2), P_0 = I,
/// S_0 = 0, τ = 1/2.
///   token 1: k = (1, 1),  v = 2, r = 1,   q = (1, 0)
///   token 2: k = (1, -1), v = 1, r = 1/2, q = (0, 1)
template <class T>
dense_inputs<T> hand_example() {
  dense_inputs<T> in;
  in.q = make<T>("q", {1, 2, 1, 2}, {1, 0, 0, 1});
  in.k = make<T>("k", {1, 2, 1, 2}, {1, 1, 1, -1});
  in.v = make<T>("v", {1, 2, 1, 1}, {2, 1});
  in.r = make<T>("r", {1, 2, 1}, {1, 0.5});
  in.process_noise = dense_process_noise<T>::diagonal(make<T>("omega", {2}, {1, 0.5}));  // static, broadcast
  in.scale = from_double<T>(0.5);
  return in;
}

template <class T>
T at(const tensor<T>& x, std::size_t i) {
  return x.data()[i];
}

}  // namespace

TEST_CASE("dense: hand-worked two-token example, every intermediate (K = 2, V = 1, D = I)") {
  const auto out = dense_forward(hand_example<R>(), run_options{1, true});
  // Token 1. Ŝ_1 = S_0 = 0. P̂_1 = I + diag(1, 1/2) = diag(2, 3/2).
  //   u = P̂_1 k = (2, 3/2); s_1 = kᵀu + r = 2 + 3/2 + 1 = 9/2; κ_1 = u / s_1 = (4/9, 1/3).
  //   innovation e = v - Ŝᵀk = 2; m_1 = e² / s_1 = 4 / (9/2) = 8/9.
  //   P_1 = P̂_1 - u uᵀ / s_1 = [[2 - 4·2/9, -3·2/9], [-3·2/9, 3/2 - (9/4)·2/9]]
  //       = [[10/9, -2/3], [-2/3, 1]].
  //   S_1 = Ŝ_1 + κ_1 e = (8/9, 2/3); o_1 = S_1ᵀ (τ q_1) = (8/9)(1/2) = 4/9.
  //   readout variance τ² q_1ᵀ P_1 q_1 = (1/4)(10/9) = 5/18.
  CHECK(out.predicted_covariance->data() == std::vector<R>{2, 0, 0, R(3, 2), R(19, 9), R(-2, 3), R(-2, 3), R(3, 2)});
  CHECK(at(out.innovation_variance, 0) == R(9, 2));
  CHECK(at(*out.gain, 0) == R(4, 9));
  CHECK(at(*out.gain, 1) == R(1, 3));
  CHECK(at(out.mahalanobis, 0) == R(8, 9));
  CHECK(at(*out.covariance, 0) == R(10, 9));
  CHECK(at(*out.covariance, 1) == R(-2, 3));
  CHECK(at(*out.covariance, 2) == R(-2, 3));
  CHECK(at(*out.covariance, 3) == 1);
  CHECK(at(*out.state, 0) == R(8, 9));
  CHECK(at(*out.state, 1) == R(2, 3));
  CHECK(at(out.o, 0) == R(4, 9));
  CHECK(at(out.readout_variance, 0) == R(5, 18));
  // Token 2. Ŝ_2 = S_1 = (8/9, 2/3). P̂_2 = P_1 + Ω = [[19/9, -2/3], [-2/3, 3/2]] (checked above).
  //   u = P̂_2 (1, -1) = (19/9 + 2/3, -2/3 - 3/2) = (25/9, -13/6);
  //   s_2 = 25/9 + 13/6 + 1/2 = (50 + 39 + 9)/18 = 49/9; κ_2 = (25/49, -39/98).
  //   e = 1 - (8/9 - 2/3) = 7/9; m_2 = (49/81) / (49/9) = 1/9.
  //   P_2 = P̂_2 - u uᵀ / s_2: (1,1) 19/9 - (625/81)(9/49) = 19/9 - 625/441 = 34/49,
  //        (1,2) -2/3 + (25/9)(13/6)(9/49) = -2/3 + 325/294 = 43/98, (2,2) 3/2 - (169/36)(9/49) = 125/196.
  //   S_2 = Ŝ_2 + κ_2 e = (8/9 + 175/441, 2/3 - 273/882) = (9/7, 5/14).
  //   o_2 = S_2ᵀ (τ q_2) = (5/14)(1/2) = 5/28; readout variance (1/4)(125/196) = 125/784.
  CHECK(at(out.innovation_variance, 1) == R(49, 9));
  CHECK(at(*out.gain, 2) == R(25, 49));
  CHECK(at(*out.gain, 3) == R(-39, 98));
  CHECK(at(out.mahalanobis, 1) == R(1, 9));
  CHECK(out.final_covariance.data() == std::vector<R>{R(34, 49), R(43, 98), R(43, 98), R(125, 196)});
  CHECK(out.final_state.data() == std::vector<R>{R(9, 7), R(5, 14)});
  CHECK(out.o.data() == std::vector<R>{R(4, 9), R(5, 28)});
  CHECK(out.readout_variance.data() == std::vector<R>{R(5, 18), R(125, 784)});
  CHECK_FALSE(out.log_likelihood.has_value());  // rationals have no log: s_t and m_t instead
  CHECK(out.final_state.name() == "final_state");
  CHECK(out.o.shape() == shape_t{1, 2, 1, 1});
}

TEST_CASE("dense: the log marginal likelihood in double is -(V log(2 pi s) + m) / 2") {
  const auto out = dense_forward(hand_example<double>());
  REQUIRE(out.log_likelihood.has_value());
  const double pi = std::numbers::pi;
  CHECK(out.log_likelihood->data()[0] == doctest::Approx(-(std::log(2 * pi * 4.5) + 8.0 / 9) / 2).epsilon(1e-15));
  CHECK(out.log_likelihood->data()[1] == doctest::Approx(-(std::log(2 * pi * 49.0 / 9) + 1.0 / 9) / 2).epsilon(1e-15));
  CHECK(out.o.data()[1] == doctest::Approx(5.0 / 28).epsilon(1e-15));
  CHECK_FALSE(out.predicted_covariance.has_value());  // internals only on request
}

TEST_CASE("dense: the log likelihood in MPFR at 256 bits") {
  precision_scope scope(256);
  const auto out = dense_forward(hand_example<mpfr_real>());
  mpfr_real pi;
  mpfr_const_pi(pi.backend().data(), MPFR_RNDN);
  const mpfr_real expected = -(log(2 * pi * mpfr_real(9) / 2) + mpfr_real(8) / 9) / 2;
  CHECK(abs(out.log_likelihood->data()[0] - expected) < scalar_traits<mpfr_real>::ldexp(mpfr_real(1), -250));
}

TEST_CASE("dense: defaults are D = I, Omega = 0, S_0 = 0, P_0 = I and tau = 1/sqrt(K)") {
  // K = 4 (a perfect square: tau = 1/2 exactly). One token, k = e_1, v = 3, r = 1, q = e_1:
  // s = 1 + 1 = 2, kappa = e_1 / 2, S_1 = (3/2) e_1, o = (3/2)(1/2) = 3/4, P_1 = diag(1/2, 1, 1, 1).
  dense_inputs<R> in;
  in.q = make<R>("q", {1, 1, 1, 4}, {1, 0, 0, 0});
  in.k = make<R>("k", {1, 1, 1, 4}, {1, 0, 0, 0});
  in.v = make<R>("v", {1, 1, 1, 1}, {3});
  in.r = make<R>("r", {}, {1});  // a scalar, broadcast to [B, T, H]
  const auto out = dense_forward(in);
  CHECK(out.o.data() == std::vector<R>{R(3, 4)});
  CHECK(out.final_state.data() == std::vector<R>{R(3, 2), 0, 0, 0});
  CHECK(out.final_covariance.data() == std::vector<R>{R(1, 2), 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1});
  // The same with every default spelled out.
  in.transition = dense_transition<R>::full(make<R>("D", {4, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  in.process_noise = dense_process_noise<R>::full(tensor<R>("Omega", {4, 4}));
  in.initial_state = tensor<R>("initial_state", {1, 1, 4, 1});
  in.initial_covariance = make<R>("initial_covariance", {4, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1});
  in.scale = R(1, 2);
  const auto spelled = dense_forward(in);
  CHECK(spelled.o.data() == out.o.data());
  CHECK(spelled.final_covariance.data() == out.final_covariance.data());
}

TEST_CASE("dense: broadcast parameters equal their full-shaped forms") {
  // B = 2, T = 3, H = 2, K = 2, V = 2. alpha [B, T, H, 1] (a scalar decay per token and head), omega
  // [H, K], r [H], P_0 [K, K], S_0 [H, K, V], against the same values written out in full.
  const std::size_t B = 2, L = 3, H = 2, K = 2, V = 2;
  dense_inputs<R> small;
  small.q = tensor<R>("q", {B, L, H, K});
  small.k = tensor<R>("k", {B, L, H, K});
  small.v = tensor<R>("v", {B, L, H, V});
  for (std::size_t i = 0; i < small.q.size(); ++i) {
    small.q.data()[i] = R(static_cast<long>(i % 5) - 2, 3);
    small.k.data()[i] = R(static_cast<long>(i % 7) - 3, 2);
  }
  for (std::size_t i = 0; i < small.v.size(); ++i) small.v.data()[i] = R(static_cast<long>(i % 3), 4);
  tensor<R> alpha("alpha", {B, L, H, 1});
  for (std::size_t i = 0; i < alpha.size(); ++i) alpha.data()[i] = R(static_cast<long>(i % 4) + 1, 4);
  small.transition = dense_transition<R>::diagonal(alpha);
  small.process_noise = dense_process_noise<R>::diagonal(make<R>("omega", {H, K}, {1, 0.5, 0.25, 0}));
  small.r = make<R>("r", {H}, {1, 2});
  small.initial_covariance = make<R>("initial_covariance", {K, K}, {2, 1, 1, 2});
  small.initial_state = make<R>("initial_state", {H, K, V}, {1, 0, 0, 1, -1, 2, 0.5, 0});
  small.scale = R(1);

  dense_inputs<R> full = small;
  tensor<R> alpha_full("alpha", {B, L, H, K}), omega_full("omega", {B, L, H, K}), r_full("r", {B, L, H});
  tensor<R> p0_full("initial_covariance", {B, H, K, K}), s0_full("initial_state", {B, H, K, V});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t t = 0; t < L; ++t) {
        r_full(b, t, h) = small.r(h);
        for (std::size_t i = 0; i < K; ++i) {
          alpha_full(b, t, h, i) = alpha(b, t, h, 0);
          omega_full(b, t, h, i) = small.process_noise->values(h, i);
        }
      }
      for (std::size_t i = 0; i < K; ++i) {
        for (std::size_t j = 0; j < K; ++j) p0_full(b, h, i, j) = (*small.initial_covariance)(i, j);
        for (std::size_t j = 0; j < V; ++j) s0_full(b, h, i, j) = (*small.initial_state)(h, i, j);
      }
    }
  full.transition = dense_transition<R>::diagonal(alpha_full);
  full.process_noise = dense_process_noise<R>::diagonal(omega_full);
  full.r = r_full;
  full.initial_covariance = p0_full;
  full.initial_state = s0_full;

  const auto a = dense_forward(small), b = dense_forward(full);
  CHECK(a.o.data() == b.o.data());
  CHECK(a.final_state.data() == b.final_state.data());
  CHECK(a.final_covariance.data() == b.final_covariance.data());
  CHECK(a.mahalanobis.data() == b.mahalanobis.data());
}

TEST_CASE("dense: log gates g give the decays alpha = e^g (double)") {
  auto linear = hand_example<double>();
  auto logged = hand_example<double>();
  linear.transition = dense_transition<double>::diagonal(make<double>("alpha", {2}, {std::exp(-0.5), std::exp(-1.0)}));
  logged.transition = dense_transition<double>::diagonal(make<double>("g", {2}, {-0.5, -1.0}), gate_space::log);
  CHECK(dense_forward(linear).o.data() == dense_forward(logged).o.data());
}

TEST_CASE("dense: bad inputs are rejected with a message naming the tensor, the index and the rule") {
  auto in = hand_example<R>();
  SUBCASE("r <= 0") {
    in.r = make<R>("r", {1, 2, 1}, {1, 0});
    CHECK_THROWS_WITH_AS(dense_forward(in), "r: element [0, 1, 0] is 0; rule: observation noise must be > 0",
                         input_error);
    in.r = make<R>("r", {1, 2, 1}, {-0.5, 1});
    CHECK_THROWS_WITH_AS(dense_forward(in), "r: element [0, 0, 0] is -1/2; rule: observation noise must be > 0",
                         input_error);
  }
  SUBCASE("asymmetric Omega") {
    in.process_noise = dense_process_noise<R>::full(make<R>("Omega", {1, 2, 1, 2, 2}, {1, 0, 0, 1, 1, 0.5, 0.25, 1}));
    CHECK_THROWS_WITH_AS(dense_forward(in),
                         "Omega: the matrix at [0, 1, 0] is not symmetric: element [0, 1, 0, 0, 1] is 1/2 but "
                         "element [0, 1, 0, 1, 0] is 1/4; rule: process noise must be exactly symmetric",
                         input_error);
  }
  SUBCASE("Omega not positive semidefinite") {
    in.process_noise = dense_process_noise<R>::full(make<R>("Omega", {1, 2, 1, 2, 2}, {1, 0, 0, 1, 1, 2, 2, 1}));
    CHECK_THROWS_WITH_AS(dense_forward(in),
                         "Omega: the matrix at [0, 1, 0] is not positive semidefinite (pivot 1 of its LDL^T "
                         "factorisation is -3); rule: process noise must be symmetric positive semidefinite",
                         input_error);
    in.process_noise = dense_process_noise<R>::full(make<R>("Omega", {2, 2}, {0, 1, 1, 1}));
    CHECK_THROWS_WITH_AS(dense_forward(in),
                         "Omega: the matrix at [] is not positive semidefinite (pivot 0 of its LDL^T "
                         "factorisation is 0); rule: process noise must be symmetric positive semidefinite",
                         input_error);
    in.process_noise = dense_process_noise<R>::diagonal(make<R>("omega", {2}, {1, -0.25}));
    CHECK_THROWS_WITH_AS(dense_forward(in), "omega: element [1] is -1/4; rule: process noise must be >= 0",
                         input_error);
  }
  SUBCASE("P_0 not symmetric positive definite") {
    // Positive semidefinite but singular: [[1, 1], [1, 1]] has pivots 1, 0.
    in.initial_covariance = make<R>("initial_covariance", {1, 1, 2, 2}, {1, 1, 1, 1});
    CHECK_THROWS_WITH_AS(dense_forward(in),
                         "initial_covariance: the matrix at [0, 0] is not positive definite (pivot 1 of its LDL^T "
                         "factorisation is 0); rule: the prior covariance P_0 must be symmetric positive definite",
                         input_error);
    in.initial_covariance = make<R>("initial_covariance", {2, 2}, {1, 2, 3, 4});
    CHECK_THROWS_WITH_AS(dense_forward(in),
                         "initial_covariance: the matrix at [] is not symmetric: element [0, 1] is 2 but element "
                         "[1, 0] is 3; rule: the prior covariance P_0 must be exactly symmetric",
                         input_error);
    in.initial_covariance = make<R>("initial_covariance", {3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1});
    CHECK_THROWS_WITH_AS(dense_forward(in),
                         "initial_covariance: shape [3, 3], expected its last two axes to be K x K = 2 x 2",
                         input_error);
  }
  SUBCASE("NaN and infinity (double)") {
    auto d = hand_example<double>();
    d.v.data()[1] = std::nan("");
    CHECK_THROWS_WITH_AS(dense_forward(d), "v: element [0, 1, 0, 0] is nan; rule: must be finite (no NaN or infinity)",
                         input_error);
    d = hand_example<double>();
    d.transition = dense_transition<double>::diagonal(make<double>("g", {2}, {0, -INFINITY}), gate_space::log);
    CHECK_THROWS_WITH_AS(dense_forward(d), "g: element [1] is -inf; rule: must be finite (no NaN or infinity)",
                         input_error);
  }
  SUBCASE("T = 0") {
    in.q = tensor<R>("q", {1, 0, 1, 2});
    CHECK_THROWS_WITH_AS(dense_forward(in), "q: T = 0 tokens; rule: a sequence needs at least one token", input_error);
  }
  SUBCASE("shape mismatch") {
    in.k = tensor<R>("k", {1, 2, 1, 3});
    CHECK_THROWS_WITH_AS(dense_forward(in), "k: shape [1, 2, 1, 3], expected [1, 2, 1, 2]", input_error);
    in = hand_example<R>();
    in.v = tensor<R>("v", {1, 3, 1, 1});
    CHECK_THROWS_WITH_AS(dense_forward(in), "v: shape [1, 3, 1, 1], expected [1, 2, 1, V] with V >= 1 (B, T, H of q)",
                         input_error);
    in = hand_example<R>();
    in.r = tensor<R>("r", {1, 3, 1}, R(1));
    CHECK_THROWS_WITH_AS(dense_forward(in),
                         "r: shape [1, 3, 1] cannot broadcast to [1, 2, 1] (dimension 1 is 3, expected 2 or 1)",
                         input_error);
    in = hand_example<R>();
    in.transition = dense_transition<R>::full(tensor<R>("D", {1, 2, 1, 2}));
    CHECK_THROWS_WITH_AS(dense_forward(in), "D: shape [1, 2, 1, 2], expected its last two axes to be K x K = 2 x 2",
                         input_error);
  }
  SUBCASE("missing r, log gates over rationals, irrational default scale") {
    in.r = tensor<R>();
    CHECK_THROWS_WITH_AS(dense_forward(in), "r: missing; rule: this input is required", input_error);
    in = hand_example<R>();
    in.transition = dense_transition<R>::diagonal(tensor<R>("g", {2}), gate_space::log);
    CHECK_THROWS_WITH_AS(
        dense_forward(in),
        "g: gate_space::log needs exp(g), which is irrational for rational g != 0; rule: exact scalars "
        "take the decays alpha with gate_space::linear",
        input_error);
    in = hand_example<R>();
    in.scale.reset();
    CHECK_THROWS_WITH_AS(dense_forward(in),
                         "scale: not given, and 1/sqrt(K) = 1/sqrt(2) is irrational; rule: exact scalars need the "
                         "query scale tau when K is not a perfect square",
                         input_error);
  }
}

TEST_CASE("dense: an MPFI run encloses the MPFR run at the same precision (both forms)") {
  // Both forms perform the same operation sequence for every scalar type (products by plain loops,
  // solves without pivoting), and rounding to nearest is monotone, so every MPFR value lies in the
  // MPFI interval computed at the same precision: a certified running-error bound. K = 6, V = 2,
  // T = 24, deterministic dyadic inputs (exact in both types).
  const std::size_t L = 24, K = 6, V = 2;
  std::uint64_t state = 12345;
  const auto next = [&](int bound, int exponent) {  // n 2^exponent, |n| <= bound
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return std::ldexp(static_cast<double>(static_cast<int>((state >> 33) % (2 * bound + 1)) - bound), exponent);
  };
  const auto fill = [&](shape_t shape, int bound, int exponent) {
    std::vector<double> values(element_count(shape));
    for (double& x : values) x = next(bound, exponent);
    return values;
  };
  const auto q = fill({1, L, 1, K}, 4, -2), k = fill({1, L, 1, K}, 4, -2), v = fill({1, L, 1, V}, 4, -1);
  const auto alpha = fill({1, L, 1, K}, 8, -3);
  std::vector<double> omega(L * K), r(L);
  for (double& w : omega) w = 0.125 + std::fabs(next(4, -3));
  for (double& x : r) x = 0.5 + std::fabs(next(4, -2));
  const auto inputs = [&]<class T>() {
    dense_inputs<T> in;
    in.q = make<T>("q", {1, L, 1, K}, q);
    in.k = make<T>("k", {1, L, 1, K}, k);
    in.v = make<T>("v", {1, L, 1, V}, v);
    in.r = make<T>("r", {1, L, 1}, r);
    in.transition = dense_transition<T>::diagonal(make<T>("alpha", {1, L, 1, K}, alpha));
    in.process_noise = dense_process_noise<T>::diagonal(make<T>("omega", {1, L, 1, K}, omega));
    in.scale = from_double<T>(0.5);
    return in;
  };
  precision_scope scope(256);
  const auto points = inputs.template operator()<mpfr_real>();
  const auto intervals = inputs.template operator()<mpfi_interval>();
  const auto inside = [](const tensor<mpfr_real>& x, const tensor<mpfi_interval>& enclosure) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (mpfi_is_inside_fr(x.data()[i].backend().data(), enclosure.data()[i].backend().data()) <= 0) return false;
    return true;
  };
  const auto dense = dense_forward(points, run_options{1, true});
  const auto dense_enclosure = dense_forward(intervals, run_options{1, true});
  CHECK(inside(dense.o, dense_enclosure.o));
  CHECK(inside(*dense.covariance, *dense_enclosure.covariance));
  CHECK(inside(*dense.state, *dense_enclosure.state));
  CHECK(inside(*dense.log_likelihood, *dense_enclosure.log_likelihood));
  const auto info = information_forward(points, run_options{1, true});
  const auto info_enclosure = information_forward(intervals, run_options{1, true});
  CHECK(inside(info.o, info_enclosure.o));
  CHECK(inside(*info.covariance, *info_enclosure.covariance));
  CHECK(inside(info.final_precision, info_enclosure.final_precision));
}
