// What the typical tier's two users share (docs/error-model.md, "Typical tier"): the fixtures' generator
// (fixtures/lib/typical.cpp, tensor_core_tier.cpp), which attaches an envelope to every output of a
// fixture, and `kalman-oracle-gpu validate` (gpu/tools/validate_typical_envelope.cpp), which builds the
// same kind of envelope on the spot at production shapes. Both run an ensemble of honest evaluations,
// keep per element the largest error against the reference, and multiply it by one factor; the factor,
// the count of stochastic-operand members and the per-element maximum are spelled here once, so that
// the two envelopes cannot drift apart.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace kalman_oracle::check {

/// The factor the ensemble's largest error is multiplied by (docs/error-model.md, "Typical tier":
/// measured against honest evaluations outside the ensemble; at validate's shapes in docs/kernels.md,
/// "The typical envelope").
inline constexpr double typical_factor = 16;

/// Operand-stochastic members of the tensor-core tiers' gradient ensembles: each runs one of the chunked
/// forms with the products' operands rounded stochastically under its own seed (seeds 1, 2, …), the
/// associations of the decays alternating. The round-to-nearest members all round the same input-level
/// operands the same way, so at an element whose error those roundings decide they are one sample; a
/// kernel that forms other operands draws another (docs/error-model.md, "Independent operand roundings
/// for the gradients").
inline constexpr unsigned tensor_core_stochastic_members = 4;

/// largest[i] = max(largest[i], |member(i) − reference[i]|) for i < count, largest grown to count with
/// zeros first. A difference that is not finite (a member's infinity or NaN where the reference is
/// finite) makes largest[i] +∞ for good: the envelope then says nothing about that element, rather than
/// forgetting that an honest evaluation failed there.
template <class Member>
void absorb_largest_errors(std::vector<double>& largest, const double* reference, std::size_t count, Member&& member) {
  if (largest.size() < count) largest.resize(count, 0);
  for (std::size_t i = 0; i < count; ++i) {
    const double e = std::fabs(static_cast<double>(member(i)) - reference[i]);
    largest[i] = std::isfinite(e) ? std::max(largest[i], e) : std::numeric_limits<double>::infinity();
  }
}

}  // namespace kalman_oracle::check
