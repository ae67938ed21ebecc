// The adjoint of the gate rule of models/gates.hpp (docs/math.md §9; docs/gradients.md, "Conventions"):
// with gate_space::log the input is g and α = e^g, so dL/dg = α dL/dα; with gate_space::linear the
// input is α itself. It lives under grad/ rather than in models/gates.hpp because the forward
// headers know nothing of adjoints (grad/ depends on models/, never the reverse), and it is a header
// of its own so that the rule and its derivative sit side by side, one include apart.
#pragma once

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/models/gates.hpp"

namespace kalman_oracle {

/// dL/dg from dL/dα for a gate g as the model reads it: α = e^g (log gates) gives α dL/dα; a
/// linear gate is α itself. (Planted bug grad_log_gate_linear_branch: the linear rule applied to
/// log gates, i.e. differentiating through the wrong branch of the gate conversion.)
template <class T>
T gate_cotangent(const T& d_alpha, const T& alpha, gate_space gates) {
  if (KALMAN_ORACLE_MUTANT(grad_log_gate_linear_branch, gates == gate_space::log, false)) return alpha * d_alpha;
  return d_alpha;
}

}  // namespace kalman_oracle
