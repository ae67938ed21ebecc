// tensor/tensor.hpp and tensor/shape.hpp: named row-major tensors and their shapes.
#include <doctest/doctest.h>

#include <vector>

#include "kalman_oracle/tensor/shape.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

using namespace kalman_oracle;

TEST_CASE("tensor: row-major indexing and flat-offset inversion") {
  tensor<int> x("x", {2, 3, 4});
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<int>(i);
  CHECK(x(1, 2, 3) == 23);  // 1*12 + 2*4 + 3
  CHECK(x(0, 1, 0) == 4);
  CHECK(x.index_of(23) == shape_t{1, 2, 3});
  CHECK(to_string(x.shape()) == "[2, 3, 4]");
  CHECK(element_count(x.shape()) == 24);  // 2 * 3 * 4
  CHECK(element_count({}) == 1);          // a rank-0 tensor holds one element
  CHECK_THROWS_WITH_AS(tensor<int>("y", {2, 2}, std::vector<int>{1, 2, 3}), "y: shape [2, 2] holds 4 elements, got 3",
                       input_error);
}
