// tensor/broadcast_view.hpp: numpy-style broadcasting of a tensor to a larger shape.
#include <doctest/doctest.h>

#include <vector>

#include "kalman_oracle/tensor/broadcast_view.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

using namespace kalman_oracle;

TEST_CASE("broadcast_view: pads on the left and stretches size-1 axes") {
  tensor<int> decay("a_bar", {2, 3}, std::vector<int>{1, 2, 3, 4, 5, 6});  // static [M, S]
  const broadcast_view<int> view(decay, {4, 5, 2, 3});                     // [B, T, M, S]
  CHECK(view(0, 0, 1, 2) == 6);
  CHECK(view(3, 4, 1, 2) == 6);
  CHECK(view(2, 1, 0, 1) == 2);
  tensor<int> per_head("r", {1, 1, 3}, std::vector<int>{7, 8, 9});
  const broadcast_view<int> r(per_head, {2, 5, 3});
  CHECK(r(1, 4, 2) == 9);
  tensor<int> full("v", {2, 5, 3});
  CHECK_NOTHROW(broadcast_view<int>(full, {2, 5, 3}));
  CHECK_THROWS_WITH_AS(broadcast_view<int>(full, {2, 6, 3}),
                       "v: shape [2, 5, 3] cannot broadcast to [2, 6, 3] (dimension 1 is 5, expected 6 or 1)",
                       input_error);
  CHECK_THROWS_WITH_AS(broadcast_view<int>(full, {5, 3}),
                       "v: shape [2, 5, 3] has more dimensions than the expected [5, 3]", input_error);
}
