// The diagonal and isotropic KDN in parallel form, as a kernel computes them (docs/math.md §4, §5, §7,
// §8). Three phases:
//
//   1. covariance: p_t (per channel i) and b_t (per head) are Möbius recursions x_t = M_t · x_{t−1}
//      with the leaves diag_kdn_covariance_leaf / iso_kdn_covariance_leaf (§8 table). All prefixes
//      Π_t = M_t ⋯ M_1 come from one inclusive scan (default: the chunked map/carry/emit schedule
//      with power-of-two rescaling), and x_t = Π_t · x_0 (§8 facts 2, 3);
//   2. gains: p̂_t = α_t² ⊙ p_{t−1} + ω_t (b̂_t = a_t b_{t−1} + ω_t) from the scanned p_{t−1}, then
//      κ_t (§4) or β_t and κ_t = β_t k_t (§5), every token independently;
//   3. memory: the fixed-gain two-key delta rule of §7, S_t = (I − κ_t k_tᵀ) diag(α_t) S_{t−1} +
//      κ_t v_tᵀ, o_t = S_tᵀ (τ q_t), with those gains, in the chunked WY form a kernel runs
//      (models/fixed_gain_chunked.hpp: the given-gain rule, chunks of kdn_scan_options's
//      memory_chunk_size tokens; for the isotropic model optionally the β-form instead, β_t and k_t
//      entering the chunk's products as in fla's chunk_kda: kdn_memory_association).
// Phases 1 and 2 run per (batch, head); phase 3 takes every head's gains at once.
//
// Over exact arithmetic this equals the sequential references (diagonal.hpp, isotropic.hpp) for
// every schedule, chunk size and rescale mode of the scan, every memory chunk size and both memory
// associations (the WY form is exact algebra); properties/models_kdn_exact.cpp checks it exactly
// over rationals (both associations), and properties/models_kdn_mpfr.cpp within a derived rounding
// bound in MPFR (docs/kdn-parallel-rounding.md; the two-key association only: the bound is derived
// for it, and the β-form's rounding is sampled by the typical tier instead).
//
// The code here shares input checks with the sequential references but none of their arithmetic:
// the planted bugs of diagonal.hpp and isotropic.hpp (kdn_gain_after_write, kdn_mu_before_gain,
// kdn_decay_after_delta, kdn_read_before_write, iso_kdn_norm_not_squared) are absent here, so
// comparing the two forms catches them. This path has planted bugs of its own, each caught by its
// own family: the leaves' (diag_kdn_leaf_missing_u, iso_kdn_leaf_wrong_trace: leaves), the
// scans' (scan), the Möbius compose's (algebra), and the chunked memory's
// (wy_chunk_carry_skips_last: fixed_gain).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kalman_oracle/algebra/leaves.hpp"
#include "kalman_oracle/algebra/mobius.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"
#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_common.hpp"
#include "kalman_oracle/models/options.hpp"
#include "kalman_oracle/scan/schedules.hpp"
#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle {

/// How the memory's chunked WY form takes the gain (docs/math.md, the chunked form's parametrisation).
/// Both give the sequential result over exact arithmetic; they round differently.
enum class kdn_memory_association {
  /// The two-key rule with κ_t given (r = 1, e = k, w = κ): κ_t = fl(β_t k_t) formed first for the
  /// isotropic model, the diagonal gain as computed for the diagonal one.
  two_key,
  /// The isotropic model only: the β-form r = β_t, e = w = k_t (fla's chunk_kda association; β_t
  /// enters the chunk's products, κ_t is never formed).
  beta_form,
};

/// How the parallel forms run. Any choice gives the sequential result over exact arithmetic.
struct kdn_scan_options {
  scan_schedule schedule = scan_schedule::chunked;    ///< the covariance scan's schedule
  std::size_t chunk_size = default_scan_chunk_size;   ///< the covariance scan's chunk (chunked schedule)
  rescale_mode rescale = rescale_mode::power_of_two;  ///< exact in binary formats, what a kernel does
  /// Tokens per chunk of the memory's chunked WY form (models/fixed_gain_chunked.hpp), >= 1.
  std::size_t memory_chunk_size = default_wy_chunk_size;
  kdn_memory_association memory_association = kdn_memory_association::two_key;
};

// ---- The fixed-gain memory (§7 two-key delta rule) -------------------------------------------------

/// Inputs of the memory path with the gains given: S_t = (I − κ_t k_tᵀ) diag(α_t) S_{t−1} + κ_t v_tᵀ.
template <class T>
struct kdn_memory_inputs {
  tensor<T> q;  ///< [B, T, H, K]
  tensor<T> k;  ///< [B, T, H, K] (the erase direction)
  tensor<T> v;  ///< [B, T, H, V]
  tensor<T> g;  ///< decays, broadcast to [B, T, H, K] (as in diagonal_kdn_inputs)
  gate_space gates = gate_space::log;
  tensor<T> gain;                          ///< κ_t (the write direction), broadcast to [B, T, H, K], any finite values
  std::optional<tensor<T>> initial_state;  ///< S_0, broadcast to [B, H, K, V]; default 0
  std::optional<T> scale;                  ///< τ > 0; default 1/√K
};

template <class T>
struct kdn_memory_outputs {
  tensor<T> o;            ///< [B, T, H, V]
  tensor<T> final_state;  ///< [B, H, K, V]
};

namespace detail {

/// The KDN memory as the fixed-gain family's given-gain rule (KDA's decay, erase key k, write key
/// κ): one implementation of §7's two-key rule serves both families.
template <class T>
fixed_gain_inputs<T> kdn_memory_rule(const kdn_memory_inputs<T>& inputs) {
  fixed_gain_inputs<T> rule;
  rule.rule = fixed_gain_rule::kda;
  rule.q = inputs.q;
  rule.k = inputs.k;
  rule.v = inputs.v;
  rule.g = inputs.g;
  rule.gates = inputs.gates;
  rule.gain = inputs.gain;
  rule.initial_state = inputs.initial_state;
  rule.scale = inputs.scale;
  return rule;
}

/// Phase 3 of a parallel form: the memory of every head with the gains of phase 2, in the chunked
/// WY form; writes o and S_T into `out`. With `beta` (the isotropic model's β_t [B, T, H]) and the
/// β-form association, the rule takes β_t and k_t instead of κ_t = β_t k_t.
template <class T, class Inputs, class Outputs>
void kdn_parallel_memory(const Inputs& inputs, tensor<T> gain, const T& tau, const kdn_scan_options& scan,
                         const run_options& options, Outputs& out, std::optional<tensor<T>> beta = std::nullopt) {
  fixed_gain_inputs<T> rule = kdn_memory_rule<T>(
      {inputs.q, inputs.k, inputs.v, inputs.g, inputs.gates, std::move(gain), inputs.initial_state, tau});
  if (scan.memory_association == kdn_memory_association::beta_form) {
    rule.gain.reset();
    rule.beta = std::move(beta);
  }
  fixed_gain_outputs<T> memory =
      fixed_gain_chunked_forward(rule, scan.memory_chunk_size, run_options{options.threads, false});
  out.o = std::move(memory.o);
  out.final_state = std::move(memory.final_state);
}

/// What a KDN's gain is: a general vector (the diagonal model: P̂_t k_t / (r_t + k_tᵀ P̂_t k_t)) or a
/// multiple of the key (the isotropic model: β_t k_t), which alone admits the β-form association.
enum class kdn_gain_shape { general, multiple_of_key };

/// The memory's scan options for a model whose gain has shape `gain`: memory_chunk_size >= 1, and the
/// β-form only for a multiple of the key; checked with the inputs, before any arithmetic.
inline void require_memory_options(const kdn_scan_options& scan, kdn_gain_shape gain) {
  if (scan.memory_chunk_size == 0)
    throw input_error("memory_chunk_size: 0; rule: a chunk of the memory needs at least one token");
  if (gain == kdn_gain_shape::general && scan.memory_association == kdn_memory_association::beta_form)
    throw input_error(
        "memory_association: beta_form; rule: the diagonal KDN's gain P̂_t k_t / (r_t + k_tᵀ P̂_t k_t) is not a "
        "multiple of k_t, only the isotropic model has the β-form");
}

}  // namespace detail

/// The memory path alone, gains given (§7's two-key rule; with κ_t = β_t k_t it is KDA), token by
/// token: the fixed-gain family's given-gain rule (fixed_gain_forward).
template <class T>
kdn_memory_outputs<T> kdn_memory_forward(const kdn_memory_inputs<T>& inputs, const run_options& options = {}) {
  fixed_gain_outputs<T> out = fixed_gain_forward(detail::kdn_memory_rule(inputs), run_options{options.threads, false});
  return {std::move(out.o), std::move(out.final_state)};
}

// ---- Diagonal KDN (§4) ---------------------------------------------------------------------------

/// The diagonal KDN by covariance scan + per-token gains + chunked fixed-gain memory. Same inputs,
/// outputs and input checks as diagonal_kdn_forward.
template <class T>
diagonal_kdn_outputs<T> diagonal_kdn_parallel(const diagonal_kdn_inputs<T>& inputs, const kdn_scan_options& scan = {},
                                              const run_options& options = {}) {
  const detail::diagonal_kdn_problem<T> pb(inputs);
  detail::require_memory_options(scan, detail::kdn_gain_shape::general);
  const detail::kdn_dims& d = pb.dims;
  const std::size_t N = d.tokens, K = d.key_dim;
  diagonal_kdn_outputs<T> out = detail::diagonal_kdn_allocate<T>(d, options.internals);
  const mobius_monoid<T> monoid{scan.rescale};
  tensor<T> gains("gain", {d.batch, N, d.heads, K});

  detail::parallel_for(d.batch * d.heads, options.threads, [&](std::size_t bh) {
    const std::size_t b = bh / d.heads, h = bh % d.heads;
    const T mu = pb.mu(h);
    std::vector<T> alpha(N * K);
    for (std::size_t t = 0; t < N; ++t)
      for (std::size_t i = 0; i < K; ++i) alpha[t * K + i] = pb.decay(b, t, h, i);

    // Phase 1: per channel, the leaves M_{t,i} = [[α², ω], [uα², 1 + uω]] and their prefixes;
    // covariance[t * K + i] = p_{t,i} = Π_{t,i} · p_{0,i} (t counted from 0 here: token t + 1).
    std::vector<T> covariance(N * K);
    std::vector<mobius<T>> leaves(N);
    for (std::size_t i = 0; i < K; ++i) {
      for (std::size_t t = 0; t < N; ++t)
        leaves[t] =
            diag_kdn_covariance_leaf(alpha[t * K + i], pb.omega(b, t, h, i), inputs.k(b, t, h, i), pb.r(b, t, h), mu);
      const std::vector<mobius<T>> prefixes =
          inclusive_scan(scan.schedule, monoid, std::span<const mobius<T>>(leaves), scan.chunk_size);
      const T prior = pb.prior(b, h, i);
      for (std::size_t t = 0; t < N; ++t) covariance[t * K + i] = mobius_apply(prefixes[t], prior);
    }

    // Phase 2: every token at once, p̂_t from p_{t−1}, then the exact gain for diag(p̂_t).
    std::vector<T> predicted(N * K);
    for (std::size_t t = 0; t < N; ++t) {
      for (std::size_t i = 0; i < K; ++i) {
        const T previous = t == 0 ? pb.prior(b, h, i) : covariance[(t - 1) * K + i];
        predicted[t * K + i] = alpha[t * K + i] * alpha[t * K + i] * previous + pb.omega(b, t, h, i);
      }
      T denominator = pb.r(b, t, h);
      for (std::size_t i = 0; i < K; ++i) {
        const T key = inputs.k(b, t, h, i);
        denominator += predicted[t * K + i] * key * key;
      }
      for (std::size_t i = 0; i < K; ++i) gains(b, t, h, i) = predicted[t * K + i] * inputs.k(b, t, h, i) / denominator;
    }

    // The covariance's outputs: readout variance τ² q_tᵀ diag(p_t) q_t, p_T, and the internals.
    for (std::size_t t = 0; t < N; ++t) {
      T variance(0);
      for (std::size_t i = 0; i < K; ++i) {
        const T scaled = pb.tau * inputs.q(b, t, h, i);
        variance += scaled * scaled * covariance[t * K + i];
      }
      out.readout_variance(b, t, h) = variance;
      if (options.internals)
        for (std::size_t i = 0; i < K; ++i) {
          (*out.predicted_covariance)(b, t, h, i) = predicted[t * K + i];
          (*out.gain)(b, t, h, i) = gains(b, t, h, i);
        }
    }
    for (std::size_t i = 0; i < K; ++i) out.final_covariance(b, h, i) = covariance[(N - 1) * K + i];
  });

  // Phase 3: the chunked fixed-gain memory with those gains.
  detail::kdn_parallel_memory(inputs, std::move(gains), pb.tau, scan, options, out);
  return out;
}

// ---- Isotropic KDN (§5) --------------------------------------------------------------------------

/// The isotropic KDN by covariance scan + per-token gains + chunked fixed-gain memory (KDA with
/// β_t). Same inputs, outputs and input checks as isotropic_kdn_forward.
template <class T>
isotropic_kdn_outputs<T> isotropic_kdn_parallel(const isotropic_kdn_inputs<T>& inputs,
                                                const kdn_scan_options& scan = {}, const run_options& options = {}) {
  const detail::isotropic_kdn_problem<T> pb(inputs);
  detail::require_memory_options(scan, detail::kdn_gain_shape::multiple_of_key);
  const detail::kdn_dims& d = pb.dims;
  const std::size_t N = d.tokens, K = d.key_dim;
  isotropic_kdn_outputs<T> out = detail::isotropic_kdn_allocate<T>(d, options.internals);
  const mobius_monoid<T> monoid{scan.rescale};
  tensor<T> gains("gain", {d.batch, N, d.heads, K});
  tensor<T> betas("beta", {d.batch, N, d.heads});

  detail::parallel_for(d.batch * d.heads, options.threads, [&](std::size_t bh) {
    const std::size_t b = bh / d.heads, h = bh % d.heads;
    const T mu = pb.mu(h);
    std::vector<T> alpha(N * K), key(N * K);
    for (std::size_t t = 0; t < N; ++t)
      for (std::size_t i = 0; i < K; ++i) {
        alpha[t * K + i] = pb.decay(b, t, h, i);
        key[t * K + i] = inputs.k(b, t, h, i);
      }
    const auto alpha_at = [&](std::size_t t) { return std::span<const T>(alpha).subspan(t * K, K); };
    const auto key_at = [&](std::size_t t) { return std::span<const T>(key).subspan(t * K, K); };

    // Phase 1: the leaves [[a, ω], [u a, 1 + u ω]] and their prefixes; covariance[t] = b_t = Π_t · b_0.
    std::vector<mobius<T>> leaves(N);
    for (std::size_t t = 0; t < N; ++t)
      leaves[t] = iso_kdn_covariance_leaf(alpha_at(t), pb.omega(b, t, h), key_at(t), pb.r(b, t, h), mu);
    const std::vector<mobius<T>> prefixes =
        inclusive_scan(scan.schedule, monoid, std::span<const mobius<T>>(leaves), scan.chunk_size);
    const T prior = pb.prior(b, h);
    std::vector<T> covariance(N);
    for (std::size_t t = 0; t < N; ++t) covariance[t] = mobius_apply(prefixes[t], prior);

    // Phase 2: every token at once, b̂_t = a_t b_{t−1} + ω_t, β_t = b̂_t / (r_t + b̂_t ‖k_t‖²), κ_t = β_t k_t.
    std::vector<T> predicted(N), beta(N);
    for (std::size_t t = 0; t < N; ++t) {
      const T previous = t == 0 ? prior : covariance[t - 1];
      predicted[t] = iso_kdn_decay(alpha_at(t)) * previous + pb.omega(b, t, h);
      T key2(0);
      for (std::size_t i = 0; i < K; ++i) key2 += key[t * K + i] * key[t * K + i];
      beta[t] = predicted[t] / (pb.r(b, t, h) + predicted[t] * key2);
      betas(b, t, h) = beta[t];
      for (std::size_t i = 0; i < K; ++i) gains(b, t, h, i) = beta[t] * key[t * K + i];
    }

    // The covariance's outputs: readout variance τ² b_t ‖q_t‖², b_T, and the internals.
    for (std::size_t t = 0; t < N; ++t) {
      T scaled_query2(0);
      for (std::size_t i = 0; i < K; ++i) {
        const T scaled = pb.tau * inputs.q(b, t, h, i);
        scaled_query2 += scaled * scaled;
      }
      out.readout_variance(b, t, h) = covariance[t] * scaled_query2;
      if (options.internals) {
        (*out.predicted_covariance)(b, t, h) = predicted[t];
        (*out.beta)(b, t, h) = beta[t];
      }
    }
    out.final_covariance(b, h) = covariance[N - 1];
  });

  // Phase 3: the chunked fixed-gain memory with κ_t = β_t k_t (two-key) or β_t and k_t (β-form).
  detail::kdn_parallel_memory(inputs, std::move(gains), pb.tau, scan, options, out, std::optional(std::move(betas)));
  return out;
}

}  // namespace kalman_oracle
