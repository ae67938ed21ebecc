// The fixed-gain family (docs/math.md §7) in MPFR:
//   * the sequential and the chunked WY forms at 256 bits (granted: 257) stay within a derived
//     bound of the exact result, for T up to 4096, log gates, every rule; the exact result is
//     stood in for by the sequential form at 2p + 64 bits (its own error is below the bound by a
//     factor 2^-(p+64));
//   * with log gates, GDN is KDA with equal gates and DeltaNet is KDA with g = 0, bit for bit;
//   * threads = 3 gives bit-identical outputs to threads = 1.
//
// THE BOUND (docs/math.md, "Fixed-gain family: rounding").
// Hypotheses H: ‖k_t‖₂ ≤ 1, β_t ∈ [0, 2], decays α = e^g with g ∈ [−g_max, 0] (so α ∈ (0, 1]);
// no given gain. Inputs are exact (doubles); every MPFR operation, exp included, is correctly
// rounded with unit roundoff u = 2^-p, p the granted precision; first order in u (the factor 2
// below covers the O(u²) terms, which are < 2^-200 relative here).
// Stability. Each exact step S ↦ (I − β k kᵀ) D S (GLA: S ↦ D S) is non-expansive in the
// Frobenius norm: I − β k kᵀ is symmetric with eigenvalues 1 and 1 − β‖k‖² ∈ [−1, 1] and ‖D‖₂ ≤ 1.
// So an error E_s made at step s (or in chunk s) reaches the end with norm ≤ ‖E_s‖: errors add,
// they are never amplified, and ‖Ŝ_t − S_t‖_F ≤ Σ_{s≤t} ‖E_s‖_F.
// Let M = max_t ‖S_t‖_F + max_t ‖v_t‖₂ over the (exact) trajectory, S_0 included.
// Sequential (decay; p = Sᵀk; r = v − p; S += (βk) rᵀ; read): the local error of one step is
//     ‖E_t‖_F ≤ u [(2K + 16)‖S_{t−1}‖_F + 8‖v_t‖₂]    (decay 2u incl. exp; dot product Ku; residual
//     u; gain u; write 2u; each multiplied by ‖βk‖ ≤ 2 where it passes through the correction)
// so  ‖Ŝ_t − S_t‖_F ≤ E_seq := 2 (2K + 16) T u M.
// The read ô = Ŝᵀ(τ̂ q) adds (K + 2) u τ‖q‖ ‖S_t‖ (τ̂ rounded, one product, K-term sum):
//     ‖ô_t − o_t‖₂ ≤ τ‖q_t‖₂ (E + (K + 2) u M).
// Chunked (chunk length n ≤ C, N_c chunks): exact facts first. |A_tj| ≤ 2; the triangular inverse
// 𝒯 = (I + A)⁻¹ has |𝒯_tj| ≤ |β_t| ≤ 2 below the diagonal (column j of 𝒯 is the response of the
// non-expansive recursion to a unit impulse at token j: |x_t| = |β_t k_tᵀ D_t Z_{t−1}| ≤ 2‖Z‖ ≤ 2),
// so ‖𝒯‖_F ≤ 2n; ‖Y − X S‖_F ≤ 2√n M; ‖Ũ‖_F ≤ 4 n^{3/2} M.
// Rounding: the decay ratios ρ = Γ_t · Γ_j⁻¹ (Γ = e^{cumsum g}) carry a relative error
//     δ_ρ = (2n + 2)(1 + n g_max) u     (cumsum: n² g_max u absolute in G, hence relative in e^G)
// and so do the ratios of a strongly decaying chunk, e^{Ĝ_t − Ĝ_j} (models/fixed_gain_chunked.hpp:
// the two sums' errors, 2n² g_max u, the difference's rounding, n g_max u, and exp's, u); g_max = 8
// (drawn beside 1) puts chunks of 16 near the floor of −64 and chunks of 64 well past it.
// and every entry of A, X, the carry and the scores is a sum of ≤ n + K products of such terms:
//     ε = δ_ρ + (K + V + n + 4) u.
// ‖ΔA‖_F ≤ 2nε. Forward substitution is backward stable: column j of 𝒯̂ solves (I + Â + F) x̂ = e_j
// with |F| ≤ nu|Â|, so ‖x̂ − x‖₂ ≤ ‖𝒯‖₂ ‖ΔA + F‖_F ‖x̂‖₂ ≤ 2n · 2nε · 2√n and ‖𝒯̂ − 𝒯‖_F ≤ 8 n³ ε.
// Then Ũ = 𝒯Y − (𝒯X)S gets ‖𝒯̂ − 𝒯‖_F ‖Y − XS‖_F ≤ 16 n^{7/2} ε M from 𝒯̂, and less than as much
// again from the products W = 𝒯X, U = 𝒯Y, WS, U − WS and the rounded X, Y (each ≤ 4 n^{5/2} ε M):
// ‖ΔŨ‖_F ≤ 32 n^{7/2} ε M. The carry adds ε(‖S‖ + √n ‖Ũ‖_F) + √n ‖ΔŨ‖_F (‖w_j‖ ≤ 1), so one chunk's
// local error is ≤ (1 + 4n² + 32n⁴) ε M ≤ 64 n⁴ ε M; the outputs in a chunk see the carried error
// plus at most the same amount (|score_tj| ≤ τ‖q_t‖):
//     ‖Ŝ_T − S_T‖_F ≤ E_chunk := 2 (N_c + 1) 64 n⁴ ε M,   ‖ô_t − o_t‖₂ ≤ τ‖q_t‖₂ (E_chunk + (K + 2) u M).
// These are deliberately crude (the n⁴ comes from norm inequalities, not from observed growth);
// the property reports the worst log2(observed / bound): at 257 bits about −6 for the sequential
// form and −11 for the chunked form (both reached at short sequences, where the bounds are
// tightest). They prove that nothing is amplified; the exactness of the chunked algorithm itself
// is tested over rationals in models_fixed_gain_exact.cpp. The given-gain form is not covered here:
// I − κ kᵀ is not non-expansive in general.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;

namespace {

/// Inputs as doubles satisfying H, drawn from a seed (cheap to generate and to shrink).
struct problem_doubles {
  fixed_gain_rule rule;
  std::size_t B, T, H, K, V;
  std::vector<double> q, k, v, g, beta, s0;  // g: [B, T, H, K] (GDN: [B, T, H]); s0 empty = none
};

/// Uniform in [lo, hi] from 53 random bits (the same on every standard library).
double uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * std::ldexp(static_cast<double>(rng() >> 11), -53);
}

problem_doubles make_problem(fixed_gain_rule rule, std::size_t B, std::size_t T, std::size_t H, std::size_t K,
                             std::size_t V, bool with_state, std::uint64_t seed, double g_max = 1) {
  std::mt19937_64 rng(seed);
  problem_doubles p{rule, B, T, H, K, V, {}, {}, {}, {}, {}, {}};
  const std::size_t tokens = B * T * H;
  for (std::size_t n = 0; n < tokens * K; ++n) p.q.push_back(uniform(rng, -1, 1));
  for (std::size_t n = 0; n < tokens; ++n) {
    // k normalised in binary64, then shrunk by 1 − 2^-30 so that ‖k‖₂ ≤ 1 holds exactly.
    std::vector<double> key(K);
    double norm2 = 0;
    for (auto& x : key) {
      x = uniform(rng, -1, 1);
      norm2 += x * x;
    }
    const double scale = (1 - std::ldexp(1.0, -30)) / std::sqrt(std::max(norm2, 1e-300));
    for (auto x : key) p.k.push_back(norm2 > 0 ? x * scale : 0.0);
  }
  for (std::size_t n = 0; n < tokens * V; ++n) p.v.push_back(uniform(rng, -1, 1));
  const std::size_t gates = rule == fixed_gain_rule::gated_delta_net ? tokens : tokens * K;
  if (rule != fixed_gain_rule::delta_net)
    for (std::size_t n = 0; n < gates; ++n) p.g.push_back(uniform(rng, -g_max, 0));
  if (rule != fixed_gain_rule::gla)
    for (std::size_t n = 0; n < tokens; ++n) p.beta.push_back(uniform(rng, 0, 2));
  if (with_state)
    for (std::size_t n = 0; n < B * H * K * V; ++n) p.s0.push_back(uniform(rng, -1, 1));
  return p;
}

/// The inputs at the current MPFR precision (exact: every double is representable).
fixed_gain_inputs<mpfr_real> to_inputs(const problem_doubles& p) {
  const auto conv = [](const std::vector<double>& xs) {
    std::vector<mpfr_real> out;
    out.reserve(xs.size());
    for (double x : xs) out.push_back(from_double<mpfr_real>(x));
    return out;
  };
  fixed_gain_inputs<mpfr_real> in;
  in.rule = p.rule;
  in.gates = gate_space::log;
  in.q = tensor<mpfr_real>("q", {p.B, p.T, p.H, p.K}, conv(p.q));
  in.k = tensor<mpfr_real>("k", {p.B, p.T, p.H, p.K}, conv(p.k));
  in.v = tensor<mpfr_real>("v", {p.B, p.T, p.H, p.V}, conv(p.v));
  if (!p.g.empty())
    in.g = tensor<mpfr_real>(
        "g", p.rule == fixed_gain_rule::gated_delta_net ? shape_t{p.B, p.T, p.H} : shape_t{p.B, p.T, p.H, p.K},
        conv(p.g));
  if (!p.beta.empty()) in.beta = tensor<mpfr_real>("beta", {p.B, p.T, p.H}, conv(p.beta));
  if (!p.s0.empty()) in.initial_state = tensor<mpfr_real>("initial_state", {p.B, p.H, p.K, p.V}, conv(p.s0));
  return in;
}

rc::Gen<fixed_gain_rule> gen_rule() {
  return rc::gen::element(fixed_gain_rule::gla, fixed_gain_rule::delta_net, fixed_gain_rule::gated_delta_net,
                          fixed_gain_rule::kda);
}

/// Differences as doubles (they are far inside the binary64 range here).
double diff(const mpfr_real& a, const mpfr_real& b) { return std::fabs(to_double<mpfr_real>(a - b)); }

/// Largest observed / bound ratio over all properties (reported, to show how crude the bound is).
double worst_ratio_seq = 0, worst_ratio_chunk = 0;
std::size_t strongly_decaying_chunks = 0;  // chunks that took e^{G_t − G_j} (g_max = 8): the path is exercised

/// Checks `got` against the reference: final state within E, each o_t within τ‖q_t‖ (E + (K+2)uM).
/// Returns observed / bound (max over the checks).
double check_within(const fixed_gain_outputs<mpfr_real>& got, const fixed_gain_outputs<mpfr_real>& ref,
                    const problem_doubles& p, double scale, double E, double read_term) {
  double worst = 0;
  for (std::size_t b = 0; b < p.B; ++b)
    for (std::size_t h = 0; h < p.H; ++h) {
      double err2 = 0;
      for (std::size_t i = 0; i < p.K; ++i)
        for (std::size_t j = 0; j < p.V; ++j) {
          const double d = diff(got.final_state(b, h, i, j), ref.final_state(b, h, i, j));
          err2 += d * d;
        }
      RC_ASSERT(std::sqrt(err2) <= E);
      worst = std::max(worst, std::sqrt(err2) / E);
      for (std::size_t t = 0; t < p.T; ++t) {
        double q2 = 0, e2 = 0;
        for (std::size_t i = 0; i < p.K; ++i)
          q2 += p.q[((b * p.T + t) * p.H + h) * p.K + i] * p.q[((b * p.T + t) * p.H + h) * p.K + i];
        for (std::size_t j = 0; j < p.V; ++j) {
          const double d = diff(got.o(b, t, h, j), ref.o(b, t, h, j));
          e2 += d * d;
        }
        const double bound = scale * std::sqrt(q2) * (E + read_term) * (1 + 1e-9) + 1e-300;
        RC_ASSERT(std::sqrt(e2) <= bound);
        worst = std::max(worst, std::sqrt(e2) / bound);
      }
    }
  return worst;
}

/// An upper bound of M = max_t ‖S_t‖_F + max_t ‖v_t‖₂ (per (b, h), then the max): under H every
/// step is non-expansive, so ‖S_t‖_F ≤ ‖S_0‖_F + Σ_{s≤t} |β_s| ‖k_s‖₂ ‖v_s‖₂ (GLA: β = 1), with
/// ‖k‖ ≤ 1. Computed in binary64 with a 1% margin for its own rounding.
double trajectory_scale(const problem_doubles& p) {
  double worst = 0;
  for (std::size_t b = 0; b < p.B; ++b)
    for (std::size_t h = 0; h < p.H; ++h) {
      double s = 0, vmax = 0;
      for (std::size_t i = 0; i < p.K * p.V; ++i)
        if (!p.s0.empty()) s += p.s0[(b * p.H + h) * p.K * p.V + i] * p.s0[(b * p.H + h) * p.K * p.V + i];
      s = std::sqrt(s);
      for (std::size_t t = 0; t < p.T; ++t) {
        const std::size_t tok = (b * p.T + t) * p.H + h;
        double v2 = 0;
        for (std::size_t j = 0; j < p.V; ++j) v2 += p.v[tok * p.V + j] * p.v[tok * p.V + j];
        const double beta = p.beta.empty() ? 1.0 : std::fabs(p.beta[tok]);
        s += beta * std::sqrt(v2);  // ‖k‖ ≤ 1
        vmax = std::max(vmax, std::sqrt(v2));
      }
      worst = std::max(worst, s + vmax);
    }
  return 1.01 * worst;
}

}  // namespace

TEST_SUITE("fixed_gain") {
  TEST_CASE("fixed_gain: sequential and chunked forms within the derived bound at 256 bits, T <= 4096") {
    check_property("fixed_gain_mpfr256_within_bound", [] {
      const auto rule = *gen_rule();
      const std::size_t T =
          *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 65), rc::gen::inRange<std::size_t>(65, 513),
                          rc::gen::element<std::size_t>(1000, 4096));
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 5);
      std::size_t V = *rc::gen::inRange<std::size_t>(1, 5);
      if (V == K) V = K + 1;
      // chunks 1, 2, 3, 16, 64, or one chunk longer than T (T <= 64 only: the n³ inverse)
      const std::size_t chunk = T <= 64 ? *rc::gen::oneOf(rc::gen::element<std::size_t>(1, 2, 3, 16, 64),
                                                          rc::gen::inRange<std::size_t>(T + 1, T + 8))
                                        : *rc::gen::element<std::size_t>(1, 2, 3, 16, 64);
      const double g_max = *rc::gen::element(1.0, 8.0);  // 8: strongly decaying chunks (see the top)
      const auto p =
          make_problem(rule, 1, T, 1, K, V, *rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<std::uint64_t>(), g_max);
      RC_TAG(chunk);

      std::optional<fixed_gain_outputs<mpfr_real>> reference, sequential, chunked;
      unsigned p_bits = 0, ref_bits = 0;
      {
        const precision_scope scope(256);
        p_bits = scalar_traits<mpfr_real>::precision_bits();
        const auto in = to_inputs(p);
        sequential = fixed_gain_forward(in);
        chunked = fixed_gain_chunked_forward(in, chunk);
        const detail::fixed_gain::problem<mpfr_real> problem(in);
        for (std::size_t c0 = 0; c0 < T; c0 += chunk)
          if (!detail::fixed_gain::cumulative_decays(problem, 0, 0, c0, std::min(chunk, T - c0)).factored)
            ++strongly_decaying_chunks;
      }
      {
        const precision_scope scope(2 * p_bits + 64);
        ref_bits = scalar_traits<mpfr_real>::precision_bits();
        reference = fixed_gain_forward(to_inputs(p));
      }
      const double u = std::ldexp(1.0, -static_cast<int>(p_bits));
      const double u_ref = std::ldexp(1.0, -static_cast<int>(ref_bits));
      const double M = trajectory_scale(p);
      const double Kd = static_cast<double>(K), Vd = static_cast<double>(V), Td = static_cast<double>(T);
      const double n = static_cast<double>(std::min(chunk, T));
      const double chunks = std::ceil(Td / n);
      const double e_ref = 2 * (2 * Kd + 16) * Td * u_ref * M;
      const double e_seq = 2 * (2 * Kd + 16) * Td * u * M + e_ref;
      const double delta_rho = (2 * n + 2) * (1 + n * g_max) * u;
      const double eps = delta_rho + (Kd + Vd + n + 4) * u;
      const double e_chunk = 2 * (chunks + 1) * 64 * std::pow(n, 4) * eps * M + e_ref;
      const double read_term = (Kd + 2) * (u + u_ref) * M;
      const double scale = 1 / std::sqrt(Kd);
      const double r_seq = check_within(*sequential, *reference, p, scale, e_seq, read_term);
      const double r_chunk = check_within(*chunked, *reference, p, scale, e_chunk, read_term);
      worst_ratio_seq = std::max(worst_ratio_seq, r_seq);
      worst_ratio_chunk = std::max(worst_ratio_chunk, r_chunk);
    });
    MESSAGE("fixed_gain mpfr256: worst log2(observed / bound): sequential "
            << std::log2(worst_ratio_seq) << ", chunked " << std::log2(worst_ratio_chunk) << "; "
            << strongly_decaying_chunks << " strongly decaying chunks");
    CHECK(strongly_decaying_chunks > 0);
  }

  TEST_CASE("fixed_gain: log-gate special cases of KDA hold bit for bit in MPFR") {
    check_property("fixed_gain_mpfr_gdn_and_delta_net_are_kda", [] {
      const precision_scope scope(256);
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 65);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 5);
      const std::size_t V = K + 1;
      const std::size_t chunk = *rc::gen::element<std::size_t>(1, 3, 16, 100);
      const auto seed = *rc::gen::arbitrary<std::uint64_t>();
      // GDN vs KDA with the scalar gate copied to every channel
      const auto gdn = to_inputs(make_problem(fixed_gain_rule::gated_delta_net, 1, T, 2, K, V, true, seed));
      auto kda = gdn;
      kda.rule = fixed_gain_rule::kda;
      tensor<mpfr_real> g4("g", {1, T, 2, K});
      for (std::size_t f = 0; f < g4.size(); ++f) g4.data()[f] = gdn.g->data()[f / K];
      kda.g = g4;
      RC_ASSERT(fixed_gain_forward(gdn).o.data() == fixed_gain_forward(kda).o.data());
      RC_ASSERT(fixed_gain_chunked_forward(gdn, chunk).o.data() == fixed_gain_chunked_forward(kda, chunk).o.data());
      // DeltaNet vs KDA with g = 0 (e^0 = 1 exactly)
      const auto dn = to_inputs(make_problem(fixed_gain_rule::delta_net, 1, T, 2, K, V, true, seed));
      auto kda0 = dn;
      kda0.rule = fixed_gain_rule::kda;
      kda0.g = tensor<mpfr_real>("g", {1}, mpfr_real(0));
      RC_ASSERT(fixed_gain_forward(dn).final_state.data() == fixed_gain_forward(kda0).final_state.data());
      RC_ASSERT(fixed_gain_chunked_forward(dn, chunk).o.data() == fixed_gain_chunked_forward(kda0, chunk).o.data());
    });
  }

  TEST_CASE("fixed_gain: threads = 3 gives bit-identical outputs to threads = 1") {
    check_property("fixed_gain_threads_bit_identical", [] {
      const precision_scope scope(256);
      const auto rule = *gen_rule();
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 65);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 5);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 5);
      const std::size_t chunk = *rc::gen::element<std::size_t>(1, 2, 16, 64);
      const auto in = to_inputs(
          make_problem(rule, 2, T, 2, K, V, *rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<std::uint64_t>()));
      const auto same_bits = [](const tensor<mpfr_real>& a, const tensor<mpfr_real>& b) {
        if (a.shape() != b.shape()) return false;
        for (std::size_t f = 0; f < a.size(); ++f) {
          const auto* x = a.data()[f].backend().data();
          const auto* y = b.data()[f].backend().data();
          if (mpfr_get_prec(x) != mpfr_get_prec(y) || mpfr_signbit(x) != mpfr_signbit(y) || !mpfr_equal_p(x, y))
            return false;
        }
        return true;
      };
      const run_options one{1, true}, three{3, true};
      const auto s1 = fixed_gain_forward(in, one), s3 = fixed_gain_forward(in, three);
      RC_ASSERT(same_bits(s1.o, s3.o));
      RC_ASSERT(same_bits(s1.final_state, s3.final_state));
      RC_ASSERT(same_bits(*s1.gain, *s3.gain));
      const auto c1 = fixed_gain_chunked_forward(in, chunk, one), c3 = fixed_gain_chunked_forward(in, chunk, three);
      RC_ASSERT(same_bits(c1.o, c3.o));
      RC_ASSERT(same_bits(c1.final_state, c3.final_state));
    });
  }
}
