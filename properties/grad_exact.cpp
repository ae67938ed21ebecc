// The exact gradient laws (docs/gradients.md; docs/math.md §9), law family "grad", each stated once for
// every gradient problem it applies to (properties/support/grad_problems/all.hpp), over rationals:
//
//   grad_<problem>_adjoint_equals_tape_exact          adjoint == reverse-mode tape of the sequential form
//   grad_<problem>_<parallel>_equals_sequential_exact adjoint == tape of the parallel form (chunked WY,
//                                                     scan): the parallel form has the sequential gradient
//   grad_<problem>_dual_exact                         ⟨adjoint, u⟩ == dual-number dL[u], random u
//   grad_<problem>_<parallel>_adjoint_exact           the parallel form's own adjoint == the sequential
//                                                     adjoint (fixed gain: grad/fixed_gain_chunked.hpp)
//
// <problem> is fixed_gain, kla, kdn or dense; <parallel> is chunked (fixed gain) or parallel (KLA,
// KDN); the dense filter has no parallel form. The MPFR bounds are in grad_mpfr.cpp.
#include "grad_problems/all.hpp"

namespace {

using namespace kalman_oracle;
using namespace kalman_oracle::testing;

/// The reference adjoint equals the tape over the case's forward form, entry for entry.
const auto adjoint_equals_tape = [](const auto& c) { return adjoint_equals_tape_exact(c.model, c.inputs, c.cot); };

}  // namespace

TEST_SUITE("grad") {
  TEST_CASE_TEMPLATE_DEFINE("grad: the adjoint equals the reverse-mode tape exactly (rationals)", Problem,
                            grad_adjoint_equals_tape_exact) {
    check_exact_gradient_law<Problem>("adjoint_equals_tape_exact", form_choice::sequential, adjoint_equals_tape);
  }
  TEST_CASE_TEMPLATE_APPLY(grad_adjoint_equals_tape_exact, gradient_problems);

  TEST_CASE_TEMPLATE_DEFINE("grad: the parallel form has the sequential gradient exactly (rationals)", Problem,
                            grad_parallel_equals_sequential_exact) {
    check_exact_gradient_law<Problem>(parallel_law_name<Problem>("equals_sequential_exact"), form_choice::parallel,
                                      adjoint_equals_tape);
  }
  TEST_CASE_TEMPLATE_APPLY(grad_parallel_equals_sequential_exact, parallel_gradient_problems);

  TEST_CASE_TEMPLATE_DEFINE("grad: <adjoint, u> equals the dual directional derivative exactly (rationals)", Problem,
                            grad_dual_exact) {
    check_exact_gradient_law<Problem>("dual_exact", form_choice::sequential, [](const auto& c) {
      return inner_product_matches_dual(c.model, c.inputs, c.direction, c.cot, 0);
    });
  }
  TEST_CASE_TEMPLATE_APPLY(grad_dual_exact, gradient_problems);

  TEST_CASE_TEMPLATE_DEFINE("grad: the parallel form's own adjoint equals the sequential adjoint exactly (rationals)",
                            Problem, grad_parallel_adjoint_exact) {
    check_exact_gradient_law<Problem>(parallel_law_name<Problem>("adjoint_exact"), form_choice::parallel,
                                      [](const auto& c) { return parallel_adjoint_matches<Problem>(c, 0); });
  }
  TEST_CASE_TEMPLATE_APPLY(grad_parallel_adjoint_exact, parallel_adjoint_gradient_problems);
}
