// Gates: how every model turns its gate input into a decay, and which gates it accepts (docs/math.md
// §2, §4, §5, §7; docs/math.md, "Gates").
//
//   gate_space::log     the input is fla's log-space gate g and the decay is α = e^g
//   gate_space::linear  the input is the decay α itself (what exact rational tests use: e^g is
//                       irrational for every rational g ≠ 0, so exact scalars reject log gates)
//
// Two ranges:
//   gate_range::decay       α ∈ (0, 1], i.e. a finite g ≤ 0: every gated model (§4, §5, §7). α > 0
//                           keeps every covariance leaf invertible (det α², §8) and is what e^g of
//                           a finite g gives; α ≤ 1 is fla's convention for trained gates
//                           (g = logsigmoid(·) ≤ 0) and what the stability arguments assume
//                           (non-expansive steps, ‖D‖ ≤ 1, docs/math.md).
//   gate_range::any_finite  any finite α or g: the dense filter's diagonal transition (§2 allows any
//                           K x K transition; a decay in (0, 1] is the models' practice, not a
//                           condition of the filter; models/dense.hpp).
// Each rule has one error text, so a message says the same thing whichever model reports it. The
// adjoint of the conversion, dL/dg = α dL/dα, is grad/gates.hpp.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
#include "kalman_oracle/tensor/validate.hpp"

namespace kalman_oracle {

/// How decays are given: fla's log-space gates g (decay α = e^g), or α itself.
enum class gate_space { log, linear };

/// Which gates a model accepts (see the top).
enum class gate_range { decay, any_finite };

/// α = e^g: the one conversion from a log gate to a decay. It also turns a sum of log gates G into
/// the decay over those tokens, e^G = Π e^g (the chunked forms' Γ, models/fixed_gain_chunked.hpp).
/// Exact scalars never get here: require_gates rejects log gates for them.
template <class T>
T decay_of_log_gate(const T& g) {
  if constexpr (scalar_traits<T>::is_exact) {
    throw std::logic_error("decay_of_log_gate: e^g over exact scalars (require_gates rejects log gates for them)");
  } else {
    using std::exp;
    return T(exp(g));
  }
}

/// The decay α of one gate value as given in `space`.
template <class T>
T decay_of_gate(const T& gate, gate_space space) {
  return space == gate_space::linear ? gate : decay_of_log_gate(gate);
}

/// Checks every gate of `g` (given in `space`) against `range`, and rejects log gates over exact
/// scalars. Each rule has one message:
///   "<g>: gate_space::log needs exp(g), which is irrational for rational g != 0; rule: exact scalars
///    take the decays alpha with gate_space::linear"
///   "<g>: element [i] is x; rule: decay alpha must be in (0, 1]"                (linear, decay)
///   "<g>: element [i] is x; rule: log gate g must be <= 0 (decay alpha = e^g in (0, 1])"  (log, decay)
///   "<g>: element [i] is x; rule: must be finite (no NaN or infinity)"          (every range)
template <class T>
void require_gates(const tensor<T>& g, gate_space space, gate_range range) {
  if (space == gate_space::log && scalar_traits<T>::is_exact)
    throw input_error(g.name() +
                      ": gate_space::log needs exp(g), which is irrational for rational g != 0; rule: "
                      "exact scalars take the decays alpha with gate_space::linear");
  if (range == gate_range::any_finite) {
    require_finite(g);
  } else if (space == gate_space::linear) {
    require_each(
        g, [](const T& alpha) { return alpha > 0 && alpha <= 1; }, "decay alpha must be in (0, 1]");
  } else {
    require_each(
        g, [](const T& x) { return x <= 0; }, "log gate g must be <= 0 (decay alpha = e^g in (0, 1])");
  }
}

}  // namespace kalman_oracle
