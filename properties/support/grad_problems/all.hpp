// Every gradient problem the law family "grad" runs (properties/grad_exact.cpp, grad_mpfr.cpp): a
// new model family adds its header here and is checked by every law its capabilities admit
// (support/grad_laws.hpp).
#pragma once

#include <tuple>

#include "grad_laws.hpp"
#include "grad_problems/dense.hpp"
#include "grad_problems/fixed_gain.hpp"
#include "grad_problems/kdn.hpp"
#include "grad_problems/kla.hpp"

namespace kalman_oracle::testing {

using gradient_problems = std::tuple<fixed_gain_problem, kla_problem, kdn_problem, dense_problem>;
/// The problems with a parallel form, and those whose parallel form has its own adjoint.
using parallel_gradient_problems = problems_where_t<has_parallel_form, gradient_problems>;
using parallel_adjoint_gradient_problems = problems_where_t<has_parallel_adjoint, gradient_problems>;

// What each problem is known to have, so that a signature that drifts fails here rather than
// silently dropping the problem from a law's list.
static_assert(parallel_adjoint_gradient_problem<fixed_gain_problem> && parallel_adjoint_gradient_problem<kdn_problem>);
static_assert(parallel_gradient_problem<kla_problem>);
static_assert(sequential_gradient_problem<dense_problem>);

}  // namespace kalman_oracle::testing
