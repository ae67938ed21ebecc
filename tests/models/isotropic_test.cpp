// The isotropic KDN (docs/math.md §5) by hand: a 2-token example with every intermediate, the parallel
// form on it, defaults, broadcasting, threads, and the input checks verbatim.
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "input_error_message.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"
#include "kalman_oracle/scalar/types.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::message_of;
using R = rational;

namespace {

// B = H = 1, T = 2, K = 2, V = 1; decays passed linearly; μ = 2 (= K), τ = 1.
//   prior: b_0 = 1, S_0 = (1, −1)ᵀ
//   token 1: α = (1, 1/2), ω = 3/8, r = 1, k = (1, 2), v = 3, q = (1, 1)
//   token 2: α = (1/2, 1/2), ω = 23/24, r = 5, k = (2, 1), v = 1, q = (1, −1)
isotropic_kdn_inputs<R> example() {
  isotropic_kdn_inputs<R> in;
  in.q = tensor<R>("q", {1, 2, 1, 2}, std::vector<R>{R(1), R(1), R(1), R(-1)});
  in.k = tensor<R>("k", {1, 2, 1, 2}, std::vector<R>{R(1), R(2), R(2), R(1)});
  in.v = tensor<R>("v", {1, 2, 1, 1}, std::vector<R>{R(3), R(1)});
  in.g = tensor<R>("g", {1, 2, 1, 2}, std::vector<R>{R(1), R(1, 2), R(1, 2), R(1, 2)});
  in.gates = gate_space::linear;
  in.omega = tensor<R>("omega", {1, 2, 1}, std::vector<R>{R(3, 8), R(23, 24)});
  in.r = tensor<R>("r", {1, 2, 1}, std::vector<R>{R(1), R(5)});
  in.mu = tensor<R>("mu", {1}, std::vector<R>{R(2)});
  in.initial_covariance = tensor<R>("initial_covariance", {1, 1}, std::vector<R>{R(1)});
  in.initial_state = tensor<R>("initial_state", {1, 1, 2, 1}, std::vector<R>{R(1), R(-1)});
  in.scale = R(1);
  return in;
}

template <class Out>
void check_example(const Out& out) {
  // Token 1.
  //   a_1 = (1 + 1/4) / 2 = 5/8;  b̂_1 = (5/8)·1 + 3/8 = 1
  //   ‖k‖² = 5;  β_1 = 1 / (1 + 1·5) = 1/6;  κ_1 = β k = (1/6, 1/3)
  //   Ŝ_1 = diag(α) S_0 = (1, −1/2);  Ŝᵀk = 1 − 1 = 0;  v − Ŝᵀk = 3
  //   S_1 = (1 + 3/6, −1/2 + 3/3) = (3/2, 1/2)
  //   u_1 = μ‖k‖² / (K r) = 2·5 / 2 = 5;  b_1 = 1 / (1 + 5) = 1/6
  //   o_1 = 3/2 + 1/2 = 2;  variance b_1 ‖q‖² = (1/6)·2 = 1/3
  CHECK((*out.predicted_covariance)(0, 0, 0) == R(1));
  CHECK((*out.beta)(0, 0, 0) == R(1, 6));
  CHECK(out.o(0, 0, 0, 0) == R(2));
  CHECK(out.readout_variance(0, 0, 0) == R(1, 3));
  // Token 2.
  //   a_2 = (1/4 + 1/4) / 2 = 1/4;  b̂_2 = (1/4)(1/6) + 23/24 = 1
  //   ‖k‖² = 5;  β_2 = 1 / (5 + 5) = 1/10;  κ_2 = (1/5, 1/10)
  //   Ŝ_2 = (3/4, 1/4);  Ŝᵀk = 3/2 + 1/4 = 7/4;  v − Ŝᵀk = −3/4
  //   S_2 = (3/4 − 3/20, 1/4 − 3/40) = (3/5, 7/40)
  //   u_2 = 2·5 / (2·5) = 1;  b_2 = 1 / 2
  //   o_2 = 3/5 − 7/40 = 17/40;  variance (1/2)·2 = 1
  CHECK((*out.predicted_covariance)(0, 1, 0) == R(1));
  CHECK((*out.beta)(0, 1, 0) == R(1, 10));
  CHECK(out.o(0, 1, 0, 0) == R(17, 40));
  CHECK(out.readout_variance(0, 1, 0) == R(1));
  CHECK(out.final_state(0, 0, 0, 0) == R(3, 5));
  CHECK(out.final_state(0, 0, 1, 0) == R(7, 40));
  CHECK(out.final_covariance(0, 0) == R(1, 2));
}

template <class T>
void check_same(const isotropic_kdn_outputs<T>& a, const isotropic_kdn_outputs<T>& b) {
  CHECK(a.o.data() == b.o.data());
  CHECK(a.final_state.data() == b.final_state.data());
  CHECK(a.final_covariance.data() == b.final_covariance.data());
  CHECK(a.readout_variance.data() == b.readout_variance.data());
}

}  // namespace

TEST_CASE("isotropic KDN: hand-worked 2-token example (K = 2, V = 1)") {
  check_example(isotropic_kdn_forward(example(), {1, true}));
}

TEST_CASE("isotropic KDN: the parallel form reproduces the example for every chunk size and rescale mode") {
  // Scan and memory chunks of 1 (one token each), 2 (the whole sequence) and 3 (longer than T = 2).
  // Both memory associations (κ_t = β_t k_t formed first, or the β-form).
  for (std::size_t chunk : {1u, 2u, 3u})
    for (std::size_t memory_chunk : {1u, 2u, 3u})
      for (rescale_mode mode :
           {rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two})
        for (kdn_memory_association association : {kdn_memory_association::two_key, kdn_memory_association::beta_form})
          check_example(isotropic_kdn_parallel(
              example(), {scan_schedule::chunked, chunk, mode, memory_chunk, association}, {1, true}));
  const kdn_scan_options empty_memory_chunks{scan_schedule::chunked, 2, rescale_mode::none, 0};
  CHECK(message_of([&] { isotropic_kdn_parallel(example(), empty_memory_chunks); }) ==
        "memory_chunk_size: 0; rule: a chunk of the memory needs at least one token");
}

TEST_CASE("isotropic KDN: it is KDA with β_t from §5 (the memory path with κ_t = β_t k_t)") {
  const auto in = example();
  const auto ref = isotropic_kdn_forward(in, {1, true});
  tensor<R> gain("gain", {1, 2, 1, 2});
  for (std::size_t t = 0; t < 2; ++t)
    for (std::size_t i = 0; i < 2; ++i) gain(0, t, 0, i) = (*ref.beta)(0, t, 0) * in.k(0, t, 0, i);
  const auto out =
      kdn_memory_forward(kdn_memory_inputs<R>{in.q, in.k, in.v, in.g, in.gates, gain, in.initial_state, in.scale});
  CHECK(out.o.data() == ref.o.data());
  CHECK(out.final_state.data() == ref.final_state.data());
}

TEST_CASE("isotropic KDN: defaults are μ = K, b_0 = 1, S_0 = 0, τ = 1/√K") {
  auto given = example();
  given.q = tensor<R>("q", {1, 2, 1, 4}, std::vector<R>{R(1), R(2), R(0), R(-1), R(1, 2), R(1), R(3), R(0)});
  given.k = tensor<R>("k", {1, 2, 1, 4}, std::vector<R>{R(1), R(0), R(1), R(2), R(-1), R(1), R(1, 3), R(1)});
  given.g = tensor<R>("g", {4}, std::vector<R>{R(3, 4), R(1), R(1, 2), R(1, 5)});
  auto defaulted = given;
  given.mu = tensor<R>("mu", {1}, std::vector<R>{R(4)});
  given.initial_covariance = tensor<R>("initial_covariance", {1}, std::vector<R>{R(1)});
  given.initial_state = tensor<R>("initial_state", {1}, std::vector<R>{R(0)});
  given.scale = R(1, 2);
  defaulted.mu.reset();
  defaulted.initial_covariance.reset();
  defaulted.initial_state.reset();
  defaulted.scale.reset();
  check_same(isotropic_kdn_forward(given), isotropic_kdn_forward(defaulted));
}

TEST_CASE("isotropic KDN: broadcast ω and r per head equal their expanded tensors; threads = 3 match") {
  const std::size_t B = 2, N = 3, H = 2, K = 2, V = 2;
  isotropic_kdn_inputs<R> small;
  small.q = tensor<R>("q", {B, N, H, K});
  small.k = tensor<R>("k", {B, N, H, K});
  small.v = tensor<R>("v", {B, N, H, V});
  for (std::size_t n = 0; n < small.q.size(); ++n) {
    small.q.data()[n] = R(static_cast<long>(n % 5) - 2, 3);
    small.k.data()[n] = R(static_cast<long>(n % 7) - 3, 2);
    small.v.data()[n] = R(static_cast<long>(n % 3) + 1);
  }
  small.gates = gate_space::linear;
  small.g = tensor<R>("g", {K}, std::vector<R>{R(1, 2), R(1)});
  small.omega = tensor<R>("omega", {H}, std::vector<R>{R(1, 4), R(2)});
  small.r = tensor<R>("r", {H}, std::vector<R>{R(1, 2), R(3)});
  small.scale = R(1);
  auto full = small;
  full.omega = tensor<R>("omega", {B, N, H});
  full.r = tensor<R>("r", {B, N, H});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < N; ++t)
      for (std::size_t h = 0; h < H; ++h) {
        full.omega(b, t, h) = small.omega(h);
        full.r(b, t, h) = small.r(h);
      }
  check_same(isotropic_kdn_forward(small), isotropic_kdn_forward(full));
  check_same(isotropic_kdn_forward(small, {3, false}), isotropic_kdn_forward(full));
  check_same(isotropic_kdn_parallel(small, {}, {3, false}), isotropic_kdn_forward(full));
}

TEST_CASE("isotropic KDN: bad inputs are named with the element and the rule") {
  {
    auto in = example();
    in.r(0, 1, 0) = R(0);
    CHECK(message_of([&] { isotropic_kdn_forward(in); }) ==
          "r: element [0, 1, 0] is 0; rule: observation noise r must be > 0");
    CHECK(message_of([&] { isotropic_kdn_parallel(in); }) ==
          "r: element [0, 1, 0] is 0; rule: observation noise r must be > 0");
  }
  {
    auto in = example();
    in.omega(0, 1, 0) = R(-1, 3);
    CHECK(message_of([&] { isotropic_kdn_forward(in); }) ==
          "omega: element [0, 1, 0] is -1/3; rule: process noise omega must be >= 0");
  }
  {
    auto in = example();
    (*in.initial_covariance)(0, 0) = R(0);
    CHECK(message_of([&] { isotropic_kdn_forward(in); }) ==
          "initial_covariance: element [0, 0] is 0; rule: prior covariance b_0 must be > 0");
  }
  {
    auto in = example();
    in.omega = tensor<R>("omega", {1, 2, 1, 2}, R(1));  // ω is one scalar per head and token here
    CHECK(message_of([&] { isotropic_kdn_forward(in); }) ==
          "omega: shape [1, 2, 1, 2] has more dimensions than the expected [1, 2, 1]");
  }
  {
    auto in = example();
    in.k = tensor<R>("k", {1, 2, 1, 3});
    CHECK(message_of([&] { isotropic_kdn_forward(in); }) == "k: shape [1, 2, 1, 3], expected [1, 2, 1, 2]");
  }
  {
    auto in = example();
    in.q = tensor<R>("q", {1, 0, 1, 2});
    in.k = tensor<R>("k", {1, 0, 1, 2});
    in.v = tensor<R>("v", {1, 0, 1, 1});
    CHECK(message_of([&] { isotropic_kdn_forward(in); }) ==
          "q: T = 0 tokens; rule: a sequence needs at least one token");
  }
  {
    isotropic_kdn_inputs<double> in;
    in.q = tensor<double>("q", {1, 2, 1, 2}, 1.0);
    in.k = tensor<double>("k", {1, 2, 1, 2}, 1.0);
    in.v = tensor<double>("v", {1, 2, 1, 1}, 1.0);
    in.g = tensor<double>("g", {1}, -0.5);
    in.omega = tensor<double>("omega", {1}, 0.0);
    in.r = tensor<double>("r", {1}, 1.0);
    in.k(0, 0, 0, 1) = std::numeric_limits<double>::quiet_NaN();
    CHECK(message_of([&] { isotropic_kdn_forward(in); }) ==
          "k: element [0, 0, 0, 1] is nan; rule: must be finite (no NaN or infinity)");
  }
}
