// The KDN parallel forms stay within a derived rounding bound of the sequential references in MPFR
// at 256 bits (granted 257) for T up to 4096, and threads = 3 is bit-identical to threads = 1.
//
// THE BOUND. u = 2^-p (p the granted precision), λ = u / (1 − u), γ_n = n u / (1 − n u). Inputs are
// exact at p bits (dyadic doubles); the covariance paths' decays α are the same values in both forms
// (models/gates.hpp, e^g included; the chunked memory forms its own, see (4)). Every MPFR operation is correctly rounded: fl(x ∘ y) = (x ∘ y)(1 + δ), |δ| <= u,
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
// (4) Memory (docs/kdn-parallel-rounding.md). The parallel form runs the memory in the chunked WY
//     form (models/fixed_gain_chunked.hpp, chunks of C tokens) with its gains κ^par; the sequential
//     one token by token (models/delta_rule.hpp) with κ^seq. Both are compared through one exact
//     value: X* = the exact memory with the gains κ^par (the parallel's numbers, taken as exact),
//     the exact decays α* (e^g, or the linear α), and the same read vectors fl(τ q) (one
//     multiplication, the same numbers on both sides):
//         |X^par − X^seq| <= |X^par − X*| + |X* − X^seq|.
//     The chunked form's own norm-wise bound (properties/models_fixed_gain_mpfr.cpp) does not apply:
//     its hypotheses exclude a given gain, and I − κ kᵀ with the diagonal KDN's κ is not
//     non-expansive in the Frobenius norm. Both terms are running bounds (Higham's running error
//     analysis: every operation's rounding from its computed result, |fl(z) − z| <= λ|fl(z)|,
//     propagated through the operation exactly as it combines its operands' errors):
//     (4a) |X* − X^seq|, one side exact. With E >= |S^seq_{t−1} − S*_{t−1}| (E_0 = 0), α̂ = fl(e^g)
//       (|α̂ − α*| <= e_α = λα̂ for log gates, 0 for linear ones), the sequential intermediates
//       (replayed here and checked to equal the reference bit for bit) and c_t from (3):
//       Ŝ = fl(α̂ S):          Ê_ij = λ|Ŝ_ij| + e_α,i |S_ij| + α̂_i (1 + λ) E_ij   (α* <= α̂ / (1 − u))
//       y = fl(Ŝᵀ k):         P_j  = Σ_i Ê_ij |k_i| + γ_K Σ_i |Ŝ_ij| |k_i|
//       e = fl(v − y):        Ee_j = P_j + λ|e_j|
//       w = fl(κ^seq e):      Ew_ij = λ|w_ij| + c |κ_i| |e_j| + (1 + c) |κ_i| Ee_j     (κ* = κ^par)
//       S = fl(Ŝ + w):        E'_ij = λ|S_ij| + Ê_ij + Ew_ij
//       o = fl(Sᵀ fl(τ q)):   |o^seq_j − o*_j| <= Σ_i E'_ij |τq_i| + γ_K Σ_i |S_ij| |τq_i|
//     (4b) |X^par − X*|, chunk by chunk. The chunked algorithm is replayed here operation by
//       operation (checked to equal the parallel outputs bit for bit), each value with a bound on
//       its distance from the same operation on exact values, from the chunk-start state taken as
//       exact: products λ|z| + |x| e_y + |y| e_x + e_x e_y, sums λ|z| + e_x + e_y, exp (the log
//       gates' Γ = e^G, e^{−G}) λ z + (1 + λ) z (e^{e_G} − 1), the reciprocal of the linear Γ
//       λ|z| + e_x / (|x| (|x| − e_x)). Exactly, the chunk maps its start state linearly:
//       S_t = M_t S_start + (terms without S_start), M_t = Π_{s<=t} (I − κ_s k_sᵀ) diag(α*_s) within
//       the chunk (the WY form is exact algebra, models/fixed_gain_chunked.hpp), so the start
//       state's error E_S reaches the chunk's outputs and end state through M_t exactly:
//         |o^par_t − o*_t| <= (local bound) + |M_tᵀ fl(τ q_t)|ᵀ E_S,
//         E_S(next chunk) = (local bound of the carry) + |M_last| E_S,
//       with |·| entrywise and M_t evaluated at 2p + 64 bits. (The running bound alone would carry
//       E_S through |W| and the chunk's sums of |ρ w Ũ| terms, which do not cancel as M_t does.)
// The bound and every check are evaluated at 2p + 64 bits, where their own rounding (relative
// < 2^-(2p+40) even over 4096 tokens) is covered by a slack factor 1 + 2^-p on each comparison.
// Planted bugs in the sequential references move results by O(1), far outside the bound (which is
// about 2^-240 relative for the covariances and gains, e.g. 9·4096 + 2(8·4096 + 2) + 1 < 2^17; the
// property reports the memory's worst log2(observed / bound) and log2(bound / max |o|)).
#include <mpfr.h>

#include <algorithm>
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
    g = gen_tensor("g", shape, rc::gen::oneOf(rc::gen::just(1.0), gen_dyadic(32, 63, 6), gen_dyadic(1, 64, 6)));
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
  const std::size_t scan_chunk = *kt::gen_chunk_size(tokens);
  const rescale_mode rescale =
      *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two);
  // Memory chunks 1, 2, 3, 16, 64, or one chunk longer than T for T <= 64 only: the chunked form's
  // triangular inverse costs n³ per chunk.
  const std::size_t memory_chunk =
      tokens <= 64 ? *kt::gen_chunk_size(tokens) : *rc::gen::element<std::size_t>(1, 2, 3, 16, 64);
  return {schedule, scan_chunk, rescale, memory_chunk};
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

/// Sequential intermediates of one token of the memory, replayed at p bits (see (4a)).
struct memory_step {
  std::vector<M> previous, alpha, decayed, innovation, write, state, scaled_query,
      gain;  // S_{t−1}, α̂, Ŝ, e, w, S, fl(τq), κ
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
    st.previous = state;
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

/// Bounds on the distance of a memory's outputs from the exact X* of (4): o [t * V + j], S_T [i * V + j].
struct memory_bound {
  std::vector<M> o, final_state;
};

/// (4a): the sequential memory against X* (gains κ^par, exact decays). `gain_budget(t)` is ε_κ(t)
/// of (3) in units of λ. Runs inside the check scope.
template <class GainBudget>
memory_bound sequential_memory_bound(const std::vector<memory_step>& steps, const tensor<M>& k, gate_space gates,
                                     GainBudget gain_budget, const budget& bd) {
  const std::size_t N = steps.size(), K = k.dim(3), V = steps.empty() ? 0 : steps[0].innovation.size();
  const M lam = bd.lambda, one(1), gk = bd.gamma(K);
  memory_bound out{std::vector<M>(N * V), {}};
  std::vector<M> E(K * V, M(0)), Ehat(K * V), Ee(V);
  for (std::size_t t = 0; t < N; ++t) {
    const memory_step& st = steps[t];
    const M c = exp(bd.of(gain_budget(t))) - one;
    for (std::size_t i = 0; i < K; ++i) {
      // |α̂ − α*| <= u α* <= λ α̂ for e^g correctly rounded; a linear α is exact.
      const M e_alpha = gates == gate_space::log ? M(lam * st.alpha[i]) : M(0);
      const M alpha_max = st.alpha[i] * (one + lam);
      for (std::size_t j = 0; j < V; ++j) {
        const std::size_t x = i * V + j;
        Ehat[x] = lam * abs(st.decayed[x]) + e_alpha * abs(st.previous[x]) + alpha_max * E[x];
      }
    }
    for (std::size_t j = 0; j < V; ++j) {
      M P(0), mass(0);
      for (std::size_t i = 0; i < K; ++i) {
        const M key = abs(k(0, t, 0, i));
        P += Ehat[i * V + j] * key;
        mass += abs(st.decayed[i * V + j]) * key;
      }
      Ee[j] = P + gk * mass + lam * abs(st.innovation[j]);
    }
    for (std::size_t i = 0; i < K; ++i) {
      const M kappa = abs(st.gain[i]);
      for (std::size_t j = 0; j < V; ++j) {
        const std::size_t x = i * V + j;
        const M Ew = lam * abs(st.write[x]) + c * kappa * abs(st.innovation[j]) + (one + c) * kappa * Ee[j];
        E[x] = lam * abs(st.state[x]) + Ehat[x] + Ew;
      }
    }
    for (std::size_t j = 0; j < V; ++j) {
      M B(0), mass(0);
      for (std::size_t i = 0; i < K; ++i) {
        const M sq = abs(st.scaled_query[i]);
        B += E[i * V + j] * sq;
        mass += abs(st.state[i * V + j]) * sq;
      }
      out.o[t * V + j] = B + gk * mass;
    }
  }
  out.final_state = E;
  return out;
}

/// A value as the chunked form computes it (`v`, p bits) and a bound `e` (2p + 64 bits) on its
/// distance from the same operations on exact values (4b).
struct tracked {
  M v, e;
};

/// The operations of the chunked form, each rounded to p bits as the model rounds it (MPFR's
/// correctly rounded operations into a p-bit result, whatever the scope's precision), with the
/// running bound of (4b). Used inside the check scope.
struct running_ops {
  mpfr_prec_t p;
  M lam;

  M rounded() const {
    M r;
    mpfr_set_prec(r.backend().data(), p);
    return r;
  }
  static tracked exact(const M& x) { return {x, M(0)}; }
  tracked mul(const tracked& x, const tracked& y) const {
    M z = rounded();
    mpfr_mul(z.backend().data(), x.v.backend().data(), y.v.backend().data(), MPFR_RNDN);
    M e = lam * abs(z) + abs(x.v) * y.e + abs(y.v) * x.e + x.e * y.e;
    return {std::move(z), std::move(e)};
  }
  tracked add(const tracked& x, const tracked& y) const {
    M z = rounded();
    mpfr_add(z.backend().data(), x.v.backend().data(), y.v.backend().data(), MPFR_RNDN);
    M e = lam * abs(z) + x.e + y.e;
    return {std::move(z), std::move(e)};
  }
  tracked sub(const tracked& x, const tracked& y) const {
    M z = rounded();
    mpfr_sub(z.backend().data(), x.v.backend().data(), y.v.backend().data(), MPFR_RNDN);
    M e = lam * abs(z) + x.e + y.e;
    return {std::move(z), std::move(e)};
  }
  static tracked neg(const tracked& x) { return {M(-x.v), x.e}; }
  /// e^x: |fl(e^x̂) − e^x| <= λ fl(e^x̂) + e^x̂ (e^{e_x} − 1), e^x̂ <= (1 + λ) fl(e^x̂).
  tracked exp_of(const tracked& x) const {
    M z = rounded();
    mpfr_exp(z.backend().data(), x.v.backend().data(), MPFR_RNDN);
    M e = lam * z + (M(1) + lam) * z * expm1(x.e);
    return {std::move(z), std::move(e)};
  }
  /// 1/x: |fl(1/x̂) − 1/x| <= λ|fl(1/x̂)| + e_x / (|x̂| (|x̂| − e_x)), for e_x < |x̂|.
  tracked reciprocal(const tracked& x) const {
    RC_ASSERT(x.e < abs(x.v));
    M z = rounded();
    mpfr_ui_div(z.backend().data(), 1, x.v.backend().data(), MPFR_RNDN);
    M e = lam * abs(z) + x.e / (abs(x.v) * (abs(x.v) - x.e));
    return {std::move(z), std::move(e)};
  }
};

/// (4b): replays the chunked memory of models/fixed_gain_chunked.hpp (the given-gain rule:
/// r = 1, erase key k, write key κ^par), operation by operation, checks it reproduces the parallel
/// outputs bit for bit, and bounds its distance from X*. Runs inside the check scope.
memory_bound chunked_memory_bound(const tensor<M>& q, const tensor<M>& k, const tensor<M>& v, const tensor<M>& g,
                                  gate_space gates, const tensor<M>& gain, const tensor<M>& initial_state, const M& tau,
                                  std::size_t chunk_size, const tensor<M>& o_par, const tensor<M>& final_par,
                                  const budget& bd) {
  const std::size_t N = q.dim(1), K = q.dim(3), V = v.dim(3);
  const running_ops ops{static_cast<mpfr_prec_t>(bd.p), bd.lambda};
  memory_bound out{std::vector<M>(N * V), std::vector<M>(K * V, M(0))};
  std::vector<M> S(K * V);  // the chunk-start state (p bits), exactly as the model carries it
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = 0; j < V; ++j) S[i * V + j] = initial_state(0, 0, i, j);
  std::vector<M>& E_S = out.final_state;  // the bound on the chunk-start state's distance from X*

  for (std::size_t c0 = 0; c0 < N; c0 += chunk_size) {
    const std::size_t n = std::min(chunk_size, N - c0);
    const auto key = [&](std::size_t t, std::size_t i) { return running_ops::exact(k(0, c0 + t, 0, i)); };
    const auto write = [&](std::size_t t, std::size_t i) { return running_ops::exact(gain(0, c0 + t, 0, i)); };
    // fl(τ q): the same numbers as the sequential form's read vector, exact inputs of X*.
    std::vector<std::vector<M>> sq(n, std::vector<M>(K));
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < K; ++i)
        sq[t][i] = ops.mul(running_ops::exact(tau), running_ops::exact(q(0, c0 + t, 0, i))).v;

    // Γ_t and 1/Γ_t: cumsum of log gates and e^{±G}, or the cumulative product of linear decays.
    std::vector<std::vector<tracked>> gamma(n, std::vector<tracked>(K)), gamma_inv(n, std::vector<tracked>(K));
    for (std::size_t i = 0; i < K; ++i) {
      tracked acc = running_ops::exact(gates == gate_space::log ? M(0) : M(1));
      for (std::size_t t = 0; t < n; ++t) {
        const tracked gate = running_ops::exact(g(0, c0 + t, 0, i));
        if (gates == gate_space::log) {
          acc = ops.add(acc, gate);
          gamma[t][i] = ops.exp_of(acc);
          gamma_inv[t][i] = ops.exp_of(running_ops::neg(acc));
        } else {
          acc = ops.mul(acc, gate);
          gamma[t][i] = acc;
          gamma_inv[t][i] = ops.reciprocal(acc);
        }
      }
    }
    const auto ratio = [&](std::size_t t, std::size_t j, std::size_t i) {
      return ops.mul(gamma[t][i], gamma_inv[j][i]);
    };

    // A_tj = 1 · Σ_i (e_ti ρ_tj,i) w_ji (the product by r_t = 1 is exact), 𝒯 by forward substitution.
    std::vector<std::vector<tracked>> A(n, std::vector<tracked>(n, running_ops::exact(M(0))));
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t j = 0; j < t; ++j) {
        tracked dot = running_ops::exact(M(0));
        for (std::size_t i = 0; i < K; ++i)
          dot = ops.add(dot, ops.mul(ops.mul(key(t, i), ratio(t, j, i)), write(j, i)));
        A[t][j] = dot;
      }
    std::vector<std::vector<tracked>> Tm(n, std::vector<tracked>(n, running_ops::exact(M(0))));
    for (std::size_t j = 0; j < n; ++j) {
      Tm[j][j] = running_ops::exact(M(1));
      for (std::size_t t = j + 1; t < n; ++t) {
        tracked sum = running_ops::exact(M(0));
        for (std::size_t m = j; m < t; ++m) sum = ops.add(sum, ops.mul(A[t][m], Tm[m][j]));
        Tm[t][j] = running_ops::neg(sum);
      }
    }
    // X_t = 1 · (Γ_t ⊙ e_t), Y_t = 1 · v_t (exact); W = 𝒯 X, U = 𝒯 Y, Ũ = U − W S.
    std::vector<std::vector<tracked>> X(n, std::vector<tracked>(K)),
        Wm(n, std::vector<tracked>(K, running_ops::exact(M(0)))),
        Ut(n, std::vector<tracked>(V, running_ops::exact(M(0))));
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < K; ++i) X[t][i] = ops.mul(gamma[t][i], key(t, i));
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t m = 0; m <= t; ++m) {
        for (std::size_t j = 0; j < V; ++j)
          Ut[t][j] = ops.add(Ut[t][j], ops.mul(Tm[t][m], running_ops::exact(v(0, c0 + m, 0, j))));
        for (std::size_t i = 0; i < K; ++i) Wm[t][i] = ops.add(Wm[t][i], ops.mul(Tm[t][m], X[m][i]));
      }
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t j = 0; j < V; ++j) {
        tracked ws = running_ops::exact(M(0));
        for (std::size_t i = 0; i < K; ++i) ws = ops.add(ws, ops.mul(Wm[t][i], running_ops::exact(S[i * V + j])));
        Ut[t][j] = ops.sub(Ut[t][j], ws);
      }

    // M_t = Π_{s<=t} (I − κ_s k_sᵀ) diag(α*_s): the exact chunk's linear map of its start state.
    std::vector<M> map(K * K, M(0)), next_map(K * K);
    for (std::size_t i = 0; i < K; ++i) map[i * K + i] = M(1);
    for (std::size_t t = 0; t < n; ++t) {
      std::vector<M> alpha(K);
      for (std::size_t i = 0; i < K; ++i)
        alpha[i] = gates == gate_space::log ? M(exp(g(0, c0 + t, 0, i))) : g(0, c0 + t, 0, i);
      for (std::size_t a = 0; a < K; ++a)
        for (std::size_t b = 0; b < K; ++b) {
          M s = alpha[a] * map[a * K + b];  // (D M)_ab
          for (std::size_t i = 0; i < K; ++i)
            s -= gain(0, c0 + t, 0, a) * k(0, c0 + t, 0, i) * alpha[i] * map[i * K + b];
          next_map[a * K + b] = s;
        }
      map = next_map;

      // o_t = Sᵀ (Γ_t ⊙ sq_t) + Σ_{m<=t} [Σ_i (sq_ti ρ_tm,i) w_mi] Ũ_m, in the model's order.
      std::vector<tracked> o(V, running_ops::exact(M(0)));
      for (std::size_t i = 0; i < K; ++i) {
        const tracked qg = ops.mul(gamma[t][i], running_ops::exact(sq[t][i]));
        for (std::size_t j = 0; j < V; ++j) o[j] = ops.add(o[j], ops.mul(running_ops::exact(S[i * V + j]), qg));
      }
      for (std::size_t m = 0; m <= t; ++m) {
        tracked score = running_ops::exact(M(0));
        for (std::size_t i = 0; i < K; ++i)
          score = ops.add(score, ops.mul(ops.mul(running_ops::exact(sq[t][i]), ratio(t, m, i)), write(m, i)));
        for (std::size_t j = 0; j < V; ++j) o[j] = ops.add(o[j], ops.mul(score, Ut[m][j]));
      }
      // The start state's error reaches o_t through M_tᵀ sq_t.
      for (std::size_t j = 0; j < V; ++j) {
        RC_ASSERT(o[j].v == o_par(0, c0 + t, 0, j));
        M carried(0);
        for (std::size_t b = 0; b < K; ++b) {
          M row(0);
          for (std::size_t a = 0; a < K; ++a) row += sq[t][a] * map[a * K + b];
          carried += abs(row) * E_S[b * V + j];
        }
        out.o[(c0 + t) * V + j] = o[j].e + carried;
      }
    }

    // The carry S' = diag(Γ_last) S + Σ_m (ρ_last,m ⊙ w_m) Ũ_mᵀ; the start error through M_last.
    const std::size_t last = n - 1;
    std::vector<M> next(K * V), E_next(K * V);
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) {
        tracked s = ops.mul(gamma[last][i], running_ops::exact(S[i * V + j]));
        for (std::size_t m = 0; m < n; ++m) s = ops.add(s, ops.mul(ops.mul(ratio(last, m, i), write(m, i)), Ut[m][j]));
        M carried(0);
        for (std::size_t b = 0; b < K; ++b) carried += abs(map[i * K + b]) * E_S[b * V + j];
        next[i * V + j] = s.v;
        E_next[i * V + j] = s.e + carried;
      }
    S = std::move(next);
    E_S = std::move(E_next);
  }
  for (std::size_t x = 0; x < S.size(); ++x) RC_ASSERT(S[x] == final_par.data()[x]);
  return out;
}

/// Worst log2(observed / bound) and log2(bound / max |o|) of the memory checks of one test case
/// (reported, to show how tight the bound is and that it is far from vacuous).
double worst_memory_ratio = -1e9, worst_memory_relative_bound = -1e9;

/// Asserts |par − seq| <= (4a) + (4b) on every o_{t,j} and S_T entry.
void assert_memory_within_bound(const memory_bound& sequential, const memory_bound& chunked, const tensor<M>& o_par,
                                const tensor<M>& o_seq, const tensor<M>& final_par, const tensor<M>& final_seq,
                                const budget& bd) {
  M largest(0);
  for (const M& x : o_seq.data()) largest = std::max(largest, M(abs(x)));
  const auto check = [&](const M& a, const M& b, const M& bound) {
    const M difference = abs(a - b);
    RC_ASSERT(difference <= bound * bd.slack);
    if (difference > 0) worst_memory_ratio = std::max(worst_memory_ratio, to_double<M>(log2(difference / bound)));
    if (largest > 0)
      worst_memory_relative_bound = std::max(worst_memory_relative_bound, to_double<M>(log2(bound / largest)));
  };
  for (std::size_t x = 0; x < o_seq.size(); ++x)
    check(o_par.data()[x], o_seq.data()[x], sequential.o[x] + chunked.o[x]);
  for (std::size_t x = 0; x < final_seq.size(); ++x)
    check(final_par.data()[x], final_seq.data()[x], sequential.final_state[x] + chunked.final_state[x]);
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
    worst_memory_ratio = worst_memory_relative_bound = -1e9;
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
      const auto steps = replay(
          in.q, in.k, in.v, in.g, in.gates, *in.initial_state, tau,
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
      const auto predicted = [&](std::size_t t) { return cov(t - 1) + 6; };          // t >= 1
      const auto gain = [&](std::size_t t) { return predicted(t) + 2 * (Kd + 4); };  // t >= 1
      for (std::size_t t = 0; t < N; ++t) {
        for (std::size_t i = 0; i < K; ++i) {
          assert_log_close((*par.predicted_covariance)(0, t, 0, i), (*seq.predicted_covariance)(0, t, 0, i),
                           bd.of(predicted(t + 1)), bd);
          assert_log_close((*par.gain)(0, t, 0, i), (*seq.gain)(0, t, 0, i), bd.of(gain(t + 1)), bd);
        }
        assert_log_close(par.readout_variance(0, t, 0), seq.readout_variance(0, t, 0), bd.of(cov(t + 1) + 2 * Kd), bd);
      }
      for (std::size_t i = 0; i < K; ++i)
        assert_log_close(par.final_covariance(0, 0, i), seq.final_covariance(0, 0, i), bd.of(cov(N)), bd);
      const memory_bound sequential = sequential_memory_bound(
          steps, in.k, in.gates, [&](std::size_t t) { return gain(t + 1); }, bd);
      const memory_bound chunked = chunked_memory_bound(in.q, in.k, in.v, in.g, in.gates, *par.gain, *in.initial_state,
                                                        tau, scan.memory_chunk_size, par.o, par.final_state, bd);
      assert_memory_within_bound(sequential, chunked, par.o, seq.o, par.final_state, seq.final_state, bd);
    });
    MESSAGE("kdn mpfr256 memory: worst log2(observed / bound) "
            << worst_memory_ratio << ", worst log2(bound / max |o|) " << worst_memory_relative_bound);
  }

  TEST_CASE("kdn: isotropic parallel form within the derived bound of the sequential one (MPFR 256, T <= 4096)") {
    worst_memory_ratio = worst_memory_relative_bound = -1e9;
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
      const auto steps = replay(
          in.q, in.k, in.v, in.g, in.gates, *in.initial_state, tau,
          [&](std::size_t t) {
            std::vector<M> kappa(K);
            for (std::size_t i = 0; i < K; ++i) kappa[i] = (*seq.beta)(0, t, 0) * in.k(0, t, 0, i);
            return kappa;
          },
          seq.o, seq.final_state);
      // The parallel form's memory gains κ_t = fl(β_t k_t), as models/kdn_parallel.hpp forms them.
      tensor<M> par_gain("gain", {1, N, 1, K});
      for (std::size_t t = 0; t < N; ++t)
        for (std::size_t i = 0; i < K; ++i) par_gain(0, t, 0, i) = (*par.beta)(0, t, 0) * in.k(0, t, 0, i);

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
      const memory_bound sequential = sequential_memory_bound(
          steps, in.k, in.gates, [&](std::size_t t) { return beta(t + 1) + 2; }, bd);
      const memory_bound chunked = chunked_memory_bound(in.q, in.k, in.v, in.g, in.gates, par_gain, *in.initial_state,
                                                        tau, scan.memory_chunk_size, par.o, par.final_state, bd);
      assert_memory_within_bound(sequential, chunked, par.o, seq.o, par.final_state, seq.final_state, bd);
    });
    MESSAGE("kdn mpfr256 memory: worst log2(observed / bound) "
            << worst_memory_ratio << ", worst log2(bound / max |o|) " << worst_memory_relative_bound);
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
