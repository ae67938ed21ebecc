// Input checks name the tensor, the index and the rule.
#include <doctest/doctest.h>

#include <cmath>

#include "kalman_oracle/tensor/validate.hpp"

using namespace kalman_oracle;

TEST_CASE("validate: messages name the tensor, the element and the rule") {
  tensor<double> r("r", {1, 2, 2}, std::vector<double>{1.0, 2.0, -0.5, 3.0});
  CHECK_THROWS_WITH_AS(require_positive(r, "observation noise"),
                       "r: element [0, 1, 0] is -0.5; rule: observation noise must be > 0", input_error);
  tensor<double> v("v", {2}, std::vector<double>{1.0, std::nan("")});
  CHECK_THROWS_WITH_AS(require_finite(v), "v: element [1] is nan; rule: must be finite (no NaN or infinity)",
                       input_error);
  tensor<double> w("omega", {2}, std::vector<double>{0.0, INFINITY});
  CHECK_THROWS_WITH_AS(require_nonnegative(w, "process noise"),
                       "omega: element [1] is inf; rule: must be finite (no NaN or infinity)", input_error);
  tensor<rational> ok("p0", {2}, std::vector<rational>{rational(1, 3), rational(2)});
  CHECK_NOTHROW(require_positive(ok, "prior covariance"));
  CHECK_THROWS_WITH_AS(require_shape(r, {1, 2, 3}), "r: shape [1, 2, 2], expected [1, 2, 3]", input_error);
  CHECK_THROWS_WITH_AS(require_tokens("q", 0), "q: T = 0 tokens; rule: a sequence needs at least one token",
                       input_error);
}
