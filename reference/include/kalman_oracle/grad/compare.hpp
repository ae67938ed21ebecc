// Comparing gradient sets (grad/common.hpp): exact equality, and the norm-wise difference the MPFR
// properties bound (docs/gradients.md, "Bounds").
#pragma once

#include <cstddef>
#include <string>

#include "kalman_oracle/grad/common.hpp"

namespace kalman_oracle {

/// How far `candidate` is from `reference`, over the names `reference` holds.
template <class B>
struct gradient_difference {
  bool shapes_match = true;  // every name of reference is in candidate, with its shape
  std::string missing;       // the first name that is not (or has another shape)
  B max_abs_difference{0};   // max_i |candidate_i − reference_i| over every entry of every name; NaN
                             // where any difference is NaN (so that no tolerance accepts it)
  B scale{0};                // max_i |reference_i| over the same entries
  std::string worst;         // the name holding the largest difference
};

template <class B>
gradient_difference<B> compare_gradients(const gradients<B>& candidate, const gradients<B>& reference) {
  using std::abs;
  gradient_difference<B> d;
  for (const tensor<B>& r : reference.items()) {
    const tensor<B>* c = candidate.find(r.name());
    if (c == nullptr || c->shape() != r.shape()) {
      if (d.shapes_match) d.missing = r.name();
      d.shapes_match = false;
      continue;
    }
    for (std::size_t i = 0; i < r.size(); ++i) {
      const B diff = abs(B(c->data()[i] - r.data()[i]));
      const B mag = abs(r.data()[i]);
      // A NaN difference (a NaN on either side) wins and stays: `diff > max` alone would skip it.
      const bool nan_so_far = !(d.max_abs_difference == d.max_abs_difference);
      if (!nan_so_far && !(diff <= d.max_abs_difference)) {
        d.max_abs_difference = diff;
        d.worst = r.name();
      }
      if (mag > d.scale) d.scale = mag;
    }
  }
  return d;
}

/// Exact equality over the names `reference` holds (for rationals).
template <class B>
bool same_gradients(const gradients<B>& candidate, const gradients<B>& reference) {
  for (const tensor<B>& r : reference.items()) {
    const tensor<B>* c = candidate.find(r.name());
    if (c == nullptr || c->shape() != r.shape() || c->data() != r.data()) return false;
  }
  return true;
}

/// Σ_i |g_i| |u_i| over the names both hold: the condition scale of the inner product ⟨g, u⟩.
template <class B>
B abs_inner_product(const named_tensors<B>& g, const named_tensors<B>& u) {
  using std::abs;
  B total(0);
  for (const tensor<B>& x : g.items())
    if (const tensor<B>* y = u.find(x.name()))
      for (std::size_t i = 0; i < x.size() && i < y->size(); ++i) total += abs(x.data()[i]) * abs(y->data()[i]);
  return total;
}

}  // namespace kalman_oracle
