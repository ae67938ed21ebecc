// Kalman Linear Attention (docs/math.md §6), the parallel (scan) form: the algorithm a kernel follows,
// in the same scalar type as the sequential reference (models/kla.hpp). Per element (m, s):
//
//   1. precision: the Möbius leaves M_t = kla_precision_leaf(ā_t, p̄_t, φ_t) (docs/math.md §8 table),
//      an inclusive scan Π_t = M_t ⋯ M_1 by any schedule and rescale mode, and λ_t = Π_t · λ_0;
//   2. the previous precision λ_{t-1} for every t, by one of two routes (kla_recovery):
//        exclusive_scan  λ_{t-1} = Π_{t-1} · λ_0 from the exclusive scan (Π_0 = identity);
//        inversion       λ_{t-1} from λ_t by inverting token t's leaf (below), no second scan;
//   3. mean: the affine leaves (α_t, ρ_t) = kla_mean_leaf(ā_t, p̄_t, λ_{t-1}, ρ_t) (§8 fact 5), an
//      inclusive affine scan by the same schedule, and η_t = A_t · η_0;
//   4. readout: y = Σ_s q η_t / λ_t, y_var = Σ_s q² / λ_t (read after write).
//
// Over exact arithmetic every schedule, rescale mode, chunk size and recovery gives exactly the
// sequential reference (docs/math.md §8 facts 2, 3, 5; properties/models_kla_laws.cpp). In MPFR the
// difference is within the bound derived in properties/models_kla_laws.cpp (docs/math.md).
//
// Inverting the leaf. Token t's step is λ_t = λ_{t-1} / (ā² + p̄ λ_{t-1}) + φ, the action of
// [[1 + p̄φ, ā²φ], [p̄, ā²]] (det ā² > 0, so the map is invertible). With y = λ_t − φ =
// λ_{t-1} / (ā² + p̄ λ_{t-1}) (the predicted precision λ̂_t, > 0):
//     y ā² + y p̄ λ_{t-1} = λ_{t-1}   ⇒   λ_{t-1} = ā² y / (1 − p̄ y),
// the action of the adjugate [[ā², −ā²φ], [−p̄, 1 + p̄φ]]. Here 1 − p̄ y = ā² / (ā² + p̄ λ_{t-1}) > 0.
// Conditioning (relative, d log λ_{t-1} / d log λ_t):
//     κ = (λ_t / (λ_t − φ)) · (1 / (1 − p̄ y)) = (1 + φ / λ̂_t) · (1 + p̄ λ_{t-1} / ā²).
// The subtraction λ_t − φ cancels when the observation dominates the predicted precision
// (φ ≫ λ̂_t: large Λ k²), and 1 − p̄ y cancels when the process noise swamps the decayed prior
// variance (p̄ ≫ ā² / λ_{t-1}: strong decay or large noise). Neither factor is bounded, so the
// inversion route has no uniform error bound: errors in λ_t are amplified by κ. The exclusive-scan
// route has no subtraction at all (every quantity is a sum of non-negative terms).
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/algebra/affine.hpp"
#include "kalman_oracle/algebra/leaves.hpp"
#include "kalman_oracle/algebra/mobius.hpp"
#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/kla.hpp"
#include "kalman_oracle/scan/schedules.hpp"

namespace kalman_oracle {

/// How the scan form gets λ_{t-1}, which the mean leaves need.
enum class kla_recovery {
  exclusive_scan,  // λ_{t-1} = Π_{t-1} · λ_0 (a second, exclusive scan)
  inversion,       // λ_{t-1} = ā² (λ_t − φ) / (1 − p̄ (λ_t − φ)) (what a kernel does; see above)
};

inline std::string to_string(kla_recovery recovery) {
  switch (recovery) {
    case kla_recovery::exclusive_scan: return "exclusive_scan";
    case kla_recovery::inversion: return "inversion";
  }
  throw std::invalid_argument("kla_recovery: unknown value");
}

struct kla_scan_options {
  scan_schedule schedule = scan_schedule::sequential;
  rescale_mode rescale = rescale_mode::none;         // of the Möbius products (§8 fact 3)
  std::size_t chunk_size = default_scan_chunk_size;  // chunked schedule only; >= 1
  kla_recovery recovery = kla_recovery::exclusive_scan;
};

/// λ_{t-1} from λ_t by inverting the precision leaf of token t (derivation above):
/// λ_{t-1} = ā² (λ_t − φ) / (1 − p̄ (λ_t − φ)). Exact over rationals; in floating point its
/// relative condition number is (1 + φ / λ̂_t)(1 + p̄ λ_{t-1} / ā²).
template <class T>
T kla_invert_precision_leaf(const T& decay, const T& process_noise, const T& phi, const T& precision) {
  const T predicted = precision - phi;  // λ̂_t = λ_t − φ_t = λ_{t-1} / den_t
  const T decay2 = KALMAN_ORACLE_MUTANT(kla_recovery_inverts_wrong_leaf, decay * decay, decay);
  return decay2 * predicted / (T(1) - process_noise * predicted);
}

/// The trajectory of one element (m, s): λ_t, λ_{t-1} (as recovered) and η_t for t = 1..T.
template <class T>
struct kla_element_trajectory {
  std::vector<T> lambda, previous_lambda, eta;
};

/// Steps 1–3 above for one element, from per-token ā, p̄, φ, ρ and the prior (λ_0, η_0).
template <class T>
kla_element_trajectory<T> kla_scan_element(std::span<const T> decay, std::span<const T> process_noise,
                                           std::span<const T> phi, std::span<const T> rho, const T& lambda_0,
                                           const T& eta_0, const kla_scan_options& options) {
  const std::size_t n = phi.size();
  if (decay.size() != n || process_noise.size() != n || rho.size() != n)
    throw std::invalid_argument("kla_scan_element: decay, process_noise, phi and rho must have one entry per token");
  kla_element_trajectory<T> out;
  out.lambda.reserve(n);
  out.previous_lambda.reserve(n);
  out.eta.reserve(n);

  // 1. Precision: λ_t = Π_t · λ_0, Π_t = M_t ⋯ M_1 (§8).
  std::vector<mobius<T>> leaves;
  leaves.reserve(n);
  for (std::size_t t = 0; t < n; ++t) leaves.push_back(kla_precision_leaf(decay[t], process_noise[t], phi[t]));
  const mobius_monoid<T> precision_monoid{options.rescale};
  const std::span<const mobius<T>> leaf_span(leaves);
  const std::vector<mobius<T>> prefixes =
      inclusive_scan(options.schedule, precision_monoid, leaf_span, options.chunk_size);
  for (std::size_t t = 0; t < n; ++t) out.lambda.push_back(mobius_apply(prefixes[t], lambda_0));

  // 2. Previous precision λ_{t-1}.
  if (options.recovery == kla_recovery::exclusive_scan) {
    // exclusive[0] is the identity, whose action returns λ_0 exactly in any arithmetic.
    const std::vector<mobius<T>> exclusive =
        exclusive_scan(options.schedule, precision_monoid, leaf_span, options.chunk_size);
    for (std::size_t t = 0; t < n; ++t) out.previous_lambda.push_back(mobius_apply(exclusive[t], lambda_0));
  } else {
    // Every token alike (also t = 1, although λ_0 is known there): what a chunked kernel does.
    for (std::size_t t = 0; t < n; ++t)
      out.previous_lambda.push_back(kla_invert_precision_leaf(decay[t], process_noise[t], phi[t], out.lambda[t]));
  }

  // 3. Mean: η_t = A_t · η_0 with A_t = (α_t, ρ_t) ∘ … ∘ (α_1, ρ_1), α_t = ā / (ā² + p̄ λ_{t-1}) (§6).
  std::vector<affine<T>> mean_leaves;
  mean_leaves.reserve(n);
  for (std::size_t t = 0; t < n; ++t)
    mean_leaves.push_back(kla_mean_leaf(decay[t], process_noise[t], out.previous_lambda[t], rho[t]));
  const std::vector<affine<T>> mean_prefixes =
      inclusive_scan(options.schedule, affine_monoid<T>{}, std::span<const affine<T>>(mean_leaves), options.chunk_size);
  for (std::size_t t = 0; t < n; ++t) out.eta.push_back(affine_apply(mean_prefixes[t], eta_0));
  return out;
}

/// KLA by the scan form: same inputs, validation and outputs as kla_forward (models/kla.hpp).
template <class T>
kla_outputs<T> kla_parallel_forward(const kla_inputs<T>& inputs, const kla_scan_options& scan = {},
                                    const run_options& options = {}) {
  if (scan.chunk_size == 0) throw std::invalid_argument("kla_parallel_forward: chunk_size must be >= 1, got 0");
  const detail::kla_checked_inputs<T> in(inputs);
  const std::size_t B = in.dims.batch, TT = in.dims.tokens, M = in.dims.channels, S = in.dims.state;
  kla_outputs<T> out = detail::kla_allocate_outputs<T>(in.dims, options.internals);

  detail::parallel_for(B, options.threads, [&](std::size_t b) {
    // λ_t and η_t of every (t, m, s) of this row, from one scan per element.
    std::vector<T> lambda(TT * M * S), eta(TT * M * S);
    std::vector<T> decay(TT), process_noise(TT), phi(TT), rho(TT);
    for (std::size_t m = 0; m < M; ++m) {
      for (std::size_t s = 0; s < S; ++s) {
        for (std::size_t t = 0; t < TT; ++t) {
          decay[t] = in.a_bar(b, t, m, s);
          process_noise[t] = in.p_bar(b, t, m, s);
          const kla_observation<T> obs = kla_observe(in.Lambda(b, t, m), in.k(b, t, s), in.v(b, t, m));
          phi[t] = obs.phi;  // φ_t = Λ k²
          rho[t] = obs.rho;  // ρ_t = v Λ k
        }
        const kla_element_trajectory<T> element =
            kla_scan_element<T>(decay, process_noise, phi, rho, in.lambda_0(b, m, s), in.eta_0(b, m, s), scan);
        for (std::size_t t = 0; t < TT; ++t) {
          lambda[(t * M + m) * S + s] = element.lambda[t];
          eta[(t * M + m) * S + s] = element.eta[t];
        }
      }
    }
    // 4. Readout, read after write.
    for (std::size_t t = 0; t < TT; ++t) {
      for (std::size_t m = 0; m < M; ++m) {
        T y(0), y_var(0);
        for (std::size_t s = 0; s < S; ++s) {
          const T& query = in.q(b, t, s);
          const T& lambda_t = lambda[(t * M + m) * S + s];
          const T& eta_t = eta[(t * M + m) * S + s];
          y += query * eta_t / lambda_t;
          y_var += query * query / lambda_t;
          if (options.internals) {
            (*out.lambda)(b, t, m, s) = lambda_t;
            (*out.eta)(b, t, m, s) = eta_t;
          }
        }
        out.y(b, t, m) = y;
        out.y_var(b, t, m) = y_var;
      }
    }
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t s = 0; s < S; ++s) {
        out.final_lambda(b, m, s) = lambda[((TT - 1) * M + m) * S + s];
        out.final_eta(b, m, s) = eta[((TT - 1) * M + m) * S + s];
      }
  });
  return out;
}

}  // namespace kalman_oracle
