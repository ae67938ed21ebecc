// The gradient bounds in MPFR (docs/gradients.md "Bounds"; docs/math.md §9), law family "grad", each
// stated once for every gradient problem it applies to (properties/support/grad_problems/all.hpp),
// on cases drawn over doubles and lifted exactly:
//
//   grad_<problem>_tape_mpfr256                 |adjoint − tape| ≤ 2⁻²⁰⁰ max|tape|, the tape over the
//                                               sequential or (per case) the parallel form
//   grad_<problem>_dual_mpfr256                 |⟨adjoint, u⟩ − dL[u]| ≤ 2⁻²⁰⁰ Σ|adjoint||u|
//   grad_<problem>_central_difference_mpfr512   |⟨adjoint, u⟩ − CD(2⁻¹²⁰)| ≤ 2⁻²⁰⁰ (Σ|adjoint||u| + |L|)
//   grad_<problem>_<parallel>_adjoint_mpfr256   |parallel adjoint − sequential adjoint| ≤ 2⁻²⁰⁰ max|·|
//
// <problem> is fixed_gain, kla, kdn or dense; <parallel> is chunked (fixed gain). Each property
// prints the worst log2(error / bound) it saw. The exact laws are in grad_exact.cpp.
#include "grad_problems/all.hpp"

namespace {

using namespace kalman_oracle;
using namespace kalman_oracle::testing;

}  // namespace

TEST_SUITE("grad") {
  TEST_CASE_TEMPLATE_DEFINE("grad: the adjoint within 2^-200 of the tape, sequential and parallel forms (MPFR-256)",
                            Problem, grad_tape_mpfr256) {
    check_mpfr_gradient_law<Problem>("tape_mpfr256", form_choice::any, 256, [](const auto& c) {
      return adjoint_within_bound_of_tape(c.model, c.inputs, c.cot, -200);
    });
  }
  TEST_CASE_TEMPLATE_APPLY(grad_tape_mpfr256, gradient_problems);

  TEST_CASE_TEMPLATE_DEFINE("grad: <adjoint, u> within 2^-200 of the dual directional derivative (MPFR-256)", Problem,
                            grad_dual_mpfr256) {
    check_mpfr_gradient_law<Problem>("dual_mpfr256", form_choice::sequential, 256, [](const auto& c) {
      return inner_product_matches_dual(c.model, c.inputs, c.direction, c.cot, -200);
    });
  }
  TEST_CASE_TEMPLATE_APPLY(grad_dual_mpfr256, gradient_problems);

  TEST_CASE_TEMPLATE_DEFINE("grad: central differences agree within their truncation error (MPFR-512, h = 2^-120)",
                            Problem, grad_central_difference_mpfr512) {
    check_mpfr_gradient_law<Problem>("central_difference_mpfr512", form_choice::sequential, 512, [](const auto& c) {
      return central_difference_agrees(c.model, c.inputs, c.direction, c.cot, -120, -200);
    });
  }
  TEST_CASE_TEMPLATE_APPLY(grad_central_difference_mpfr512, gradient_problems);

  TEST_CASE_TEMPLATE_DEFINE("grad: the parallel form's own adjoint within 2^-200 of the sequential adjoint (MPFR-256)",
                            Problem, grad_parallel_adjoint_mpfr256) {
    check_mpfr_gradient_law<Problem>(parallel_law_name<Problem>("adjoint_mpfr256"), form_choice::parallel, 256,
                                     [](const auto& c) { return parallel_adjoint_matches<Problem>(c, -200); });
  }
  TEST_CASE_TEMPLATE_APPLY(grad_parallel_adjoint_mpfr256, parallel_adjoint_gradient_problems);
}
