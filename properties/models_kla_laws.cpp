// Properties of Kalman Linear Attention (docs/math.md §6, §8), law family "kla":
//
//   exact (rationals, short sequences):
//     kla_parallel_equals_sequential_exact   the scan form (every schedule, rescale mode, both
//                                            recoveries, chunk sizes 1, 3, 16, > T) == the reference
//     kla_information_form_update_exact      lambda_t == 1 / (ā² / lambda_{t-1} + p̄) + phi
//     kla_moment_form_kalman_filter_exact    eta_t / lambda_t == x̂_t and 1 / lambda_t == P_t of the
//                                            scalar Kalman filter in moment form; y, y_var from (x̂, P)
//     kla_inversion_recovers_previous_precision
//   MPFR at 256 bits (T up to 4096):
//     kla_mpfr256_within_bound               reference and scan form within the derived bound of
//                                            the exact values (certified in MPFI), see below
//     kla_threads_bit_identical              threads = 3 gives the same bits as threads = 1
#include <mpfi.h>
#include <mpfr.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/algebra/recursion_steps.hpp"
#include "kalman_oracle/models/kla.hpp"
#include "kalman_oracle/models/kla_parallel.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/tensor/broadcast_view.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "rapidcheck_doctest.hpp"

// ---- Generators of KLA problems: sizes, values, and the broadcast pattern of every parameter ----

namespace kalman_oracle::testing::kla {
namespace {  // internal linkage: the property binaries link every family together

struct kla_sizes {
  std::size_t batch, tokens, channels, state;
};

/// A tensor of `shape` filled from `gen`.
template <class T>
tensor<T> gen_tensor(const std::string& name, const shape_t& shape, const rc::Gen<T>& gen) {
  return tensor<T>(name, shape, *rc::gen::container<std::vector<T>>(element_count(shape), gen));
}

/// One of the shapes a per-token [B, T, M, S] parameter may be given in (static [M, S] as in the
/// paper, per token, per token and state only, per state, scalar).
inline shape_t gen_element_parameter_shape(const kla_sizes& n) {
  return *rc::gen::element(shape_t{n.channels, n.state}, shape_t{n.batch, n.tokens, n.channels, n.state},
                           shape_t{1, n.tokens, 1, n.state}, shape_t{n.state}, shape_t{1});
}

/// Shapes for Lambda, broadcast to [B, T, M].
inline shape_t gen_channel_parameter_shape(const kla_sizes& n) {
  return *rc::gen::element(shape_t{n.batch, n.tokens, n.channels}, shape_t{n.channels}, shape_t{1},
                           shape_t{n.batch, 1, n.channels});
}

/// Shapes for the prior, broadcast to [B, M, S]; nullopt for the default.
inline std::optional<shape_t> gen_prior_shape(const kla_sizes& n) {
  return *rc::gen::element(std::optional<shape_t>{}, std::optional<shape_t>{shape_t{n.batch, n.channels, n.state}},
                           std::optional<shape_t>{shape_t{n.state}}, std::optional<shape_t>{shape_t{1, n.channels, 1}});
}

/// Element generators for one problem.
template <class T>
struct kla_value_gens {
  rc::Gen<T> signed_value;  // q, k, v, eta_0
  rc::Gen<T> positive;      // Lambda, lambda_0
  rc::Gen<T> decay;         // ā in (0, 1]
  rc::Gen<T> nonnegative;   // p̄
};

template <class T>
kla_inputs<T> gen_kla_inputs(const kla_sizes& n, const kla_value_gens<T>& g) {
  kla_inputs<T> in{gen_tensor<T>("q", {n.batch, n.tokens, n.state}, g.signed_value),
                   gen_tensor<T>("k", {n.batch, n.tokens, n.state}, g.signed_value),
                   gen_tensor<T>("v", {n.batch, n.tokens, n.channels}, g.signed_value),
                   gen_tensor<T>("Lambda", gen_channel_parameter_shape(n), g.positive),
                   gen_tensor<T>("a_bar", gen_element_parameter_shape(n), g.decay),
                   gen_tensor<T>("p_bar", gen_element_parameter_shape(n), g.nonnegative),
                   std::nullopt,
                   std::nullopt};
  if (const auto shape = gen_prior_shape(n)) in.lambda_0 = gen_tensor<T>("lambda_0", *shape, g.positive);
  if (const auto shape = gen_prior_shape(n)) in.eta_0 = gen_tensor<T>("eta_0", *shape, g.signed_value);
  return in;
}

/// A decay in (0, 1] over rationals: exactly 1 (no decay), or x / (1 + x) for x > 0.
inline rc::Gen<rational> gen_rational_decay() {
  return rc::gen::oneOf(rc::gen::just(rational(1)),
                        rc::gen::map(gen_rational_positive(), [](const rational& x) { return x / (1 + x); }));
}

inline kla_value_gens<rational> rational_gens() {
  return {gen_rational(), gen_rational_positive(), gen_rational_decay(), gen_rational_nonneg()};
}

/// Full-shape read access to every parameter of a problem (for the independent checks).
template <class T>
struct kla_full_view {
  explicit kla_full_view(const kla_inputs<T>& in)
      : n{in.k.dim(0), in.k.dim(1), in.v.dim(2), in.k.dim(2)},
        default_lambda_0("lambda_0", {1}, T(1)),
        default_eta_0("eta_0", {1}, T(0)),
        Lambda(in.Lambda, {n.batch, n.tokens, n.channels}),
        a_bar(in.a_bar, {n.batch, n.tokens, n.channels, n.state}),
        p_bar(in.p_bar, {n.batch, n.tokens, n.channels, n.state}),
        lambda_0(in.lambda_0 ? *in.lambda_0 : default_lambda_0, {n.batch, n.channels, n.state}),
        eta_0(in.eta_0 ? *in.eta_0 : default_eta_0, {n.batch, n.channels, n.state}) {}
  kla_full_view(const kla_full_view&) = delete;
  kla_full_view& operator=(const kla_full_view&) = delete;
  kla_sizes n;
  tensor<T> default_lambda_0, default_eta_0;
  broadcast_view<T> Lambda, a_bar, p_bar, lambda_0, eta_0;
};

}  // namespace
}  // namespace kalman_oracle::testing::kla

namespace {

using namespace kalman_oracle;
using namespace kalman_oracle::testing::kla;
using kalman_oracle::testing::check_property;

constexpr std::array<rescale_mode, 4> all_rescale_modes = {rescale_mode::none, rescale_mode::trace,
                                                           rescale_mode::max_entry, rescale_mode::power_of_two};
constexpr std::array<kla_recovery, 2> all_recoveries = {kla_recovery::exclusive_scan, kla_recovery::inversion};

/// Every output equal (internals included when both have them).
template <class T>
bool same_outputs(const kla_outputs<T>& a, const kla_outputs<T>& b) {
  return a.y.data() == b.y.data() && a.y_var.data() == b.y_var.data() &&
         a.final_lambda.data() == b.final_lambda.data() && a.final_eta.data() == b.final_eta.data() &&
         a.lambda.has_value() == b.lambda.has_value() && (!a.lambda || a.lambda->data() == b.lambda->data()) &&
         a.eta.has_value() == b.eta.has_value() && (!a.eta || a.eta->data() == b.eta->data());
}

/// Short problems over rationals: exact arithmetic, so every claim is an equality.
kla_sizes gen_short_sizes() {
  return {*rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, 9),
          *rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, 4)};
}

// ---- MPFR at 256 bits: the derived bound --------------------------------------------------------
//
// Model. Inputs are doubles (m 2^e, exact at the working precision p = 257 granted for 256
// requested). Every MPFR operation is correctly rounded: fl(x op y) = (x op y)(1 + δ), |δ| <= u =
// 2^-p; no underflow or overflow (MPFR's exponent range is never left here). For a positive
// quantity x̃ computed for x, the *log error* is |log(x̃ / x)|; one rounding adds at most
// ℓ = −log(1 − u) (≈ u), a product or quotient adds the log errors of its operands, and a sum of
// non-negative terms has at most the largest log error of its terms (no cancellation), plus ℓ for
// its own rounding.
//
// Precision, sequential reference. λ ↦ λ / (ā² + p̄ λ) is increasing with
// d log(λ/den) / d log λ = ā²/den ∈ (0, 1], so an error in λ_{t-1} passes through it undamped at
// most; the computed den (ā², p̄ λ̃ and their sum: log error 2ℓ beyond that), the division (ℓ) and
// + φ̃ (φ̃ = (Λ k) k: 2ℓ; the sum: ℓ) give E_λ(t) = E_λ(t − 1) + 4ℓ, i.e.
//     E_λ(t) = 4 t ℓ.
// Precision, scan form (L = 4 roundings in a leaf entry: 1 + p̄ φ̃ and ā² φ̃ carry 4, ā² 1, p̄ 0;
// r = 2 roundings per compose with rescale none or power_of_two, r = 3 with trace or max_entry,
// see properties/scan_mpfr_within_bound.cpp): every entry of a computed prefix of t leaves is
// c Σ_monomials μ θ_μ with |log θ_μ| <= K_t ℓ, K_t = L t + r (t − 1), c > 0 common to the four
// entries. The action (a λ_0 + b) / (c λ_0 + d) adds 2 roundings to numerator and denominator and
// 1 for the division; c cancels:
//     E_λ(t) = (2 K_t + 5) ℓ = ((2L + 2r) t − 2r + 5) ℓ.
// Previous precision: exclusive scan E_prev(t) = E_λ(t − 1) (E_λ(0) = 0: the identity's action is
// exact); sequential E_prev(t) = E_λ(t − 1). Inversion, ỹ = fl(λ̃_t − φ̃), with y = λ_t − φ = λ̂_t:
//     e_y = (λ_t (e^{E_λ(t)} − 1) + φ γ_2)(1 + u) / y + u            (relative error of ỹ)
//     e_num = (1 + u)² (1 + e_y) − 1                                   (ā² ỹ)
//     e_z = p̄ y ((1 + e_y)(1 + u) − 1)(1 + u) / z + u,  z = 1 − p̄ y = ā² / den   (1 − p̄ ỹ)
//     e_x = (1 + e_num)(1 + u) / (1 − e_z) − 1,   E_prev(t) = −log(1 − e_x)
// with the exact values from the certified enclosure: this is the condition-number-aware bound
// (λ_t / y and p̄ y / z = p̄ λ_{t-1} / ā² are the two factors of κ, models/kla_parallel.hpp); it has
// no uniform form, and is finite only while e_z < 1 and e_x < 1 (asserted: the generated inputs
// keep κ below about 2^130).
// Mean decay: α̃_t = ā / (ā² + p̄ λ̃_{t-1}):  E_α(t) = E_prev(t) + 3 ℓ.
// Information mean (signed, so an absolute bound). η_t = Σ_{j=0..t} (Π_{i=j+1..t} α_i) ρ_j with
// ρ_0 = η_0. Every computed η̃_t, by the recursion or by any scan schedule (each prefix of m maps
// built by exactly m − 1 composes, scan/derive.hpp; a compose (α₂α₁, α₂ρ₁ + ρ₂) adds at most 2
// roundings to every term), is Σ_j term_j Θ_j with
//     |log Θ_j| <= F_j = Σ_{i=j+1..t} E_α(i) + (2t + 1) ℓ
// (ρ̃_j: 2 roundings; then 2(t − j) + 1 in the recursion, 2(t − 1) + 1 in the scan and its action).
// With e^F − 1 <= F e^F:
//     |η̃_t − η_t| <= B_η(t) = e^{F_max(t)} (W_t + (2t + 1) ℓ η^abs_t),   F_max(t) = Σ_{i<=t} E_α(i) + (2t + 1) ℓ,
//     η^abs_t = α_t η^abs_{t-1} + |ρ_t|,  η^abs_0 = |η_0|  (docs/math.md §10's error scale),
//     W_t = α_t (W_{t-1} + E_α(t) η^abs_{t-1}),  W_0 = 0.
// Readout (G = E_λ(t) + 2ℓ; recursive summation of S terms, γ_k = k u / (1 − k u)):
//     |log(ỹ_var / y_var)| <= E_λ(t) + (S + 1) ℓ
//     |ỹ − y| <= Σ_s |q_s|/λ_s (|η_s| (e^G − 1) + B_η,s e^G) + γ_{S−1} Σ_s |q_s|/λ_s (|η_s| + B_η,s) e^G.
// Every bound is evaluated in MPFI at p + 64 bits from a certified enclosure of the exact values
// (the recursion in interval arithmetic, with λ̂ = 1 / (ā²/λ + p̄) so that each variable occurs
// once), and a check passes only if certified: upper(|error|) <= lower(bound). Cheaper upper bounds
// are used where they cost nothing: e^F <= 1 / (1 − F) and −log(1 − e) <= e / (1 − e) (F, e <= 1/2,
// asserted).

/// Values m 2^(e − 20), m in [1, 2^20), e in [lo, hi]: exact doubles over many binades.
rc::Gen<double> gen_scaled(int lo, int hi) {
  return rc::gen::map(
      rc::gen::pair(rc::gen::inRange<long>(1, 1 << 20), rc::gen::inRange<int>(lo, hi + 1)),
      [](std::pair<long, int> me) { return std::ldexp(static_cast<double>(me.first), me.second - 20); });
}

/// Element generators for MPFR problems: zeros, small integers, many binades (2^-28 to 2^8),
/// decays near 1 (1 − 2^-k), exactly 1 and down to 2^-20.
kla_value_gens<double> double_gens() {
  const rc::Gen<double> signed_value = rc::gen::oneOf(
      rc::gen::just(0.0), rc::gen::map(rc::gen::inRange<int>(-3, 4), [](int k) { return static_cast<double>(k); }),
      rc::gen::map(rc::gen::pair(gen_scaled(-8, 8), rc::gen::arbitrary<bool>()),
                   [](std::pair<double, bool> xs) { return xs.second ? -xs.first : xs.first; }));
  const rc::Gen<double> positive = rc::gen::oneOf(rc::gen::just(1.0), gen_scaled(-8, 8));
  const rc::Gen<double> decay = rc::gen::oneOf(
      rc::gen::just(1.0), rc::gen::map(rc::gen::inRange<int>(1, 53), [](int k) { return 1.0 - std::ldexp(1.0, -k); }),
      rc::gen::map(rc::gen::inRange<long>(1, (1 << 20) + 1),
                   [](long m) { return std::ldexp(static_cast<double>(m), -20); }));
  const rc::Gen<double> nonnegative = rc::gen::oneOf(rc::gen::just(0.0), gen_scaled(-8, 8));
  return {signed_value, positive, decay, nonnegative};
}

/// Lengths up to 4096: the long ones with a single element (M = S = 1) to keep the suite fast.
kla_sizes gen_mpfr_sizes() {
  const std::size_t tokens =
      *rc::gen::oneOf(rc::gen::element<std::size_t>(1, 2, 3, 64, 1000, 4096), rc::gen::inRange<std::size_t>(1, 301));
  if (tokens > 300) return {1, tokens, 1, 1};
  return {1, tokens, *rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, 4)};
}

/// A problem drawn without shrinking: a failing MPFR case of T = 4096 would otherwise be re-run
/// many times while RapidCheck shrinks it (the meta-tests need only the "Falsifiable").
kla_inputs<double> gen_mpfr_problem(std::optional<std::size_t> batch = std::nullopt) {
  return *rc::gen::noShrink(rc::gen::exec([batch] {
    kla_sizes n = gen_mpfr_sizes();
    if (batch) n = {*batch, std::min<std::size_t>(n.tokens, 64), n.channels, n.state};
    return gen_kla_inputs(n, double_gens());
  }));
}

template <class To>
tensor<To> convert(const tensor<double>& x) {
  std::vector<To> data;
  data.reserve(x.size());
  for (double v : x.data()) data.push_back(from_double<To>(v));  // exact for MPFR and MPFI
  return tensor<To>(x.name(), x.shape(), std::move(data));
}

template <class To>
kla_inputs<To> convert_inputs(const kla_inputs<double>& in) {
  kla_inputs<To> out{convert<To>(in.q),     convert<To>(in.k),     convert<To>(in.v), convert<To>(in.Lambda),
                     convert<To>(in.a_bar), convert<To>(in.p_bar), std::nullopt,      std::nullopt};
  if (in.lambda_0) out.lambda_0 = convert<To>(*in.lambda_0);
  if (in.eta_0) out.eta_0 = convert<To>(*in.eta_0);
  return out;
}

kla_sizes sizes_of(const kla_inputs<double>& in) { return {in.k.dim(0), in.k.dim(1), in.v.dim(2), in.k.dim(2)}; }

/// The exact value of x as a point interval (the caller's precision is >= x's).
mpfi_interval exactly(const mpfr_real& x) {
  mpfi_interval r;
  mpfi_set_fr(r.backend().data(), x.backend().data());
  return r;
}

/// x <= y for every point of both enclosures.
bool certainly_le(const mpfi_interval& x, const mpfi_interval& y) { return upper(x) <= lower(y); }

struct bound_constants {
  mpfi_interval u;    // 2^-p
  mpfi_interval ell;  // ℓ = −log(1 − u)
};

bound_constants constants_for(unsigned p) {
  const mpfi_interval one(1);
  const mpfi_interval u = scalar_traits<mpfi_interval>::ldexp(one, -static_cast<long>(p));
  return {u, -log(one - u)};
}

mpfi_interval gamma_k(const bound_constants& c, std::size_t k) {
  const mpfi_interval ku = mpfi_interval(static_cast<unsigned long>(k)) * c.u;
  return ku / (mpfi_interval(1) - ku);
}

/// Which computation produced the outputs.
struct algorithm {
  bool scan;              // false: the sequential reference
  unsigned r;             // roundings per Möbius compose (scan only)
  kla_recovery recovery;  // scan only
};

/// E_λ(t) for t >= 0 tokens (the derivation above).
mpfi_interval precision_log_error(const algorithm& alg, std::size_t t, const bound_constants& c) {
  if (t == 0) return mpfi_interval(0);
  const unsigned long tt = t;
  if (!alg.scan) return mpfi_interval(4 * tt) * c.ell;
  const unsigned long k = 4 * tt + alg.r * (tt - 1);  // K_t = L t + r (t - 1)
  return mpfi_interval(2 * k + 5) * c.ell;
}

/// What the bounds need per token count t = 0..T, computed once per check.
struct precision_table {
  std::vector<mpfi_interval> error;     // E_λ(t)
  std::vector<mpfi_interval> up, down;  // e^{E_λ(t)}, e^{-E_λ(t)}
};

precision_table precision_table_for(const algorithm& alg, std::size_t tokens, const bound_constants& c) {
  precision_table table;
  for (std::size_t t = 0; t <= tokens; ++t) {
    table.error.push_back(precision_log_error(alg, t, c));
    table.up.push_back(exp(table.error.back()));
    table.down.push_back(exp(-table.error.back()));
  }
  return table;
}

/// |log(computed / exact)| <= E, certified, for positive exact values: exact e^-E <= computed <= exact e^E.
bool within_log_error(const mpfr_real& computed, const mpfi_interval& exact, const mpfi_interval& up,
                      const mpfi_interval& down) {
  const mpfi_interval x = exactly(computed);
  return certainly_le(x, exact * up) && certainly_le(exact * down, x);
}

/// E_prev(t) of the inversion route, from the exact values (the derivation above), evaluated with
/// −log(1 − e) <= e / (1 − e); RC_ASSERTs that the bound is finite.
mpfi_interval inversion_log_error(const mpfi_interval& lambda, const mpfi_interval& phi, const mpfi_interval& predicted,
                                  const mpfi_interval& process_noise, const mpfi_interval& z,
                                  const mpfi_interval& precision_growth, const bound_constants& c) {
  const mpfi_interval one(1);
  const mpfi_interval& u = c.u;
  const mpfi_interval e_lambda = precision_growth - one;  // e^{E_λ(t)} − 1
  const mpfi_interval e_y = (lambda * e_lambda + phi * gamma_k(c, 2)) * (one + u) / predicted + u;
  const mpfi_interval e_num = (one + u) * (one + u) * (one + e_y) - one;
  const mpfi_interval e_z = process_noise * predicted * ((one + e_y) * (one + u) - one) * (one + u) / z + u;
  RC_ASSERT(certainly_le(e_z, mpfi_interval(0.5)));
  const mpfi_interval e_x = (one + e_num) * (one + u) / (one - e_z) - one;
  RC_ASSERT(certainly_le(e_x, mpfi_interval(0.5)));
  return e_x / (one - e_x);
}

/// Checks every output of `out` (computed in MPFR from `in`) against the certified exact values,
/// within the bounds derived above. `in` holds the same inputs as point intervals.
void check_within_bound(const kla_inputs<mpfi_interval>& in, const kla_outputs<mpfr_real>& out, const algorithm& alg,
                        const bound_constants& c) {
  const kla_full_view<mpfi_interval> x(in);
  const kla_sizes n = x.n;
  const mpfi_interval one(1);
  const mpfi_interval& ell = c.ell;
  const mpfi_interval three_ell = mpfi_interval(3) * ell;
  const precision_table table = precision_table_for(alg, n.tokens, c);
  for (std::size_t b = 0; b < n.batch; ++b) {
    // Exact lambda_t, eta_t and the bound B_η of every (t, m, s), for the readout.
    const std::size_t count = n.tokens * n.channels * n.state;
    std::vector<mpfi_interval> lambda(count), eta(count), eta_bound(count);
    for (std::size_t m = 0; m < n.channels; ++m) {
      for (std::size_t s = 0; s < n.state; ++s) {
        mpfi_interval lambda_prev = x.lambda_0(b, m, s), eta_prev = x.eta_0(b, m, s);
        mpfi_interval eta_abs = abs(eta_prev), w(0), sum_alpha_error(0);
        for (std::size_t t = 0; t < n.tokens; ++t) {
          const mpfi_interval& a = x.a_bar(b, t, m, s);
          const mpfi_interval& noise = x.p_bar(b, t, m, s);
          const mpfi_interval& value_precision = x.Lambda(b, t, m);
          const mpfi_interval& key = in.k(b, t, s);
          const mpfi_interval phi = value_precision * key * key;
          const mpfi_interval rho = in.v(b, t, m) * value_precision * key;
          const mpfi_interval a2 = a * a;
          const mpfi_interval den = a2 + noise * lambda_prev;
          const mpfi_interval predicted = one / (a2 / lambda_prev + noise);  // λ̂_t = λ_{t-1} / den_t
          const mpfi_interval lambda_t = predicted + phi;
          const mpfi_interval alpha = a / den;
          const mpfi_interval eta_t = alpha * eta_prev + rho;

          // E_prev(t) (token t + 1 in the derivation's 1-based count), then E_α and B_η.
          const mpfi_interval previous_error =
              alg.scan && alg.recovery == kla_recovery::inversion
                  ? inversion_log_error(lambda_t, phi, predicted, noise, a2 / den, table.up[t + 1], c)
                  : table.error[t];
          const mpfi_interval alpha_error = previous_error + three_ell;  // E_α
          w = alpha * (w + alpha_error * eta_abs);
          eta_abs = alpha * eta_abs + abs(rho);
          sum_alpha_error += alpha_error;
          const mpfi_interval roundings = mpfi_interval(static_cast<unsigned long>(2 * (t + 1) + 1)) * ell;
          const mpfi_interval f_max = sum_alpha_error + roundings;
          RC_ASSERT(certainly_le(f_max, mpfi_interval(0.5)));
          const mpfi_interval bound = (w + roundings * eta_abs) / (one - f_max);  // e^F <= 1 / (1 − F)

          RC_ASSERT(within_log_error((*out.lambda)(b, t, m, s), lambda_t, table.up[t + 1], table.down[t + 1]));
          RC_ASSERT(certainly_le(abs(exactly((*out.eta)(b, t, m, s)) - eta_t), bound));
          const std::size_t i = (t * n.channels + m) * n.state + s;
          lambda[i] = lambda_t;
          eta[i] = eta_t;
          eta_bound[i] = bound;
          lambda_prev = lambda_t;
          eta_prev = eta_t;
        }
        RC_ASSERT(out.final_lambda(b, m, s) == (*out.lambda)(b, n.tokens - 1, m, s));
        RC_ASSERT(out.final_eta(b, m, s) == (*out.eta)(b, n.tokens - 1, m, s));
      }
    }
    // Readout.
    const mpfi_interval two_ell = mpfi_interval(2) * ell;
    const mpfi_interval var_roundings = mpfi_interval(static_cast<unsigned long>(n.state + 1)) * ell;
    const mpfi_interval var_up = exp(var_roundings), var_down = exp(-var_roundings);
    const mpfi_interval growth_roundings = exp(two_ell);
    for (std::size_t t = 0; t < n.tokens; ++t) {
      const mpfi_interval growth = table.up[t + 1] * growth_roundings;  // e^G, G = E_λ(t) + 2ℓ
      for (std::size_t m = 0; m < n.channels; ++m) {
        mpfi_interval y(0), y_var(0), y_bound(0), y_scale(0);
        bool any_query = false;
        for (std::size_t s = 0; s < n.state; ++s) {
          const std::size_t i = (t * n.channels + m) * n.state + s;
          const mpfi_interval& q = in.q(b, t, s);
          any_query = any_query || q != 0;
          y += q * eta[i] / lambda[i];
          y_var += q * q / lambda[i];
          const mpfi_interval weight = abs(q) / lambda[i];
          y_bound += weight * (abs(eta[i]) * (growth - one) + eta_bound[i] * growth);
          y_scale += weight * (abs(eta[i]) + eta_bound[i]) * growth;
        }
        y_bound += gamma_k(c, n.state - 1) * y_scale;
        RC_ASSERT(certainly_le(abs(exactly(out.y(b, t, m)) - y), y_bound));
        if (any_query)  // |log(ỹ_var / y_var)| <= E_λ(t) + (S + 1) ℓ
          RC_ASSERT(
              within_log_error(out.y_var(b, t, m), y_var, table.up[t + 1] * var_up, table.down[t + 1] * var_down));
        else
          RC_ASSERT(out.y_var(b, t, m) == 0);
      }
    }
  }
}

/// Every element at precision p.
bool at_precision(const tensor<mpfr_real>& x, unsigned p) {
  for (const mpfr_real& v : x.data())
    if (mpfr_get_prec(v.backend().data()) != static_cast<mpfr_prec_t>(p)) return false;
  return true;
}

/// Same precision, same value, same sign of zero (NaN matches NaN): the same bits.
bool identical(const mpfr_real& a, const mpfr_real& b) {
  const mpfr_srcptr x = a.backend().data(), y = b.backend().data();
  if (mpfr_get_prec(x) != mpfr_get_prec(y)) return false;
  if (mpfr_nan_p(x) || mpfr_nan_p(y)) return mpfr_nan_p(x) && mpfr_nan_p(y);
  return mpfr_equal_p(x, y) && (mpfr_signbit(x) != 0) == (mpfr_signbit(y) != 0);
}

bool identical(const tensor<mpfr_real>& a, const tensor<mpfr_real>& b) {
  if (a.shape() != b.shape()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!identical(a.data()[i], b.data()[i])) return false;
  return true;
}

bool identical_outputs(const kla_outputs<mpfr_real>& a, const kla_outputs<mpfr_real>& b) {
  return identical(a.y, b.y) && identical(a.y_var, b.y_var) && identical(a.final_lambda, b.final_lambda) &&
         identical(a.final_eta, b.final_eta) && identical(*a.lambda, *b.lambda) && identical(*a.eta, *b.eta);
}

}  // namespace

TEST_SUITE("kla") {
  TEST_CASE("kla: the scan form equals the sequential reference exactly (rationals)") {
    // docs/math.md §8 facts 2, 3, 5: any schedule, any rescaling, either recovery of lambda_{t-1}.
    check_property("kla_parallel_equals_sequential_exact", [] {
      const kla_sizes n = gen_short_sizes();
      const kla_inputs<rational> in = gen_kla_inputs(n, rational_gens());
      // Chunk sizes 1, 3, 16 and one larger than T (T <= 8 here, so 16 is > T as well).
      const std::size_t chunk =
          *rc::gen::element<std::size_t>(1, 3, 16, n.tokens + *rc::gen::inRange<std::size_t>(1, 5));
      const run_options options{.threads = 1, .internals = true};
      const kla_outputs<rational> reference = kla_forward(in, options);
      for (scan_schedule schedule : all_scan_schedules)
        for (rescale_mode mode : all_rescale_modes)
          for (kla_recovery recovery : all_recoveries) {
            const kla_outputs<rational> scan =
                kla_parallel_forward(in, {schedule, mode, chunk, recovery}, {.threads = 2, .internals = true});
            RC_ASSERT(same_outputs(scan, reference));
          }
    });
  }

  TEST_CASE("kla: lambda_t is the information-filter update of the scalar model (rationals)") {
    // Predict in covariance form, P̂ = ā² / lambda_{t-1} + p̄, then add the information of the
    // observation: lambda_t = 1 / P̂ + Lambda k². docs/math.md's lambda_{t-1} / (ā² + p̄ lambda_{t-1})
    // is the same number written without the intermediate covariance.
    check_property("kla_information_form_update_exact", [] {
      const kla_sizes n = gen_short_sizes();
      const kla_inputs<rational> in = gen_kla_inputs(n, rational_gens());
      const kla_outputs<rational> out = kla_forward(in, {.threads = 1, .internals = true});
      const kla_full_view<rational> x(in);
      for (std::size_t b = 0; b < n.batch; ++b)
        for (std::size_t m = 0; m < n.channels; ++m)
          for (std::size_t s = 0; s < n.state; ++s) {
            rational previous = x.lambda_0(b, m, s);
            for (std::size_t t = 0; t < n.tokens; ++t) {
              const rational& a = x.a_bar(b, t, m, s);
              const rational predicted_precision = 1 / (a * a / previous + x.p_bar(b, t, m, s));
              const rational information = x.Lambda(b, t, m) * in.k(b, t, s) * in.k(b, t, s);
              RC_ASSERT((*out.lambda)(b, t, m, s) == predicted_precision + information);
              previous = (*out.lambda)(b, t, m, s);
            }
            RC_ASSERT(out.final_lambda(b, m, s) == previous);
          }
    });
  }

  TEST_CASE("kla: eta_t / lambda_t and 1 / lambda_t are the moment-form Kalman filter (rationals)") {
    // An independent check of the whole recursion: the scalar model
    //   x_t = ā x_{t-1} + noise(p̄),  v_t = k x_t + noise(1 / Lambda),  x_0 ~ N(eta_0 / lambda_0, 1 / lambda_0)
    // filtered in moment form (x̂, P): predict x̂⁻ = ā x̂, P⁻ = ā² P + p̄; gain
    // K = P⁻ k / (k² P⁻ + 1 / Lambda); update x̂ = x̂⁻ + K (v − k x̂⁻), P = (1 − K k) P⁻.
    // KLA's information form must give x̂_t = eta_t / lambda_t and P_t = 1 / lambda_t, and the
    // readout y = Σ_s q x̂_t, y_var = Σ_s q² P_t.
    check_property("kla_moment_form_kalman_filter_exact", [] {
      const kla_sizes n = gen_short_sizes();
      const kla_inputs<rational> in = gen_kla_inputs(n, rational_gens());
      const kla_outputs<rational> out = kla_forward(in, {.threads = 1, .internals = true});
      const kla_full_view<rational> x(in);
      for (std::size_t b = 0; b < n.batch; ++b)
        for (std::size_t m = 0; m < n.channels; ++m) {
          std::vector<rational> mean(n.state), variance(n.state);
          for (std::size_t s = 0; s < n.state; ++s) {
            variance[s] = 1 / x.lambda_0(b, m, s);
            mean[s] = x.eta_0(b, m, s) * variance[s];
          }
          for (std::size_t t = 0; t < n.tokens; ++t) {
            rational y(0), y_var(0);
            for (std::size_t s = 0; s < n.state; ++s) {
              const rational& a = x.a_bar(b, t, m, s);
              const rational& k = in.k(b, t, s);
              const rational predicted_mean = a * mean[s];
              const rational predicted_variance = a * a * variance[s] + x.p_bar(b, t, m, s);
              const rational gain = predicted_variance * k / (k * k * predicted_variance + 1 / x.Lambda(b, t, m));
              mean[s] = predicted_mean + gain * (in.v(b, t, m) - k * predicted_mean);
              variance[s] = (1 - gain * k) * predicted_variance;
              RC_ASSERT(1 / (*out.lambda)(b, t, m, s) == variance[s]);
              RC_ASSERT((*out.eta)(b, t, m, s) / (*out.lambda)(b, t, m, s) == mean[s]);
              y += in.q(b, t, s) * mean[s];
              y_var += in.q(b, t, s) * in.q(b, t, s) * variance[s];
            }
            RC_ASSERT(out.y(b, t, m) == y);
            RC_ASSERT(out.y_var(b, t, m) == y_var);
          }
          for (std::size_t s = 0; s < n.state; ++s) {
            RC_ASSERT(1 / out.final_lambda(b, m, s) == variance[s]);
            RC_ASSERT(out.final_eta(b, m, s) / out.final_lambda(b, m, s) == mean[s]);
          }
        }
    });
  }

  TEST_CASE("kla: inverting the precision leaf recovers lambda_{t-1} (rationals)") {
    // lambda_{t-1} = ā² (lambda_t − phi) / (1 − p̄ (lambda_t − phi)), models/kla_parallel.hpp.
    check_property("kla_inversion_recovers_previous_precision", [] {
      const rational decay = *gen_rational_decay();
      const rational process_noise = *kalman_oracle::testing::gen_rational_nonneg();
      const rational phi = *kalman_oracle::testing::gen_rational_nonneg();
      const rational previous = *kalman_oracle::testing::gen_rational_positive();
      const rational precision = kla_precision_step(previous, decay, process_noise, phi);
      RC_ASSERT(kla_invert_precision_leaf(decay, process_noise, phi, precision) == previous);
      // The same map as the adjugate of the leaf [[1 + p̄ phi, ā² phi], [p̄, ā²]].
      const rational a2 = decay * decay;
      const mobius<rational> inverse{a2, -a2 * phi, -process_noise, 1 + process_noise * phi};
      RC_ASSERT(mobius_apply(inverse, precision) == previous);
    });
  }

  TEST_CASE("kla: reference and scan form within the derived bound in MPFR-256 (T up to 4096)") {
    check_property("kla_mpfr256_within_bound", [] {
      const kla_inputs<double> raw = gen_mpfr_problem();
      const kla_sizes n = sizes_of(raw);
      const auto schedule = *rc::gen::elementOf(all_scan_schedules);
      const auto mode = *rc::gen::elementOf(all_rescale_modes);
      const auto recovery = *rc::gen::elementOf(all_recoveries);
      const std::size_t chunk = *rc::gen::element<std::size_t>(1, 3, 16, 64, n.tokens + 1);

      const precision_scope scope(256);
      const unsigned p = scalar_traits<mpfr_real>::precision_bits();  // granted (257), not requested
      const kla_inputs<mpfr_real> in = convert_inputs<mpfr_real>(raw);
      const run_options options{.threads = 1, .internals = true};
      const kla_outputs<mpfr_real> reference = kla_forward(in, options);
      const kla_outputs<mpfr_real> scan = kla_parallel_forward(in, {schedule, mode, chunk, recovery}, options);
      for (const kla_outputs<mpfr_real>* out : {&reference, &scan})
        for (const tensor<mpfr_real>* x : {&out->y, &out->y_var, &*out->lambda, &*out->eta})
          RC_ASSERT(at_precision(*x, p));

      const precision_scope check_scope(p + 64);  // enclosures: their widths stay far below the bounds
      const kla_inputs<mpfi_interval> exact_inputs = convert_inputs<mpfi_interval>(raw);  // doubles: exact
      const bound_constants c = constants_for(p);
      check_within_bound(exact_inputs, reference, {false, 0, kla_recovery::exclusive_scan}, c);
      const unsigned r = mode == rescale_mode::trace || mode == rescale_mode::max_entry ? 3 : 2;
      check_within_bound(exact_inputs, scan, {true, r, recovery}, c);
    });
  }

  TEST_CASE("kla: threads = 3 gives the same bits as threads = 1 (MPFR-256)") {
    check_property("kla_threads_bit_identical", [] {
      const kla_inputs<double> raw = gen_mpfr_problem(*rc::gen::inRange<std::size_t>(3, 7));  // B = 3..6, T <= 64
      const kla_scan_options scan{*rc::gen::elementOf(all_scan_schedules), *rc::gen::elementOf(all_rescale_modes),
                                  *rc::gen::element<std::size_t>(1, 3, 16), *rc::gen::elementOf(all_recoveries)};
      const precision_scope scope(256);  // before any worker starts (precision_scope.hpp)
      const kla_inputs<mpfr_real> in = convert_inputs<mpfr_real>(raw);
      RC_ASSERT(identical_outputs(kla_forward(in, {.threads = 3, .internals = true}),
                                  kla_forward(in, {.threads = 1, .internals = true})));
      RC_ASSERT(identical_outputs(kla_parallel_forward(in, scan, {.threads = 3, .internals = true}),
                                  kla_parallel_forward(in, scan, {.threads = 1, .internals = true})));
    });
  }
}
