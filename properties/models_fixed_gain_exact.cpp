// The fixed-gain family (docs/math.md §7), exactly over rationals:
//   * the chunked WY form equals the sequential form, for every rule and chunk sizes 1, 2, 3, 16 and
//     larger than T (outputs, final state and the recorded gains, ==);
//   * the sequential form equals an independent restatement of fla's recurrent loop written below,
//     one line per equation (decay, residual against the decayed state, write; read after write);
//   * the special cases: GDN is KDA with equal gates on every channel, DeltaNet is KDA with α = 1,
//     the given-gain form with κ = β k is the β-form; GLA is not a delta rule, and equals KDA with
//     β = 1 only where the erase term vanishes (distinct one-hot keys from a zero state).
// Shapes keep K != V so that a transposed state (S k for Sᵀ k) cannot go unnoticed.
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using R = rational;

namespace {

/// Small exact values of either sign: integers in [-3, 3] and p/q with q <= 4 (short sequences of
/// these keep the rationals a few hundred bits long).
rc::Gen<R> gen_small() {
  return rc::gen::oneOf(rc::gen::map(rc::gen::inRange<long>(-3, 4), [](long n) { return R(n); }),
                        rc::gen::map(rc::gen::pair(rc::gen::inRange<long>(-4, 5), rc::gen::inRange<long>(1, 5)),
                                     [](std::pair<long, long> pq) { return R(pq.first, pq.second); }));
}

/// Decays in (0, 1], 1 (no decay) included.
rc::Gen<R> gen_decay() { return rc::gen::element(R(1), R(1, 2), R(2, 3), R(3, 4), R(1, 3), R(5, 6)); }

tensor<R> draw_tensor(const std::string& name, const shape_t& shape, const rc::Gen<R>& gen) {
  return tensor<R>(name, shape, *rc::gen::container<std::vector<R>>(element_count(shape), gen));
}

struct dims {
  std::size_t B, T, H, K, V;
};

/// B, H in {1, 2}; T up to 40 (mostly short); K in [1, 4], V in [1, 4] with V != K.
dims draw_dims(std::size_t max_tokens = 40) {
  dims d{};
  d.B = *rc::gen::inRange<std::size_t>(1, 3);
  d.H = *rc::gen::inRange<std::size_t>(1, 3);
  d.T = *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 9), rc::gen::inRange<std::size_t>(1, max_tokens + 1));
  d.K = *rc::gen::inRange<std::size_t>(1, 5);
  d.V = *rc::gen::inRange<std::size_t>(1, 5);
  if (d.V == d.K) d.V = d.K + 1;
  return d;
}

/// Random inputs for `rule` (with a given gain κ instead of β when `given_gain`), linear decays.
/// Parameters are sometimes broadcast (β [H], gates [1, T, H, 1] or [B, T, H, 1]).
fixed_gain_inputs<R> draw_inputs(fixed_gain_rule rule, bool given_gain, const dims& d) {
  fixed_gain_inputs<R> in;
  in.rule = rule;
  in.gates = gate_space::linear;
  in.q = draw_tensor("q", {d.B, d.T, d.H, d.K}, gen_small());
  in.k = draw_tensor("k", {d.B, d.T, d.H, d.K}, gen_small());
  in.v = draw_tensor("v", {d.B, d.T, d.H, d.V}, gen_small());
  const bool broadcast = *rc::gen::arbitrary<bool>();
  if (rule == fixed_gain_rule::gated_delta_net)
    in.g = draw_tensor("g", broadcast ? shape_t{1, d.T, d.H} : shape_t{d.B, d.T, d.H}, gen_decay());
  else if (rule != fixed_gain_rule::delta_net)
    in.g = draw_tensor("g", broadcast ? shape_t{d.B, d.T, d.H, 1} : shape_t{d.B, d.T, d.H, d.K}, gen_decay());
  if (rule != fixed_gain_rule::gla) {
    if (given_gain)
      in.gain = draw_tensor("gain", {d.B, d.T, d.H, d.K}, gen_small());
    else
      in.beta = draw_tensor("beta", broadcast ? shape_t{d.H} : shape_t{d.B, d.T, d.H}, gen_small());
  }
  if (*rc::gen::arbitrary<bool>()) in.initial_state = draw_tensor("initial_state", {d.B, d.H, d.K, d.V}, gen_small());
  // τ: the default 1/√K where it is rational (K = 1, 4), else given.
  if (!(d.K == 1 || d.K == 4) || *rc::gen::arbitrary<bool>())
    in.scale = *rc::gen::suchThat(gen_small(), [](const R& x) { return x > 0; });  // tau > 0 (models/query_scale.hpp)
  return in;
}

std::size_t draw_chunk_size(std::size_t tokens) {
  return *rc::gen::oneOf(rc::gen::element<std::size_t>(1, 2, 3, 16),
                         rc::gen::inRange<std::size_t>(tokens + 1, tokens + 5));
}

void assert_same(const fixed_gain_outputs<R>& a, const fixed_gain_outputs<R>& b) {
  RC_ASSERT(a.o.shape() == b.o.shape());
  RC_ASSERT(a.o.data() == b.o.data());
  RC_ASSERT(a.final_state.data() == b.final_state.data());
  RC_ASSERT(a.gain.has_value() == b.gain.has_value());
  if (a.gain) RC_ASSERT(a.gain->data() == b.gain->data());
}

/// Chunked == sequential for one rule.
void chunked_equals_sequential(fixed_gain_rule rule, bool given_gain) {
  const dims d = draw_dims();
  const auto in = draw_inputs(rule, given_gain, d);
  const std::size_t chunk = draw_chunk_size(d.T);
  RC_TAG(chunk);
  const run_options options{1, true};
  assert_same(fixed_gain_forward(in, options), fixed_gain_chunked_forward(in, chunk, options));
}

// ---------------------------------------------------------------------------------------------
// fla's recurrent loop, restated independently of models/delta_rule.hpp and fixed_gain.hpp:
// one statement per equation, per (b, h), on a K x V state h[i][j], decays α given linearly.
//   h = diag(α_t) h        (GLA, KDA: row i times α_{t,i}; GDN: every row times α_t)
//   r = v_t − hᵀ k_t       (delta rules: the residual against the decayed state)
//   h = h + b_t rᵀ         (b_t = β_t k_t, or κ_t; GLA: h = h + k_t v_tᵀ)
//   o_t = hᵀ (τ q_t)       (read after write)
struct fla_result {
  std::vector<R> o, state;  // [B, T, H, V] and [B, H, K, V], row-major
};

fla_result fla_loop(const fixed_gain_inputs<R>& in, const R& scale) {
  const std::size_t B = in.k.dim(0), T = in.k.dim(1), H = in.k.dim(2), K = in.k.dim(3), V = in.v.dim(3);
  const bool gla = in.rule == fixed_gain_rule::gla;
  fla_result res{std::vector<R>(B * T * H * V), std::vector<R>(B * H * K * V)};
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t hd = 0; hd < H; ++hd) {
      std::vector<std::vector<R>> h(K, std::vector<R>(V, R(0)));
      if (in.initial_state) {
        const broadcast_view<R> s0(*in.initial_state, {B, H, K, V});
        for (std::size_t i = 0; i < K; ++i)
          for (std::size_t j = 0; j < V; ++j) h[i][j] = s0(b, hd, i, j);
      }
      for (std::size_t t = 0; t < T; ++t) {
        // decay
        if (in.rule == fixed_gain_rule::gated_delta_net) {
          const R a = broadcast_view<R>(*in.g, {B, T, H})(b, t, hd);
          for (auto& row : h)
            for (auto& x : row) x = x * a;
        } else if (in.rule != fixed_gain_rule::delta_net) {
          const broadcast_view<R> g(*in.g, {B, T, H, K});
          for (std::size_t i = 0; i < K; ++i)
            for (auto& x : h[i]) x = x * g(b, t, hd, i);
        }
        // residual and write
        std::vector<R> write_key(K), write_value(V);
        for (std::size_t j = 0; j < V; ++j) write_value[j] = in.v(b, t, hd, j);
        for (std::size_t i = 0; i < K; ++i) write_key[i] = in.k(b, t, hd, i);
        if (!gla) {
          for (std::size_t j = 0; j < V; ++j)
            for (std::size_t i = 0; i < K; ++i) write_value[j] -= h[i][j] * in.k(b, t, hd, i);
          for (std::size_t i = 0; i < K; ++i)
            write_key[i] = in.gain ? broadcast_view<R>(*in.gain, {B, T, H, K})(b, t, hd, i)
                                   : broadcast_view<R>(*in.beta, {B, T, H})(b, t, hd) * in.k(b, t, hd, i);
        }
        for (std::size_t i = 0; i < K; ++i)
          for (std::size_t j = 0; j < V; ++j) h[i][j] += write_key[i] * write_value[j];
        // read
        for (std::size_t j = 0; j < V; ++j) {
          R o(0);
          for (std::size_t i = 0; i < K; ++i) o += h[i][j] * (scale * in.q(b, t, hd, i));
          res.o[((b * T + t) * H + hd) * V + j] = o;
        }
      }
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) res.state[((b * H + hd) * K + i) * V + j] = h[i][j];
    }
  return res;
}

/// `x` materialised at its full shape [B, T, H] (broadcast expanded).
tensor<R> expand3(const tensor<R>& x, const shape_t& full) {
  const broadcast_view<R> view(x, full);
  tensor<R> out(x.name(), full);
  for (std::size_t f = 0; f < out.size(); ++f) {
    const auto idx = out.index_of(f);
    out.data()[f] = view(idx[0], idx[1], idx[2]);
  }
  return out;
}

rc::Gen<fixed_gain_rule> gen_rule() {
  return rc::gen::element(fixed_gain_rule::gla, fixed_gain_rule::delta_net, fixed_gain_rule::gated_delta_net,
                          fixed_gain_rule::kda);
}

}  // namespace

TEST_SUITE("fixed_gain") {
  TEST_CASE("fixed_gain: chunked WY form equals the sequential form exactly, every rule") {
    check_property("fixed_gain_chunked_equals_sequential_gla",
                   [] { chunked_equals_sequential(fixed_gain_rule::gla, false); });
    check_property("fixed_gain_chunked_equals_sequential_delta_net",
                   [] { chunked_equals_sequential(fixed_gain_rule::delta_net, false); });
    check_property("fixed_gain_chunked_equals_sequential_gdn",
                   [] { chunked_equals_sequential(fixed_gain_rule::gated_delta_net, false); });
    check_property("fixed_gain_chunked_equals_sequential_kda",
                   [] { chunked_equals_sequential(fixed_gain_rule::kda, false); });
    check_property("fixed_gain_chunked_equals_sequential_given_gain", [] {
      chunked_equals_sequential(
          *rc::gen::element(fixed_gain_rule::delta_net, fixed_gain_rule::gated_delta_net, fixed_gain_rule::kda), true);
    });
  }

  TEST_CASE("fixed_gain: the sequential form equals a plain restatement of fla's loop") {
    check_property("fixed_gain_sequential_equals_fla_loop", [] {
      const auto rule = *gen_rule();
      const bool given_gain = rule != fixed_gain_rule::gla && *rc::gen::arbitrary<bool>();
      const dims d = draw_dims();
      const auto in = draw_inputs(rule, given_gain, d);
      const R scale = in.scale ? *in.scale : R(1) / R(d.K == 1 ? 1 : 2);  // 1/√K for K = 1, 4
      const auto expected = fla_loop(in, scale);
      const auto got = fixed_gain_forward(in);
      RC_ASSERT(got.o.data() == expected.o);
      RC_ASSERT(got.final_state.data() == expected.state);
    });
  }

  TEST_CASE("fixed_gain: GDN, DeltaNet and the given-gain form are special cases of KDA") {
    check_property("fixed_gain_gdn_is_kda_with_equal_gates", [] {
      const dims d = draw_dims();
      const auto gdn = draw_inputs(fixed_gain_rule::gated_delta_net, *rc::gen::arbitrary<bool>(), d);
      auto kda = gdn;
      kda.rule = fixed_gain_rule::kda;
      // every channel of α_t equal to GDN's scalar gate: [B, T, H] -> [B, T, H, K]
      const auto g3 = expand3(*gdn.g, {d.B, d.T, d.H});
      tensor<R> g4("g", {d.B, d.T, d.H, d.K});
      for (std::size_t f = 0; f < g4.size(); ++f) g4.data()[f] = g3.data()[f / d.K];
      kda.g = g4;
      const std::size_t chunk = draw_chunk_size(d.T);
      assert_same(fixed_gain_forward(gdn), fixed_gain_forward(kda));
      assert_same(fixed_gain_chunked_forward(gdn, chunk), fixed_gain_chunked_forward(kda, chunk));
    });

    check_property("fixed_gain_delta_net_is_kda_with_unit_decay", [] {
      const dims d = draw_dims();
      const auto dn = draw_inputs(fixed_gain_rule::delta_net, *rc::gen::arbitrary<bool>(), d);
      auto kda = dn;
      kda.rule = fixed_gain_rule::kda;
      kda.g = tensor<R>("g", {d.B, d.T, d.H, d.K}, R(1));  // α = 1: g = 0 in log space
      const std::size_t chunk = draw_chunk_size(d.T);
      assert_same(fixed_gain_forward(dn), fixed_gain_forward(kda));
      assert_same(fixed_gain_chunked_forward(dn, chunk), fixed_gain_chunked_forward(kda, chunk));
    });

    check_property("fixed_gain_given_gain_beta_k_is_beta_form", [] {
      const auto rule =
          *rc::gen::element(fixed_gain_rule::delta_net, fixed_gain_rule::gated_delta_net, fixed_gain_rule::kda);
      const dims d = draw_dims();
      const auto beta_form = draw_inputs(rule, false, d);
      auto two_key = beta_form;
      two_key.beta.reset();
      const auto beta = expand3(*beta_form.beta, {d.B, d.T, d.H});
      tensor<R> kappa("gain", {d.B, d.T, d.H, d.K});
      for (std::size_t f = 0; f < kappa.size(); ++f) kappa.data()[f] = beta.data()[f / d.K] * beta_form.k.data()[f];
      two_key.gain = kappa;
      const std::size_t chunk = draw_chunk_size(d.T);
      const run_options options{1, true};
      assert_same(fixed_gain_forward(beta_form, options), fixed_gain_forward(two_key, options));
      // the chunked forms factor A differently (β on the row vs κ = β k on the column)
      assert_same(fixed_gain_chunked_forward(beta_form, chunk, options),
                  fixed_gain_chunked_forward(two_key, chunk, options));
      assert_same(fixed_gain_forward(beta_form, options), fixed_gain_chunked_forward(two_key, chunk, options));
    });
  }

  TEST_CASE("fixed_gain: GLA is not a delta rule but equals KDA with beta = 1 where nothing is erased") {
    check_property("fixed_gain_gla_is_kda_without_erase_on_one_hot_keys", [] {
      // Distinct one-hot keys from S_0 = 0: row i_t of diag(α_t) S_{t−1} was never written, so the
      // erase term k_t k_tᵀ diag(α_t) S_{t−1} of KDA is 0 and KDA (β = 1) writes exactly GLA's k_t v_tᵀ.
      dims d = draw_dims();
      d.T = *rc::gen::inRange<std::size_t>(1, d.K + 1);
      auto gla = draw_inputs(fixed_gain_rule::gla, false, d);
      gla.initial_state.reset();
      const auto order = *rc::gen::unique<std::vector<std::size_t>>(d.T, rc::gen::inRange<std::size_t>(0, d.K));
      for (std::size_t b = 0; b < d.B; ++b)
        for (std::size_t h = 0; h < d.H; ++h)
          for (std::size_t t = 0; t < d.T; ++t)
            for (std::size_t i = 0; i < d.K; ++i) gla.k(b, t, h, i) = R(i == order[t] ? 1 : 0);
      auto kda = gla;
      kda.rule = fixed_gain_rule::kda;
      kda.beta = tensor<R>("beta", {1}, R(1));
      assert_same(fixed_gain_forward(gla), fixed_gain_forward(kda));
      // ... and with a key written twice the erase term is no longer 0: the rules differ.
      if (d.T >= 2) {
        auto gla2 = gla, kda2 = kda;
        for (std::size_t i = 0; i < d.K; ++i) {
          gla2.k(0, 1, 0, i) = gla2.k(0, 0, 0, i);
          kda2.k(0, 1, 0, i) = gla2.k(0, 0, 0, i);
        }
        // erase term at t = 1: k kᵀ diag(α_1) S_0 = α_1 k_0 v_0ᵀ (the one-hot row), non-zero iff v_0 != 0
        bool v0_nonzero = false;
        for (std::size_t j = 0; j < d.V; ++j) v0_nonzero = v0_nonzero || gla.v(0, 0, 0, j) != 0;
        if (v0_nonzero)
          RC_ASSERT(fixed_gain_forward(gla2).final_state.data() != fixed_gain_forward(kda2).final_state.data());
      }
    });
  }
}
