// Exact laws of the diagonal and isotropic KDN (docs/math.md §4, §5, §7, §8), over rationals:
//   - the parallel form (covariance scan + per-token gains + chunked fixed-gain memory) equals the
//     sequential reference exactly, for every schedule, chunk size (1, 2, 3, 16, 64, > T) and
//     rescale mode of the scan and every chunk size of the memory's WY form;
//   - μ leaves the current token's gain and output unchanged and changes later ones, precisely;
//   - K = 1: the diagonal and isotropic models coincide;
//   - the isotropic KDN is the fixed-gain memory with κ_t = β_t k_t (KDA with β from §5);
//   - Prop. 2 of the KDN paper: the diagonal KDN's one-step posterior mean is the exact dense
//     one-step Kalman posterior mean for the prior diag(p̂_t), and with μ = 1 its precision 1/p_t is
//     the diagonal of the exact dense posterior precision (the reverse-KL projection).
// The threads law and the MPFR rounding bound are in models_kdn_mpfr.cpp.
#include <algorithm>
#include <optional>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;
using R = rational;

namespace {

// ---- Generators ----------------------------------------------------------------------------------

struct kdn_sizes {
  std::size_t batch, tokens, heads, key_dim, value_dim;
};

/// Small problems: rationals grow with every token, so T <= max_tokens (a handful).
kdn_sizes gen_sizes(std::size_t min_tokens, std::size_t max_tokens, std::size_t max_batch_heads = 2) {
  return {*rc::gen::inRange<std::size_t>(1, max_batch_heads + 1), *rc::gen::inRange(min_tokens, max_tokens + 1),
          *rc::gen::inRange<std::size_t>(1, max_batch_heads + 1), *rc::gen::inRange<std::size_t>(1, 4),
          *rc::gen::inRange<std::size_t>(1, 3)};
}

/// A decay in (0, 1]: x / (1 + x) for x > 0, or exactly 1.
rc::Gen<R> gen_decay() {
  return rc::gen::oneOf(rc::gen::just(R(1)),
                        rc::gen::map(kt::gen_rational_positive(), [](const R& x) { return x / (1 + x); }));
}

/// A shape that broadcasts to `full`: every axis kept or set to 1, leading 1s dropped or not.
shape_t gen_broadcast_shape(const shape_t& full) {
  if (*rc::gen::inRange(0, 2) == 0) return full;  // half the time the full per-token form
  shape_t s;
  for (std::size_t d : full) s.push_back(*rc::gen::arbitrary<bool>() ? d : 1);
  std::size_t drop = *rc::gen::inRange<std::size_t>(0, s.size() + 1);
  while (drop > 0 && !s.empty() && s.front() == 1) {
    s.erase(s.begin());
    --drop;
  }
  if (s.empty()) s.push_back(1);
  return s;
}

tensor<R> gen_tensor(const std::string& name, const shape_t& shape, const rc::Gen<R>& element) {
  return tensor<R>(name, shape, *rc::gen::container<std::vector<R>>(element_count(shape), element));
}

/// τ: given (positive) or, where 1/√K is rational (K = 1, 4), sometimes left to the default.
std::optional<R> gen_scale(std::size_t key_dim) {
  if ((key_dim == 1 || key_dim == 4) && *rc::gen::arbitrary<bool>()) return std::nullopt;
  return *kt::gen_rational_positive();
}

/// Diagonal-KDN inputs; `broadcast` lets parameters take broadcast shapes and defaults.
diagonal_kdn_inputs<R> gen_diag_inputs(const kdn_sizes& s, bool broadcast) {
  const shape_t key_shape{s.batch, s.tokens, s.heads, s.key_dim};
  const auto shape = [&](const shape_t& full) { return broadcast ? gen_broadcast_shape(full) : full; };
  const auto present = [&] { return !broadcast || *rc::gen::arbitrary<bool>(); };
  diagonal_kdn_inputs<R> in;
  in.q = gen_tensor("q", key_shape, kt::gen_rational());
  in.k = gen_tensor("k", key_shape, kt::gen_rational());
  in.v = gen_tensor("v", {s.batch, s.tokens, s.heads, s.value_dim}, kt::gen_rational());
  in.gates = gate_space::linear;
  in.g = gen_tensor("g", shape(key_shape), gen_decay());
  in.omega = gen_tensor("omega", shape(key_shape), kt::gen_rational_nonneg());
  in.r = gen_tensor("r", shape({s.batch, s.tokens, s.heads}), kt::gen_rational_positive());
  if (present()) in.mu = gen_tensor("mu", shape({s.heads}), kt::gen_rational_positive());
  if (present())
    in.initial_covariance =
        gen_tensor("initial_covariance", shape({s.batch, s.heads, s.key_dim}), kt::gen_rational_positive());
  if (present())
    in.initial_state =
        gen_tensor("initial_state", shape({s.batch, s.heads, s.key_dim, s.value_dim}), kt::gen_rational());
  in.scale = broadcast ? gen_scale(s.key_dim) : std::optional<R>(*kt::gen_rational_positive());
  return in;
}

isotropic_kdn_inputs<R> gen_iso_inputs(const kdn_sizes& s, bool broadcast) {
  const shape_t key_shape{s.batch, s.tokens, s.heads, s.key_dim};
  const auto shape = [&](const shape_t& full) { return broadcast ? gen_broadcast_shape(full) : full; };
  const auto present = [&] { return !broadcast || *rc::gen::arbitrary<bool>(); };
  isotropic_kdn_inputs<R> in;
  in.q = gen_tensor("q", key_shape, kt::gen_rational());
  in.k = gen_tensor("k", key_shape, kt::gen_rational());
  in.v = gen_tensor("v", {s.batch, s.tokens, s.heads, s.value_dim}, kt::gen_rational());
  in.gates = gate_space::linear;
  in.g = gen_tensor("g", shape(key_shape), gen_decay());
  in.omega = gen_tensor("omega", shape({s.batch, s.tokens, s.heads}), kt::gen_rational_nonneg());
  in.r = gen_tensor("r", shape({s.batch, s.tokens, s.heads}), kt::gen_rational_positive());
  if (present()) in.mu = gen_tensor("mu", shape({s.heads}), kt::gen_rational_positive());
  if (present())
    in.initial_covariance = gen_tensor("initial_covariance", shape({s.batch, s.heads}), kt::gen_rational_positive());
  if (present())
    in.initial_state =
        gen_tensor("initial_state", shape({s.batch, s.heads, s.key_dim, s.value_dim}), kt::gen_rational());
  in.scale = broadcast ? gen_scale(s.key_dim) : std::optional<R>(*kt::gen_rational_positive());
  return in;
}

/// Schedule (chunked most of the time: the kernels' schedule), chunk size and rescale mode of the
/// covariance scan, and the memory's chunk size and (isotropic model) association.
kdn_scan_options gen_scan(std::size_t tokens, detail::kdn_gain_shape gain) {
  const scan_schedule schedule = *rc::gen::weightedOneOf<scan_schedule>(
      {{4, rc::gen::just(scan_schedule::chunked)}, {1, rc::gen::elementOf(all_scan_schedules)}});
  const std::size_t scan_chunk = *kt::gen_chunk_size(tokens);
  const rescale_mode rescale =
      *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two);
  const kdn_memory_association association =
      gain == detail::kdn_gain_shape::multiple_of_key
          ? *rc::gen::element(kdn_memory_association::two_key, kdn_memory_association::beta_form)
          : kdn_memory_association::two_key;
  return {schedule, scan_chunk, rescale, *kt::gen_chunk_size(tokens), association};
}

// ---- Helpers -------------------------------------------------------------------------------------

/// The first n tokens of a full-shape per-token tensor (token axis 1).
tensor<R> first_tokens(const tensor<R>& x, std::size_t n) {
  shape_t shape = x.shape();
  const std::size_t tokens = shape[1];
  shape[1] = n;
  std::size_t inner = 1;
  for (std::size_t axis = 2; axis < shape.size(); ++axis) inner *= shape[axis];
  std::vector<R> data;
  for (std::size_t b = 0; b < shape[0]; ++b)
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t e = 0; e < inner; ++e) data.push_back(x.data()[(b * tokens + t) * inner + e]);
  return tensor<R>(x.name(), shape, std::move(data));
}

template <class In>
In first_tokens(In in, std::size_t n) {
  in.q = first_tokens(in.q, n);
  in.k = first_tokens(in.k, n);
  in.v = first_tokens(in.v, n);
  in.g = first_tokens(in.g, n);
  in.omega = first_tokens(in.omega, n);
  in.r = first_tokens(in.r, n);
  return in;
}

void assert_same(const diagonal_kdn_outputs<R>& a, const diagonal_kdn_outputs<R>& b) {
  RC_ASSERT(a.o.data() == b.o.data());
  RC_ASSERT(a.final_state.data() == b.final_state.data());
  RC_ASSERT(a.final_covariance.data() == b.final_covariance.data());
  RC_ASSERT(a.readout_variance.data() == b.readout_variance.data());
  RC_ASSERT(a.predicted_covariance.has_value() == b.predicted_covariance.has_value());
  if (a.predicted_covariance) {
    RC_ASSERT(a.predicted_covariance->data() == b.predicted_covariance->data());
    RC_ASSERT(a.gain->data() == b.gain->data());
  }
}

void assert_same(const isotropic_kdn_outputs<R>& a, const isotropic_kdn_outputs<R>& b) {
  RC_ASSERT(a.o.data() == b.o.data());
  RC_ASSERT(a.final_state.data() == b.final_state.data());
  RC_ASSERT(a.final_covariance.data() == b.final_covariance.data());
  RC_ASSERT(a.readout_variance.data() == b.readout_variance.data());
  RC_ASSERT(a.predicted_covariance.has_value() == b.predicted_covariance.has_value());
  if (a.predicted_covariance) {
    RC_ASSERT(a.predicted_covariance->data() == b.predicted_covariance->data());
    RC_ASSERT(a.beta->data() == b.beta->data());
  }
}

// ---- A dense one-step Kalman update (docs/math.md §2), for Prop. 2 --------------------------------------

using matrix = std::vector<std::vector<R>>;

matrix zeros(std::size_t rows, std::size_t cols) { return matrix(rows, std::vector<R>(cols, R(0))); }

matrix multiply(const matrix& a, const matrix& b) {
  matrix c = zeros(a.size(), b[0].size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t l = 0; l < b.size(); ++l)
      for (std::size_t j = 0; j < b[0].size(); ++j) c[i][j] += a[i][l] * b[l][j];
  return c;
}

/// Gauss–Jordan inverse with exact pivots (any non-zero pivot is exact over rationals).
matrix inverse(matrix a) {
  const std::size_t n = a.size();
  matrix inv = zeros(n, n);
  for (std::size_t i = 0; i < n; ++i) inv[i][i] = R(1);
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t p = c;
    while (p < n && a[p][c] == 0) ++p;
    RC_ASSERT(p < n);  // the posterior covariance is SPD, hence invertible
    std::swap(a[p], a[c]);
    std::swap(inv[p], inv[c]);
    const R pivot = a[c][c];
    for (std::size_t j = 0; j < n; ++j) {
      a[c][j] /= pivot;
      inv[c][j] /= pivot;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (i == c || a[i][c] == 0) continue;
      const R f = a[i][c];
      for (std::size_t j = 0; j < n; ++j) {
        a[i][j] -= f * a[c][j];
        inv[i][j] -= f * inv[c][j];
      }
    }
  }
  return inv;
}

}  // namespace

TEST_SUITE("kdn") {
  TEST_CASE("kdn: diagonal parallel form equals the sequential reference exactly") {
    check_property("diag_kdn_parallel_equals_sequential", [] {
      const kdn_sizes s = gen_sizes(1, 6);
      const auto in = gen_diag_inputs(s, true);
      const kdn_scan_options scan = gen_scan(s.tokens, detail::kdn_gain_shape::general);
      assert_same(diagonal_kdn_parallel(in, scan, {1, true}), diagonal_kdn_forward(in, {1, true}));
    });
  }

  TEST_CASE("kdn: isotropic parallel form equals the sequential reference exactly") {
    check_property("iso_kdn_parallel_equals_sequential", [] {
      const kdn_sizes s = gen_sizes(1, 6);
      const auto in = gen_iso_inputs(s, true);
      const kdn_scan_options scan = gen_scan(s.tokens, detail::kdn_gain_shape::multiple_of_key);
      assert_same(isotropic_kdn_parallel(in, scan, {1, true}), isotropic_kdn_forward(in, {1, true}));
    });
  }

  // μ enters only the covariance write p_t (§4), so with μ and μ' = 2μ:
  //  (a) token 1: p̂_1, κ_1, S_1 and o_1 agree exactly;
  //  (b) κ_2 ≠ κ'_2  ⇔  some channel i has k_{1,i} ≠ 0 and k_{2,i} ≠ 0. (⇐: p_{1,i} = p̂/(1 + u p̂)
  //      with u ∝ μ k_{1,i}² ≠ 0 and p̂ > 0 differs, so p̂_{2,i} = α² p_{1,i} + ω differs (α > 0);
  //      κ_2 determines p̂_2 on the channels with k_{2,i} ≠ 0 (κ_i / k_i = p̂_i / s and s = r / (1 −
  //      Σ (κ_i / k_i) k_i²)), so κ_2 differs. ⇒: if no such channel, p̂_2 agrees wherever k_2 ≠ 0,
  //      and κ_2 only reads p̂_2 there.) Also p'_{1,i} < p_{1,i} exactly where k_{1,i} ≠ 0;
  //  (c) the outputs at token 2 differ by exactly o_2 − o'_2 = τ ⟨κ_2 − κ'_2, q_2⟩ (v_2 − Ŝ_2ᵀ k_2),
  //      Ŝ_2 = diag(α_2) S_1 (S_1 agrees by (a)): so o_2 differs iff, besides (b), the innovation
  //      and ⟨κ_2 − κ'_2, q_2⟩ are non-zero, and never otherwise.
  TEST_CASE("kdn: diagonal μ changes only later gains, precisely") {
    check_property("diag_kdn_mu_changes_only_later_gains", [] {
      kdn_sizes s = gen_sizes(2, 4, 1);
      auto in = gen_diag_inputs(s, false);
      const R mu = (*in.mu)(0);
      auto doubled = in;
      (*doubled.mu)(0) = 2 * mu;
      const auto one = diagonal_kdn_forward(in, {1, true});
      const auto two = diagonal_kdn_forward(doubled, {1, true});
      const std::size_t K = s.key_dim, V = s.value_dim;
      for (std::size_t i = 0; i < K; ++i) {  // (a)
        RC_ASSERT((*one.predicted_covariance)(0, 0, 0, i) == (*two.predicted_covariance)(0, 0, 0, i));
        RC_ASSERT((*one.gain)(0, 0, 0, i) == (*two.gain)(0, 0, 0, i));
      }
      for (std::size_t j = 0; j < V; ++j) RC_ASSERT(one.o(0, 0, 0, j) == two.o(0, 0, 0, j));
      const auto first = diagonal_kdn_forward(first_tokens(in, 1));
      const auto first2 = diagonal_kdn_forward(first_tokens(doubled, 1));
      RC_ASSERT(first.final_state.data() == first2.final_state.data());
      bool shared_channel = false, gains_differ = false;
      for (std::size_t i = 0; i < K; ++i) {  // (b)
        shared_channel = shared_channel || (in.k(0, 0, 0, i) != 0 && in.k(0, 1, 0, i) != 0);
        gains_differ = gains_differ || (*one.gain)(0, 1, 0, i) != (*two.gain)(0, 1, 0, i);
        if (in.k(0, 0, 0, i) != 0)
          RC_ASSERT(first2.final_covariance(0, 0, i) < first.final_covariance(0, 0, i));
        else
          RC_ASSERT(first2.final_covariance(0, 0, i) == first.final_covariance(0, 0, i));
      }
      RC_ASSERT(gains_differ == shared_channel);
      R gain_gap_q(0);  // (c)
      for (std::size_t i = 0; i < K; ++i)
        gain_gap_q += ((*one.gain)(0, 1, 0, i) - (*two.gain)(0, 1, 0, i)) * in.q(0, 1, 0, i);
      for (std::size_t j = 0; j < V; ++j) {
        R innovation = in.v(0, 1, 0, j);
        for (std::size_t i = 0; i < K; ++i)
          innovation -= in.g(0, 1, 0, i) * first.final_state(0, 0, i, j) * in.k(0, 1, 0, i);
        RC_ASSERT(one.o(0, 1, 0, j) - two.o(0, 1, 0, j) == *in.scale * gain_gap_q * innovation);
      }
    });
  }

  // Isotropic: b_1 differs iff ‖k_1‖ ≠ 0 (u_1 ∝ μ ‖k_1‖²), b̂_2 = a_2 b_1 + ω_2 then differs (a_2 > 0),
  // and β = b̂ / (r + b̂ ‖k‖²) is strictly increasing in b̂: β_2 ≠ β'_2 ⇔ k_1 ≠ 0. Token 1 agrees, and
  // o_2 − o'_2 = τ (β_2 − β'_2) ⟨k_2, q_2⟩ (v_2 − Ŝ_2ᵀ k_2).
  TEST_CASE("kdn: isotropic μ changes only later gains, precisely") {
    check_property("iso_kdn_mu_changes_only_later_gains", [] {
      kdn_sizes s = gen_sizes(2, 4, 1);
      auto in = gen_iso_inputs(s, false);
      auto doubled = in;
      (*doubled.mu)(0) = 2 * (*in.mu)(0);
      const auto one = isotropic_kdn_forward(in, {1, true});
      const auto two = isotropic_kdn_forward(doubled, {1, true});
      const std::size_t K = s.key_dim, V = s.value_dim;
      RC_ASSERT((*one.predicted_covariance)(0, 0, 0) == (*two.predicted_covariance)(0, 0, 0));
      RC_ASSERT((*one.beta)(0, 0, 0) == (*two.beta)(0, 0, 0));
      for (std::size_t j = 0; j < V; ++j) RC_ASSERT(one.o(0, 0, 0, j) == two.o(0, 0, 0, j));
      const auto first = isotropic_kdn_forward(first_tokens(in, 1));
      bool key1 = false;
      R key_q(0);
      for (std::size_t i = 0; i < K; ++i) {
        key1 = key1 || in.k(0, 0, 0, i) != 0;
        key_q += in.k(0, 1, 0, i) * in.q(0, 1, 0, i);
      }
      RC_ASSERT(((*one.beta)(0, 1, 0) != (*two.beta)(0, 1, 0)) == key1);
      for (std::size_t j = 0; j < V; ++j) {
        R innovation = in.v(0, 1, 0, j);
        for (std::size_t i = 0; i < K; ++i)
          innovation -= in.g(0, 1, 0, i) * first.final_state(0, 0, i, j) * in.k(0, 1, 0, i);
        RC_ASSERT(one.o(0, 1, 0, j) - two.o(0, 1, 0, j) ==
                  *in.scale * ((*one.beta)(0, 1, 0) - (*two.beta)(0, 1, 0)) * key_q * innovation);
      }
    });
  }

  // K = 1: a = α², ‖k‖² = k², u = μ k² / r in both, so b = p, β k = κ, and everything agrees.
  TEST_CASE("kdn: K = 1, the diagonal and isotropic models coincide") {
    check_property("kdn_k1_diagonal_equals_isotropic", [] {
      kdn_sizes s = gen_sizes(1, 6);
      s.key_dim = 1;
      const auto d = gen_diag_inputs(s, false);
      isotropic_kdn_inputs<R> iso{d.q,
                                  d.k,
                                  d.v,
                                  d.g,
                                  d.gates,
                                  tensor<R>("omega", {s.batch, s.tokens, s.heads}, d.omega.data()),
                                  d.r,
                                  d.mu,
                                  tensor<R>("initial_covariance", {s.batch, s.heads}, d.initial_covariance->data()),
                                  d.initial_state,
                                  d.scale};
      const auto a = diagonal_kdn_forward(d, {1, true});
      const auto b = isotropic_kdn_forward(iso, {1, true});
      RC_ASSERT(a.o.data() == b.o.data());
      RC_ASSERT(a.final_state.data() == b.final_state.data());
      RC_ASSERT(a.final_covariance.data() == b.final_covariance.data());
      RC_ASSERT(a.readout_variance.data() == b.readout_variance.data());
      RC_ASSERT(a.predicted_covariance->data() == b.predicted_covariance->data());
      for (std::size_t n = 0; n < a.gain->size(); ++n)
        RC_ASSERT(a.gain->data()[n] == b.beta->data()[n] * d.k.data()[n]);
    });
  }

  // §7: the isotropic KDN is the fixed-gain two-key memory (the diagonal model's memory update)
  // run with κ_t = β_t k_t, i.e. KDA with β_t from §5.
  TEST_CASE("kdn: isotropic KDN is the diagonal memory update with κ = β k") {
    check_property("iso_kdn_is_memory_with_beta_k", [] {
      const kdn_sizes s = gen_sizes(1, 6);
      const auto in = gen_iso_inputs(s, true);
      const auto iso = isotropic_kdn_forward(in, {1, true});
      tensor<R> gain("gain", {s.batch, s.tokens, s.heads, s.key_dim});
      for (std::size_t b = 0; b < s.batch; ++b)
        for (std::size_t t = 0; t < s.tokens; ++t)
          for (std::size_t h = 0; h < s.heads; ++h)
            for (std::size_t i = 0; i < s.key_dim; ++i) gain(b, t, h, i) = (*iso.beta)(b, t, h) * in.k(b, t, h, i);
      const auto memory =
          kdn_memory_forward(kdn_memory_inputs<R>{in.q, in.k, in.v, in.g, in.gates, gain, in.initial_state, in.scale});
      RC_ASSERT(memory.o.data() == iso.o.data());
      RC_ASSERT(memory.final_state.data() == iso.final_state.data());
    });
  }

  // Prop. 2 (KDN paper). At the last token t = T, with the model's own prior N(diag(α_t) S_{t−1},
  // diag(p̂_t)), the exact dense one-step update of §2 (full K x K matrices, nothing diagonal assumed)
  //   P̂ = D diag(p_{t−1}) Dᵀ + Ω,  s = kᵀ P̂ k + r,  κ_d = P̂ k / s,
  //   S_d = Ŝ + κ_d (v − Ŝᵀ k)ᵀ,  P_d = (I − κ_d kᵀ) P̂
  // has P̂ = diag(p̂_t), κ_d = κ_t and S_d = S_t (the mean is not approximated), and the diagonal of
  // the exact posterior precision Y = P_d⁻¹ (Gauss–Jordan) satisfies
  //   1/p_{t,i} − Y_ii = (μ − 1) k_i² / r,
  // i.e. with μ = 1 (drawn half the time) 1/p_t = diag(Y): the reverse-KL projection.
  TEST_CASE("kdn: Prop. 2, diagonal one-step posterior mean exact, precision = diagonal of dense precision") {
    check_property("diag_kdn_prop2_one_step_posterior", [] {
      kdn_sizes s = gen_sizes(1, 3, 1);
      auto in = gen_diag_inputs(s, false);
      if (*rc::gen::arbitrary<bool>()) (*in.mu)(0) = R(1);
      const std::size_t N = s.tokens, K = s.key_dim, V = s.value_dim, t = N - 1;
      const auto out = diagonal_kdn_forward(in, {1, true});
      // The prior of token t: S_{t−1}, p_{t−1} (the initial state for t = 1).
      matrix prev_state = zeros(K, V);
      std::vector<R> prev_cov(K);
      if (N == 1) {
        for (std::size_t i = 0; i < K; ++i) {
          prev_cov[i] = (*in.initial_covariance)(0, 0, i);
          for (std::size_t j = 0; j < V; ++j) prev_state[i][j] = (*in.initial_state)(0, 0, i, j);
        }
      } else {
        const auto before = diagonal_kdn_forward(first_tokens(in, N - 1));
        for (std::size_t i = 0; i < K; ++i) {
          prev_cov[i] = before.final_covariance(0, 0, i);
          for (std::size_t j = 0; j < V; ++j) prev_state[i][j] = before.final_state(0, 0, i, j);
        }
      }
      matrix D = zeros(K, K), P = zeros(K, K), Omega = zeros(K, K), k = zeros(K, 1), vt = zeros(1, V);
      for (std::size_t i = 0; i < K; ++i) {
        D[i][i] = in.g(0, t, 0, i);
        P[i][i] = prev_cov[i];
        Omega[i][i] = in.omega(0, t, 0, i);
        k[i][0] = in.k(0, t, 0, i);
      }
      for (std::size_t j = 0; j < V; ++j) vt[0][j] = in.v(0, t, 0, j);
      matrix Dt = D;  // diagonal: Dᵀ = D
      matrix predicted = multiply(multiply(D, P), Dt);
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < K; ++j) predicted[i][j] += Omega[i][j];
      const matrix mean_prior = multiply(D, prev_state);
      matrix kt_ = zeros(1, K);
      for (std::size_t i = 0; i < K; ++i) kt_[0][i] = k[i][0];
      const R r = in.r(0, t, 0);
      const R innovation_variance = multiply(multiply(kt_, predicted), k)[0][0] + r;
      matrix gain = multiply(predicted, k);
      for (auto& row : gain) row[0] /= innovation_variance;
      matrix innovation = vt;
      const matrix predicted_value = multiply(kt_, mean_prior);
      for (std::size_t j = 0; j < V; ++j) innovation[0][j] -= predicted_value[0][j];
      matrix mean = mean_prior;
      const matrix correction = multiply(gain, innovation);
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) mean[i][j] += correction[i][j];
      matrix erase = multiply(gain, kt_);  // κ_d kᵀ
      matrix keep = zeros(K, K);
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < K; ++j) keep[i][j] = (i == j ? R(1) : R(0)) - erase[i][j];
      const matrix precision = inverse(multiply(keep, predicted));

      const R mu = (*in.mu)(0);
      for (std::size_t i = 0; i < K; ++i) {
        for (std::size_t j = 0; j < K; ++j)
          RC_ASSERT(predicted[i][j] == (i == j ? (*out.predicted_covariance)(0, t, 0, i) : R(0)));
        RC_ASSERT((*out.gain)(0, t, 0, i) == gain[i][0]);
        for (std::size_t j = 0; j < V; ++j) RC_ASSERT(out.final_state(0, 0, i, j) == mean[i][j]);
        RC_ASSERT(1 / out.final_covariance(0, 0, i) - precision[i][i] == (mu - 1) * k[i][0] * k[i][0] / r);
      }
    });
  }
}
