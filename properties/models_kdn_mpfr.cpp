// The KDN parallel forms stay within a derived rounding bound of the sequential references in MPFR
// at 256 bits (granted 257) for T up to 4096, and threads = 3 is bit-identical to threads = 1.
//
// THE BOUND. u = 2^-p (p the granted precision), λ = u / (1 − u), γ_n = n u / (1 − n u). Inputs are
// exact at p bits (dyadic doubles); decays α are the same values in both forms (one shared helper,
// e^g included). Every MPFR operation is correctly rounded: fl(x ∘ y) = (x ∘ y)(1 + δ), |δ| <= u,
// and |δ| <= λ relative to the computed value; no underflow or overflow (MPFR's exponent range).
// Relative errors of positive quantities are measured in log: "x has budget n" means
// |log(x_computed / x_exact)| <= n λ, and a chain of n roundings over non-negative terms has
// budget n ((1 − u)^n <= ∏(1 + δ) <= (1 + u)^n and −log(1 − u) <= λ).
//
// (1) Covariance, sequential. One step p ↦ p̂ / (1 + u p̂), p̂ = α α p + ω, u = μ k k / r:
//     p̂ has budget 3 against the exact p̂ of the computed p; g(x) = x / (1 + u x) is 1-Lipschitz in
//     log (x g'(x) / g(x) = 1 / (1 + u x) <= 1), and its own evaluation costs 6 (u: 3, u x: +1,
//     1 + ·: +1, the quotient: +1). Every Möbius map with entries >= 0 is 1-Lipschitz in log
//     (x f'/f = x det / ((a x + b)(c x + d)) <= 1 since a c x² + 2 b c x + b d >= 0), so the errors
//     of the steps add up:   diagonal σ_p^seq(t) = 9 t;   isotropic (a = Σα²/K: K + 1, b̂: K + 3,
//     u = μ‖k‖²/(K r): K + 3, u b̂, 1 + ·, quotient: +3) σ_b^seq(t) = (2K + 9) t.
// (2) Covariance, parallel. Leaf entries have budget L (diagonal: c = (μkk/r)(αα) has 5, d = 1 + uω
//     has 5; isotropic: c = u a has 2K + 5). An m-leaf prefix is, up to a positive factor that the
//     action ignores (§8 fact 3), Σ over the exact monomials, each with budget L m + r_s (m − 1): every
//     schedule builds it from m − 1 composes of non-identity values (scan/derive.hpp), each compose
//     costs 2 per monomial (a product and a sum of non-negative terms), 3 with trace or max-entry
//     rescaling (one more product; the common factor fl(1/s) is projectively invisible), 2 with
//     power-of-two rescaling (exact). Applying Π = [[A, B], [C, D]] to x_0 costs 2 in the numerator
//     and denominator each and 1 for the quotient:   σ^par(t) = 2 (L t + r_s (t − 1) + 2) + 1.
// (3) Differences. Both forms are compared through the exact values: |log(x^par / x^seq)| <=
//     (σ^seq + σ^par) λ. Then p̂_t: σ(t−1) + 3 each side (isotropic: K + 3); the diagonal gain
//     κ_i = p̂_i k_i / (r + Σ p̂_j k_j²) is 1-Lipschitz in log against max_j |log p̂_j| (the gradient of
//     log κ_i in log p̂ has l1 norm 1 − p̂_i k_i²/s + Σ_{j≠i} p̂_j k_j²/s <= 1) and costs K + 4;
//     β = b̂ / (r + b̂ ‖k‖²) is 1-Lipschitz (r / (r + b̂‖k‖²) <= 1) and costs K + 3, κ = β k one more.
//     Readout variance: diagonal 2K more (a sum of K non-negative terms on each side), isotropic 2.
//     κ^par and κ^seq have the same sign and vanish together; |κ^par − κ^seq| <= c_t |κ^seq| with
//     c_t = exp(ε_κ(t) λ) − 1.
// (4) Memory (a running bound, Higham's running error analysis, no cancellation assumed). Both forms
//     run the same operations (models/delta_rule.hpp) with different gains. For one operation on
//     the two sides, z^x = fl(x^x ∘ y^x): |z^par − z^seq| <= (|exact difference| + 2λ|z^seq|) / (1 − λ),
//     and a K-term dot product adds γ_K Σ |terms| on each side. With E >= |S^par_{t−1} − S^seq_{t−1}|
//     (E_0 = 0) and the sequential intermediates (replayed here, and checked to equal the reference
//     bit for bit):
//       Ŝ = fl(α S):          Ê_ij = (α_i E_ij + 2λ|Ŝ_ij|) / (1 − λ)
//       y = fl(Ŝᵀ k):         P_j  = Σ_i Ê_ij |k_i| + γ_K Σ_i (2|Ŝ_ij| + Ê_ij) |k_i|
//       e = fl(v − y):        Ee_j = (P_j + 2λ|e_j|) / (1 − λ)
//       w = fl(κ e):          Ew_ij = (c |κ_i| (|e_j| + Ee_j) + |κ_i| Ee_j + 2λ|w_ij|) / (1 − λ)
//       S = fl(Ŝ + w):        E'_ij = (Ê_ij + Ew_ij + 2λ|S_ij|) / (1 − λ)
//       o = fl(Sᵀ fl(τ q)):   |o^par_j − o^seq_j| <= Σ_i E'_ij |τq_i| + γ_K Σ_i (2|S_ij| + E'_ij) |τq_i|
//     (the fl(τ q_i) are the same numbers on both sides).
// The bound and every check are evaluated at 2p + 64 bits, where their own rounding (relative
// < 2^-(2p+40) even over 4096 tokens) is covered by a slack factor 1 + 2^-p on each comparison.
// Planted bugs in the sequential references move results by O(1), far outside the bound (which is
// about 2^-240 relative for the covariances and gains, e.g. 9·4096 + 2(8·4096 + 2) + 1 < 2^17).
#include <cmath>
#include <optional>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/models/delta_rule.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;
using M = mpfr_real;

namespace {

constexpr unsigned working_bits = 256;

// ---- Generators: dyadic doubles, exact in MPFR ------------------------------------------------------

rc::Gen<double> gen_dyadic(int lo, int hi, int shift) {
  return rc::gen::map(rc::gen::inRange(lo, hi + 1), [shift](int j) { return std::ldexp(double(j), -shift); });
}

tensor<M> gen_tensor(const std::string& name, const shape_t& shape, const rc::Gen<double>& element) {
  const auto xs = *rc::gen::container<std::vector<double>>(element_count(shape), element);
  std::vector<M> data;
  data.reserve(xs.size());
  for (double x : xs) data.push_back(from_double<M>(x));
  return tensor<M>(name, shape, std::move(data));
}

struct sizes {
  std::size_t batch, tokens, heads, key_dim, value_dim;
};

/// Lengths up to 4096: mostly short, some hundreds, one in ten the full 4096.
std::size_t gen_length() {
  return *rc::gen::weightedOneOf<std::size_t>({{6, rc::gen::inRange<std::size_t>(1, 65)},
                                               {3, rc::gen::inRange<std::size_t>(65, 513)},
                                               {1, rc::gen::just<std::size_t>(4096)}});
}

/// Decays in (0, 1] as linear α or log gates g = log α <= 0 (then α = e^g, the same in both forms).
void gen_decays(tensor<M>& g, gate_space& gates, const shape_t& shape) {
  gates = *rc::gen::element(gate_space::linear, gate_space::log);
  if (gates == gate_space::linear)
    g = gen_tensor("g", shape,
                   rc::gen::oneOf(rc::gen::just(1.0), gen_dyadic(32, 63, 6), gen_dyadic(1, 64, 6)));
  else
    g = gen_tensor("g", shape, rc::gen::oneOf(rc::gen::just(0.0), gen_dyadic(-64, 0, 6)));
}

std::optional<M> gen_scale() {
  if (*rc::gen::arbitrary<bool>()) return std::nullopt;  // 1/√K, rounded: the same in both forms
  return from_double<M>(*gen_dyadic(1, 16, 3));
}

tensor<M> gen_mu(std::size_t heads, std::size_t key_dim) {
  return gen_tensor("mu", {heads},
                    rc::gen::oneOf(rc::gen::just(1.0), rc::gen::just(double(key_dim)), gen_dyadic(1, 16, 2)));
}

diagonal_kdn_inputs<M> gen_diag(const sizes& s) {
  const shape_t key_shape{s.batch, s.tokens, s.heads, s.key_dim};
  diagonal_kdn_inputs<M> in;
  in.q = gen_tensor("q", key_shape, gen_dyadic(-32, 32, 4));
  in.k = gen_tensor("k", key_shape, gen_dyadic(-16, 16, 4));
  in.v = gen_tensor("v", {s.batch, s.tokens, s.heads, s.value_dim}, gen_dyadic(-32, 32, 4));
  gen_decays(in.g, in.gates, key_shape);
  in.omega = gen_tensor("omega", key_shape, gen_dyadic(0, 16, 4));
  in.r = gen_tensor("r", {s.batch, s.tokens, s.heads}, gen_dyadic(1, 32, 3));
  in.mu = gen_mu(s.heads, s.key_dim);
  in.initial_covariance = gen_tensor("initial_covariance", {s.batch, s.heads, s.key_dim}, gen_dyadic(1, 32, 3));
  in.initial_state = gen_tensor("initial_state", {s.batch, s.heads, s.key_dim, s.value_dim}, gen_dyadic(-32, 32, 4));
  in.scale = gen_scale();
  return in;
}

isotropic_kdn_inputs<M> gen_iso(const sizes& s) {
  const shape_t key_shape{s.batch, s.tokens, s.heads, s.key_dim};
  isotropic_kdn_inputs<M> in;
  in.q = gen_tensor("q", key_shape, gen_dyadic(-32, 32, 4));
  in.k = gen_tensor("k", key_shape, gen_dyadic(-16, 16, 4));
  in.v = gen_tensor("v", {s.batch, s.tokens, s.heads, s.value_dim}, gen_dyadic(-32, 32, 4));
  gen_decays(in.g, in.gates, key_shape);
  in.omega = gen_tensor("omega", {s.batch, s.tokens, s.heads}, gen_dyadic(0, 16, 4));
  in.r = gen_tensor("r", {s.batch, s.tokens, s.heads}, gen_dyadic(1, 32, 3));
  in.mu = gen_mu(s.heads, s.key_dim);
  in.initial_covariance = gen_tensor("initial_covariance", {s.batch, s.heads}, gen_dyadic(1, 32, 3));
  in.initial_state = gen_tensor("initial_state", {s.batch, s.heads, s.key_dim, s.value_dim}, gen_dyadic(-32, 32, 4));
  in.scale = gen_scale();
  return in;
}

kdn_scan_options gen_scan(std::size_t tokens) {
  const scan_schedule schedule = *rc::gen::weightedOneOf<scan_schedule>(
      {{3, rc::gen::just(scan_schedule::chunked)}, {1, rc::gen::elementOf(all_scan_schedules)}});
  return {schedule, *kt::gen_chunk_size(tokens),
          *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry,
                            rescale_mode::power_of_two)};
}

// ---- The bound --------------------------------------------------------------------------------------

/// What the budgets need; built inside the check scope (2p + 64 bits).
struct budget {
  unsigned p;
  M u, lambda, slack;  // 2^-p, u / (1 − u), 1 + 2^-p
  M gamma(std::size_t n) const { return M(static_cast<long>(n)) * u / (M(1) - M(static_cast<long>(n)) * u); }
  /// n λ.
  M of(double n) const { return M(n) * lambda; }
};

budget make_budget(unsigned p) {
  const M u = scalar_traits<M>::ldexp(M(1), -static_cast<long>(p));
  return {p, u, u / (M(1) - u), M(1) + u};
}

/// |log(x / y)| <= eps (x and y of one sign, or both 0), evaluated with the slack.
void assert_log_close(const M& x, const M& y, const M& eps, const budget& bd) {
  if (y == 0) {
    RC_ASSERT(x == 0);
    return;
  }
  const M ratio = x / y;
  RC_ASSERT(ratio > 0);
  RC_ASSERT(abs(log(ratio)) <= eps * bd.slack);
}

/// Sequential intermediates of one token of the memory, replayed at p bits (see (4)).
struct memory_step {
  std::vector<M> alpha, decayed, innovation, write, state, scaled_query, gain;  // α, Ŝ, e, w, S, fl(τq), κ
};

/// Replays the sequential memory S_t = (I − κ_t k_tᵀ) diag(α_t) S_{t−1} + κ_t v_tᵀ with the
/// sequential gains, the way models/delta_rule.hpp computes it, keeping every intermediate; checks
/// it reproduces the sequential outputs bit for bit.
template <class Gain>
std::vector<memory_step> replay(const tensor<M>& q, const tensor<M>& k, const tensor<M>& v, const tensor<M>& g,
                                gate_space gates, const tensor<M>& initial_state, const M& tau, Gain gain_of,
                                const tensor<M>& o_seq, const tensor<M>& final_seq) {
  const std::size_t N = q.dim(1), K = q.dim(3), V = v.dim(3);
  std::vector<M> state(K * V);
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = 0; j < V; ++j) state[i * V + j] = initial_state(0, 0, i, j);
  std::vector<memory_step> steps(N);
  std::vector<M> alpha(K), key(K), query(K), read(V);
  for (std::size_t t = 0; t < N; ++t) {
    memory_step& st = steps[t];
    for (std::size_t i = 0; i < K; ++i) {
      alpha[i] = decay_of_gate(g(0, t, 0, i), gates);
      key[i] = k(0, t, 0, i);
      query[i] = q(0, t, 0, i);
    }
    st.alpha = alpha;
    st.gain = gain_of(t);
    decay_rows<M>(state, V, alpha);
    st.decayed = state;
    const std::vector<M> predicted = predict_value<M>(state, V, key);
    st.innovation.resize(V);
    for (std::size_t j = 0; j < V; ++j) st.innovation[j] = v(0, t, 0, j) - predicted[j];
    st.write.resize(K * V);
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) {
        st.write[i * V + j] = st.gain[i] * st.innovation[j];
        state[i * V + j] += st.write[i * V + j];
      }
    st.state = state;
    st.scaled_query.resize(K);
    for (std::size_t i = 0; i < K; ++i) st.scaled_query[i] = tau * query[i];
    read_state<M>(state, query, tau, read);
    for (std::size_t j = 0; j < V; ++j) RC_ASSERT(read[j] == o_seq(0, t, 0, j));
  }
  for (std::size_t n = 0; n < state.size(); ++n) RC_ASSERT(state[n] == final_seq.data()[n]);
  return steps;
}

/// The running memory bound (4); asserts the outputs o and the final state of the two forms.
/// `gain_budget(t)` is ε_κ(t) in units of λ. Runs inside the check scope.
template <class GainBudget>
void assert_memory_within_bound(const std::vector<memory_step>& steps, const tensor<M>& k, const tensor<M>& o_par, const tensor<M>& o_seq,
                                const tensor<M>& final_par, const tensor<M>& final_seq, GainBudget gain_budget,
                                const budget& bd) {
  const std::size_t N = steps.size(), K = k.dim(3), V = o_seq.dim(3);
  const M lam = bd.lambda, one(1), two(2), gk = bd.gamma(K);
  std::vector<M> E(K * V, M(0)), Ehat(K * V), Ee(V), Enew(K * V);
  for (std::size_t t = 0; t < N; ++t) {
    const memory_step& st = steps[t];
    const M c = exp(bd.of(gain_budget(t))) - one;
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j)
        Ehat[i * V + j] = (st.alpha[i] * E[i * V + j] + two * lam * abs(st.decayed[i * V + j])) / (one - lam);
    for (std::size_t j = 0; j < V; ++j) {
      M P(0), mass(0);
      for (std::size_t i = 0; i < K; ++i) {
        const M key = abs(k(0, t, 0, i));
        P += Ehat[i * V + j] * key;
        mass += (two * abs(st.decayed[i * V + j]) + Ehat[i * V + j]) * key;
      }
      P += gk * mass;
      Ee[j] = (P + two * lam * abs(st.innovation[j])) / (one - lam);
    }
    for (std::size_t i = 0; i < K; ++i) {
      const M kappa = abs(st.gain[i]);
      for (std::size_t j = 0; j < V; ++j) {
        const M Ew = (c * kappa * (abs(st.innovation[j]) + Ee[j]) + kappa * Ee[j] +
                      two * lam * abs(st.write[i * V + j])) /
                     (one - lam);
        Enew[i * V + j] = (Ehat[i * V + j] + Ew + two * lam * abs(st.state[i * V + j])) / (one - lam);
      }
    }
    E = Enew;
    for (std::size_t j = 0; j < V; ++j) {
      M B(0), mass(0);
      for (std::size_t i = 0; i < K; ++i) {
        const M sq = abs(st.scaled_query[i]);
        B += E[i * V + j] * sq;
        mass += (two * abs(st.state[i * V + j]) + E[i * V + j]) * sq;
      }
      B += gk * mass;
      RC_ASSERT(abs(o_par(0, t, 0, j) - o_seq(0, t, 0, j)) <= B * bd.slack);
    }
  }
  for (std::size_t n = 0; n < E.size(); ++n)
    RC_ASSERT(abs(final_par.data()[n] - final_seq.data()[n]) <= E[n] * bd.slack);
}

/// Rounding cost of one compose per monomial (2), with trace or max-entry rescaling 3.
double compose_cost(rescale_mode mode) {
  return mode == rescale_mode::trace || mode == rescale_mode::max_entry ? 3.0 : 2.0;
}

/// σ^par(t) of (2) for leaves of budget L; 0 at t = 0 (the exact prior).
double parallel_covariance_budget(std::size_t t, double leaf, double compose) {
  if (t == 0) return 0;
  const double m = static_cast<double>(t);
  return 2 * (leaf * m + compose * (m - 1) + 2) + 1;
}

}  // namespace

TEST_SUITE("kdn") {
  TEST_CASE("kdn: diagonal parallel form within the derived bound of the sequential one (MPFR 256, T <= 4096)") {
    check_property("diag_kdn_parallel_within_bound_mpfr", [] {
      const precision_scope scope(working_bits);
      const unsigned p = scalar_traits<M>::precision_bits();
      const sizes s{1, gen_length(), 1, *rc::gen::inRange<std::size_t>(1, 4), *rc::gen::inRange<std::size_t>(1, 3)};
      const auto in = gen_diag(s);
      const kdn_scan_options scan = gen_scan(s.tokens);
      const auto seq = diagonal_kdn_forward(in, {1, true});
      const auto par = diagonal_kdn_parallel(in, scan, {1, true});
      const std::size_t N = s.tokens, K = s.key_dim;
      const M tau = query_scale(in.scale, K);
      const auto steps = replay(in.q, in.k, in.v, in.g, in.gates, *in.initial_state, tau,
                                [&](std::size_t t) {
                                  std::vector<M> kappa(K);
                                  for (std::size_t i = 0; i < K; ++i) kappa[i] = (*seq.gain)(0, t, 0, i);
                                  return kappa;
                                },
                                seq.o, seq.final_state);

      const precision_scope check_scope(2 * p + 64);
      const budget bd = make_budget(p);
      const double rs = compose_cost(scan.rescale), Kd = static_cast<double>(K);
      // σ_p(t) of both forms (t = number of tokens seen), in units of λ.
      const auto cov = [&](std::size_t t) { return 9.0 * double(t) + parallel_covariance_budget(t, 5, rs); };
      const auto predicted = [&](std::size_t t) { return cov(t - 1) + 6; };           // t >= 1
      const auto gain = [&](std::size_t t) { return predicted(t) + 2 * (Kd + 4); };  // t >= 1
      for (std::size_t t = 0; t < N; ++t) {
        for (std::size_t i = 0; i < K; ++i) {
          assert_log_close((*par.predicted_covariance)(0, t, 0, i), (*seq.predicted_covariance)(0, t, 0, i),
                           bd.of(predicted(t + 1)), bd);
          assert_log_close((*par.gain)(0, t, 0, i), (*seq.gain)(0, t, 0, i), bd.of(gain(t + 1)), bd);
        }
        assert_log_close(par.readout_variance(0, t, 0), seq.readout_variance(0, t, 0), bd.of(cov(t + 1) + 2 * Kd),
                         bd);
      }
      for (std::size_t i = 0; i < K; ++i)
        assert_log_close(par.final_covariance(0, 0, i), seq.final_covariance(0, 0, i), bd.of(cov(N)), bd);
      assert_memory_within_bound(steps, in.k, par.o, seq.o, par.final_state, seq.final_state,
                                 [&](std::size_t t) { return gain(t + 1); }, bd);
    });
  }

  TEST_CASE("kdn: isotropic parallel form within the derived bound of the sequential one (MPFR 256, T <= 4096)") {
    check_property("iso_kdn_parallel_within_bound_mpfr", [] {
      const precision_scope scope(working_bits);
      const unsigned p = scalar_traits<M>::precision_bits();
      const sizes s{1, gen_length(), 1, *rc::gen::inRange<std::size_t>(1, 4), *rc::gen::inRange<std::size_t>(1, 3)};
      const auto in = gen_iso(s);
      const kdn_scan_options scan = gen_scan(s.tokens);
      const auto seq = isotropic_kdn_forward(in, {1, true});
      const auto par = isotropic_kdn_parallel(in, scan, {1, true});
      const std::size_t N = s.tokens, K = s.key_dim;
      const M tau = query_scale(in.scale, K);
      const auto steps = replay(in.q, in.k, in.v, in.g, in.gates, *in.initial_state, tau,
                                [&](std::size_t t) {
                                  std::vector<M> kappa(K);
                                  for (std::size_t i = 0; i < K; ++i)
                                    kappa[i] = (*seq.beta)(0, t, 0) * in.k(0, t, 0, i);
                                  return kappa;
                                },
                                seq.o, seq.final_state);

      const precision_scope check_scope(2 * p + 64);
      const budget bd = make_budget(p);
      const double rs = compose_cost(scan.rescale), Kd = static_cast<double>(K);
      const auto cov = [&](std::size_t t) {
        return (2 * Kd + 9) * double(t) + parallel_covariance_budget(t, 2 * Kd + 5, rs);
      };
      const auto predicted = [&](std::size_t t) { return cov(t - 1) + 2 * (Kd + 3); };
      const auto beta = [&](std::size_t t) { return predicted(t) + 2 * (Kd + 3); };
      for (std::size_t t = 0; t < N; ++t) {
        assert_log_close((*par.predicted_covariance)(0, t, 0), (*seq.predicted_covariance)(0, t, 0),
                         bd.of(predicted(t + 1)), bd);
        assert_log_close((*par.beta)(0, t, 0), (*seq.beta)(0, t, 0), bd.of(beta(t + 1)), bd);
        assert_log_close(par.readout_variance(0, t, 0), seq.readout_variance(0, t, 0), bd.of(cov(t + 1) + 2), bd);
      }
      assert_log_close(par.final_covariance(0, 0), seq.final_covariance(0, 0), bd.of(cov(N)), bd);
      assert_memory_within_bound(steps, in.k, par.o, seq.o, par.final_state, seq.final_state,
                                 [&](std::size_t t) { return beta(t + 1) + 2; }, bd);
    });
  }

  TEST_CASE("kdn: threads = 3 is bit-identical to threads = 1 (MPFR 256)") {
    check_property("kdn_threads_bit_identical", [] {
      const precision_scope scope(working_bits);  // before any worker starts (detail/parallel_for.hpp)
      const sizes s{*rc::gen::inRange<std::size_t>(1, 4), *rc::gen::inRange<std::size_t>(1, 17),
                    *rc::gen::inRange<std::size_t>(1, 4), *rc::gen::inRange<std::size_t>(1, 4),
                    *rc::gen::inRange<std::size_t>(1, 3)};
      const auto d = gen_diag(s);
      const auto i = gen_iso(s);
      const kdn_scan_options scan = gen_scan(s.tokens);
      const auto same = [](const auto& a, const auto& b) {
        RC_ASSERT(a.o.data() == b.o.data());
        RC_ASSERT(a.final_state.data() == b.final_state.data());
        RC_ASSERT(a.final_covariance.data() == b.final_covariance.data());
        RC_ASSERT(a.readout_variance.data() == b.readout_variance.data());
        RC_ASSERT(a.predicted_covariance->data() == b.predicted_covariance->data());
      };
      same(diagonal_kdn_forward(d, {3, true}), diagonal_kdn_forward(d, {1, true}));
      same(diagonal_kdn_parallel(d, scan, {3, true}), diagonal_kdn_parallel(d, scan, {1, true}));
      same(isotropic_kdn_forward(i, {3, true}), isotropic_kdn_forward(i, {1, true}));
      same(isotropic_kdn_parallel(i, scan, {3, true}), isotropic_kdn_parallel(i, scan, {1, true}));
      const auto threaded = diagonal_kdn_forward(d, {3, true});
      for (const auto& x : threaded.o.data())
        RC_ASSERT(mpfr_get_prec(x.backend().data()) == static_cast<mpfr_prec_t>(scalar_traits<M>::precision_bits()));
    });
  }
}
