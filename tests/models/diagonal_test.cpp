// The diagonal KDN (docs/math.md §4) by hand: a 2-token example with every intermediate, the parallel
// form on the same example, defaults, broadcasting, log gates, threads, and the input checks
// verbatim.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "input_error_message.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"
#include "kalman_oracle/scalar/types.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::message_of;
using R = rational;

namespace {

// B = H = 1, T = 2, K = 2, V = 1; decays passed linearly; μ = 2 (= K, the default), τ = 1.
//   prior: p_0 = (1, 2), S_0 = (1, −1)ᵀ
//   token 1: α = (1, 1/2), ω = (1, 1/2), r = 1, k = (1, 2), v = 3, q = (1, 1)
//   token 2: α = (1/2, 1), ω = (2/5, 8/9), r = 2, k = (2, 1), v = 1, q = (1, −1)
diagonal_kdn_inputs<R> example() {
  diagonal_kdn_inputs<R> in;
  in.q = tensor<R>("q", {1, 2, 1, 2}, std::vector<R>{R(1), R(1), R(1), R(-1)});
  in.k = tensor<R>("k", {1, 2, 1, 2}, std::vector<R>{R(1), R(2), R(2), R(1)});
  in.v = tensor<R>("v", {1, 2, 1, 1}, std::vector<R>{R(3), R(1)});
  in.g = tensor<R>("g", {1, 2, 1, 2}, std::vector<R>{R(1), R(1, 2), R(1, 2), R(1)});
  in.gates = gate_space::linear;
  in.omega = tensor<R>("omega", {1, 2, 1, 2}, std::vector<R>{R(1), R(1, 2), R(2, 5), R(8, 9)});
  in.r = tensor<R>("r", {1, 2, 1}, std::vector<R>{R(1), R(2)});
  in.mu = tensor<R>("mu", {1}, std::vector<R>{R(2)});
  in.initial_covariance = tensor<R>("initial_covariance", {1, 1, 2}, std::vector<R>{R(1), R(2)});
  in.initial_state = tensor<R>("initial_state", {1, 1, 2, 1}, std::vector<R>{R(1), R(-1)});
  in.scale = R(1);
  return in;
}

template <class Out>
void check_example(const Out& out) {
  // Token 1.
  //   p̂_1 = α² ⊙ p_0 + ω = (1·1 + 1, (1/4)·2 + 1/2) = (2, 1)
  //   s_1 = r + Σ p̂ k² = 1 + 2·1 + 1·4 = 7;  κ_1 = p̂ ⊙ k / s = (2/7, 2/7)
  //   Ŝ_1 = diag(α) S_0 = (1, −1/2);  Ŝ_1ᵀ k = 1 − 1 = 0;  v − Ŝᵀk = 3
  //   S_1 = Ŝ_1 + κ_1 · 3 = (1 + 6/7, −1/2 + 6/7) = (13/7, 5/14)
  //   u_1 = μ k² / r = (2, 8);  p_1 = p̂ / (1 + u p̂) = (2/5, 1/9)
  //   o_1 = S_1ᵀ q = 13/7 + 5/14 = 31/14;  variance q² · p_1 = 2/5 + 1/9 = 23/45
  CHECK((*out.predicted_covariance)(0, 0, 0, 0) == R(2));
  CHECK((*out.predicted_covariance)(0, 0, 0, 1) == R(1));
  CHECK((*out.gain)(0, 0, 0, 0) == R(2, 7));
  CHECK((*out.gain)(0, 0, 0, 1) == R(2, 7));
  CHECK(out.o(0, 0, 0, 0) == R(31, 14));
  CHECK(out.readout_variance(0, 0, 0) == R(23, 45));
  // Token 2.
  //   p̂_2 = ((1/4)(2/5) + 2/5, 1·(1/9) + 8/9) = (1/2, 1)
  //   s_2 = 2 + (1/2)·4 + 1·1 = 5;  κ_2 = ((1/2)·2 / 5, 1·1 / 5) = (1/5, 1/5)
  //   Ŝ_2 = diag(1/2, 1) S_1 = (13/14, 5/14);  Ŝ_2ᵀ k = 26/14 + 5/14 = 31/14;  v − Ŝᵀk = −17/14
  //   S_2 = (13/14 − 17/70, 5/14 − 17/70) = (48/70, 8/70) = (24/35, 4/35)
  //   u_2 = 2·(4, 1) / 2 = (4, 1);  p_2 = ((1/2) / 3, 1 / 2) = (1/6, 1/2)
  //   o_2 = 24/35 − 4/35 = 4/7;  variance 1/6 + 1/2 = 2/3
  CHECK((*out.predicted_covariance)(0, 1, 0, 0) == R(1, 2));
  CHECK((*out.predicted_covariance)(0, 1, 0, 1) == R(1));
  CHECK((*out.gain)(0, 1, 0, 0) == R(1, 5));
  CHECK((*out.gain)(0, 1, 0, 1) == R(1, 5));
  CHECK(out.o(0, 1, 0, 0) == R(4, 7));
  CHECK(out.readout_variance(0, 1, 0) == R(2, 3));
  CHECK(out.final_state(0, 0, 0, 0) == R(24, 35));
  CHECK(out.final_state(0, 0, 1, 0) == R(4, 35));
  CHECK(out.final_covariance(0, 0, 0) == R(1, 6));
  CHECK(out.final_covariance(0, 0, 1) == R(1, 2));
}

template <class T>
void check_same(const diagonal_kdn_outputs<T>& a, const diagonal_kdn_outputs<T>& b) {
  CHECK(a.o.data() == b.o.data());
  CHECK(a.final_state.data() == b.final_state.data());
  CHECK(a.final_covariance.data() == b.final_covariance.data());
  CHECK(a.readout_variance.data() == b.readout_variance.data());
}

/// The error message of f(), which must throw input_error.
}  // namespace

TEST_CASE("diagonal KDN: hand-worked 2-token example (K = 2, V = 1)") {
  check_example(diagonal_kdn_forward(example(), {1, true}));
}

TEST_CASE("diagonal KDN: the parallel form reproduces the example for every chunk size and rescale mode") {
  // Scan and memory chunks of 1 (one token each), 2 (the whole sequence) and 3 (longer than T = 2).
  for (std::size_t chunk : {1u, 2u, 3u})
    for (std::size_t memory_chunk : {1u, 2u, 3u})
      for (rescale_mode mode :
           {rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two})
        check_example(diagonal_kdn_parallel(example(), {scan_schedule::chunked, chunk, mode, memory_chunk}, {1, true}));
  const kdn_scan_options empty_memory_chunks{scan_schedule::chunked, 2, rescale_mode::none, 0};
  CHECK(message_of([&] { diagonal_kdn_parallel(example(), empty_memory_chunks); }) ==
        "memory_chunk_size: 0; rule: a chunk of the memory needs at least one token");
  kdn_scan_options beta_form;
  beta_form.memory_association = kdn_memory_association::beta_form;
  CHECK(message_of([&] { diagonal_kdn_parallel(example(), beta_form); }) ==
        "memory_association: beta_form; rule: the diagonal KDN's gain P̂_t k_t / (r_t + k_tᵀ P̂_t k_t) is not a "
        "multiple of k_t, only the isotropic model has the β-form");
}

TEST_CASE("diagonal KDN: no internals unless asked for") {
  const auto out = diagonal_kdn_forward(example());
  CHECK(!out.predicted_covariance);
  CHECK(!out.gain);
  CHECK(out.o.shape() == shape_t{1, 2, 1, 1});
  CHECK(out.final_state.shape() == shape_t{1, 1, 2, 1});
  CHECK(out.final_covariance.shape() == shape_t{1, 1, 2});
  CHECK(out.readout_variance.shape() == shape_t{1, 2, 1});
}

TEST_CASE("diagonal KDN: defaults are μ = K, p_0 = 1, S_0 = 0, τ = 1/√K") {
  auto given = example();
  given.q = tensor<R>("q", {1, 2, 1, 4}, std::vector<R>{R(1), R(2), R(0), R(-1), R(1, 2), R(1), R(3), R(0)});
  given.k = tensor<R>("k", {1, 2, 1, 4}, std::vector<R>{R(1), R(0), R(1), R(2), R(-1), R(1), R(1, 3), R(1)});
  given.g = tensor<R>("g", {1}, std::vector<R>{R(3, 4)});
  given.omega = tensor<R>("omega", {1}, std::vector<R>{R(1, 8)});
  auto defaulted = given;
  given.mu = tensor<R>("mu", {1}, std::vector<R>{R(4)});
  given.initial_covariance = tensor<R>("initial_covariance", {1}, std::vector<R>{R(1)});
  given.initial_state = tensor<R>("initial_state", {1}, std::vector<R>{R(0)});
  given.scale = R(1, 2);
  defaulted.mu.reset();
  defaulted.initial_covariance.reset();
  defaulted.initial_state.reset();
  defaulted.scale.reset();
  check_same(diagonal_kdn_forward(given), diagonal_kdn_forward(defaulted));
}

TEST_CASE("diagonal KDN: broadcast parameters equal their expanded tensors") {
  // B = 2, T = 3, H = 2, K = 2, V = 1; ω per key channel [K], r per head [H], α per (token, head) [1, T, H, 1].
  const std::size_t B = 2, N = 3, H = 2, K = 2, V = 1;
  diagonal_kdn_inputs<R> small;
  small.q = tensor<R>("q", {B, N, H, K});
  small.k = tensor<R>("k", {B, N, H, K});
  small.v = tensor<R>("v", {B, N, H, V});
  for (std::size_t n = 0; n < small.q.size(); ++n) {
    small.q.data()[n] = R(static_cast<long>(n % 5) - 2, 3);
    small.k.data()[n] = R(static_cast<long>(n % 7) - 3, 2);
  }
  for (std::size_t n = 0; n < small.v.size(); ++n) small.v.data()[n] = R(static_cast<long>(n % 3) + 1);
  small.gates = gate_space::linear;
  small.g = tensor<R>("g", {1, N, H, 1}, std::vector<R>{R(1), R(1, 2), R(3, 4), R(1, 3), R(1), R(2, 3)});
  small.omega = tensor<R>("omega", {K}, std::vector<R>{R(1, 4), R(2)});
  small.r = tensor<R>("r", {H}, std::vector<R>{R(1, 2), R(3)});
  small.scale = R(1);
  auto full = small;
  full.g = tensor<R>("g", {B, N, H, K});
  full.omega = tensor<R>("omega", {B, N, H, K});
  full.r = tensor<R>("r", {B, N, H});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < N; ++t)
      for (std::size_t h = 0; h < H; ++h) {
        full.r(b, t, h) = small.r(h);
        for (std::size_t i = 0; i < K; ++i) {
          full.g(b, t, h, i) = small.g(0, t, h, 0);
          full.omega(b, t, h, i) = small.omega(i);
        }
      }
  check_same(diagonal_kdn_forward(small), diagonal_kdn_forward(full));
  check_same(diagonal_kdn_parallel(small), diagonal_kdn_forward(full));
}

TEST_CASE("diagonal KDN: log gates are decays e^g (binary64)") {
  diagonal_kdn_inputs<double> in;
  in.q = tensor<double>("q", {1, 2, 1, 2}, std::vector<double>{0.5, -1.0, 2.0, 0.25});
  in.k = tensor<double>("k", {1, 2, 1, 2}, std::vector<double>{1.0, 0.5, -0.5, 1.0});
  in.v = tensor<double>("v", {1, 2, 1, 1}, std::vector<double>{1.0, -2.0});
  in.g = tensor<double>("g", {1, 2, 1, 2}, std::vector<double>{-0.1, -0.7, 0.0, -2.0});
  in.gates = gate_space::log;
  in.omega = tensor<double>("omega", {1}, std::vector<double>{0.125});
  in.r = tensor<double>("r", {1}, std::vector<double>{0.5});
  auto linear = in;
  linear.gates = gate_space::linear;
  for (double& x : linear.g.data()) x = std::exp(x);
  check_same(diagonal_kdn_forward(in), diagonal_kdn_forward(linear));
  // Default τ over binary64: fla's 2 ** -0.5.
  auto scaled = in;
  scaled.scale = std::pow(2.0, -0.5);
  check_same(diagonal_kdn_forward(in), diagonal_kdn_forward(scaled));
}

TEST_CASE("diagonal KDN: threads = 3 gives the one-thread result") {
  auto in = example();
  in.q = tensor<R>("q", {2, 2, 3, 2});
  in.k = tensor<R>("k", {2, 2, 3, 2});
  in.v = tensor<R>("v", {2, 2, 3, 1});
  for (std::size_t n = 0; n < in.q.size(); ++n) {
    in.q.data()[n] = R(static_cast<long>(n % 4), 3);
    in.k.data()[n] = R(static_cast<long>(n % 5) - 2);
  }
  for (std::size_t n = 0; n < in.v.size(); ++n) in.v.data()[n] = R(static_cast<long>(n));
  in.g = tensor<R>("g", {2}, std::vector<R>{R(1, 2), R(1)});
  in.omega = tensor<R>("omega", {1}, std::vector<R>{R(1, 3)});
  in.r = tensor<R>("r", {3}, std::vector<R>{R(1), R(2), R(1, 2)});
  in.mu = tensor<R>("mu", {3}, std::vector<R>{R(1), R(2), R(5)});
  in.initial_covariance.reset();
  in.initial_state.reset();
  check_same(diagonal_kdn_forward(in, {3, false}), diagonal_kdn_forward(in, {1, false}));
  check_same(diagonal_kdn_parallel(in, {}, {3, false}), diagonal_kdn_forward(in, {1, false}));
}

TEST_CASE("diagonal KDN: bad inputs are named with the element and the rule") {
  {
    auto in = example();
    in.r(0, 1, 0) = R(0);
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "r: element [0, 1, 0] is 0; rule: observation noise r must be > 0");
    CHECK(message_of([&] { diagonal_kdn_parallel(in); }) ==
          "r: element [0, 1, 0] is 0; rule: observation noise r must be > 0");
    in.r(0, 1, 0) = R(-1, 2);
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "r: element [0, 1, 0] is -1/2; rule: observation noise r must be > 0");
  }
  {
    auto in = example();
    in.omega(0, 0, 0, 1) = R(-1, 2);
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "omega: element [0, 0, 0, 1] is -1/2; rule: process noise omega must be >= 0");
  }
  {
    auto in = example();
    (*in.initial_covariance)(0, 0, 1) = R(0);
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "initial_covariance: element [0, 0, 1] is 0; rule: prior covariance p_0 must be > 0");
  }
  {
    auto in = example();
    in.mu = tensor<R>("mu", {1}, std::vector<R>{R(-2)});
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "mu: element [0] is -2; rule: information scale mu must be > 0");
  }
  {
    auto in = example();
    in.g(0, 1, 0, 0) = R(0);
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "g: element [0, 1, 0, 0] is 0; rule: decay alpha must be in (0, 1]");
    in.g(0, 1, 0, 0) = R(3, 2);
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "g: element [0, 1, 0, 0] is 3/2; rule: decay alpha must be in (0, 1]");
    in.gates = gate_space::log;
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "g: gate_space::log needs exp(g), which is irrational for rational g != 0; rule: exact scalars take "
          "the decays alpha with gate_space::linear");
  }
  {
    auto in = example();
    in.k = tensor<R>("k", {1, 2, 1, 3});
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) == "k: shape [1, 2, 1, 3], expected [1, 2, 1, 2]");
  }
  {
    auto in = example();
    in.q = tensor<R>("q", {1, 0, 1, 2});
    in.k = tensor<R>("k", {1, 0, 1, 2});
    in.v = tensor<R>("v", {1, 0, 1, 1});
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "q: T = 0 tokens; rule: a sequence needs at least one token");
  }
  {
    auto in = example();
    in.r = tensor<R>("r", {3}, R(1));
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "r: shape [3] cannot broadcast to [1, 2, 1] (dimension 2 is 3, expected 1 or 1)");
  }
  {
    auto in = example();
    in.v = tensor<R>("v", {1, 3, 1, 1});
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "v: shape [1, 3, 1, 1], expected [B, T, H, V] with [B, T, H] = [1, 2, 1]");
  }
  {
    auto in = example();
    in.scale.reset();
    in.q = tensor<R>("q", {1, 2, 1, 2}, R(1));
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "scale: not given, and 1/sqrt(K) = 1/sqrt(2) is irrational; rule: exact scalars need the query scale "
          "tau when K is not a perfect square");
    in.scale = R(0);
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) == "scale: 0; rule: query scale tau must be finite and > 0");
  }
  {
    diagonal_kdn_inputs<double> in;
    in.q = tensor<double>("q", {1, 2, 1, 2}, 1.0);
    in.k = tensor<double>("k", {1, 2, 1, 2}, 1.0);
    in.v = tensor<double>("v", {1, 2, 1, 1}, 1.0);
    in.g = tensor<double>("g", {1}, -0.5);
    in.omega = tensor<double>("omega", {1}, 0.0);
    in.r = tensor<double>("r", {1}, 1.0);
    in.v(0, 1, 0, 0) = std::numeric_limits<double>::quiet_NaN();
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "v: element [0, 1, 0, 0] is nan; rule: must be finite (no NaN or infinity)");
    in.v(0, 1, 0, 0) = 1.0;
    in.g(0) = 0.5;
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "g: element [0] is 0.5; rule: log gate g must be <= 0 (decay alpha = e^g in (0, 1])");
    in.g(0) = -std::numeric_limits<double>::infinity();
    CHECK(message_of([&] { diagonal_kdn_forward(in); }) ==
          "g: element [0] is -inf; rule: must be finite (no NaN or infinity)");
  }
}

TEST_CASE("diagonal KDN: the memory path alone, gains given, reproduces the example") {
  const auto in = example();
  const auto ref = diagonal_kdn_forward(in, {1, true});
  kdn_memory_inputs<R> mem{in.q, in.k, in.v, in.g, in.gates, *ref.gain, in.initial_state, in.scale};
  const auto out = kdn_memory_forward(mem);
  CHECK(out.o.data() == ref.o.data());
  CHECK(out.final_state.data() == ref.final_state.data());
}
