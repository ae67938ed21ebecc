// grad/common.hpp and grad/compare.hpp: named tensor sets, the broadcasting rule for gradients,
// and the comparisons the properties use.
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/compare.hpp"

using namespace kalman_oracle;
using R = rational;

TEST_CASE("grad: a broadcast parameter's gradient is summed over the broadcast axes") {
  // Given [3] (a per-channel parameter) read as [2, 4, 3]: each element sums 8 reads.
  broadcast_accumulator<R> acc("p", {3}, {2, 4, 3});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < 4; ++t)
      for (std::size_t c = 0; c < 3; ++c) acc.add(R(static_cast<long>(c + 1)), b, t, c);
  const tensor<R> g = acc.take();
  CHECK(g.name() == "p");
  CHECK(g.shape() == shape_t{3});
  CHECK(g.data() == std::vector<R>{8, 16, 24});
  // [2, 1, 3]: the middle axis is summed, the others kept.
  broadcast_accumulator<R> mid("p", {2, 1, 3}, {2, 4, 3});
  for (std::size_t t = 0; t < 4; ++t) mid.add(R(1), 1, t, 2);
  CHECK(mid.result()(1, 0, 2) == 4);
  CHECK(mid.result()(0, 0, 2) == 0);
  CHECK_THROWS_AS(broadcast_accumulator<R>("p", {5}, {2, 3}), input_error);
}

TEST_CASE("grad: named tensor sets, comparisons and inner products") {
  gradients<R> a{tensor<R>("q", {2}, std::vector<R>{1, -2}), tensor<R>("k", {1}, std::vector<R>{3})};
  gradients<R> b = a;
  CHECK(same_gradients(a, b));
  b.set(tensor<R>("k", {1}, std::vector<R>{R(7, 2)}));  // replaces k
  CHECK(b.items().size() == 2);
  CHECK(!same_gradients(a, b));
  const auto d = compare_gradients(a, b);
  CHECK(d.shapes_match);
  CHECK(d.max_abs_difference == R(1, 2));
  CHECK(d.worst == "k");
  CHECK(d.scale == R(7, 2));
  b.set(tensor<R>("v", {1}, std::vector<R>{0}));
  CHECK(!compare_gradients(a, b).shapes_match);  // a lacks v
  CHECK(compare_gradients(a, b).missing == "v");
  const named_tensors<R> u{tensor<R>("q", {2}, std::vector<R>{1, 1}), tensor<R>("x", {1}, std::vector<R>{5})};
  CHECK(abs_inner_product(a, u) == 3);
  CHECK_THROWS_AS((void)a.at("nothing"), std::out_of_range);
}

TEST_CASE("grad: a NaN anywhere makes the largest difference NaN, which no tolerance accepts") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const gradients<double> reference{tensor<double>("q", {3}, std::vector<double>{1, 2, 3})};
  // first, middle and last: a later finite difference must not replace it
  for (const std::size_t where : {0u, 1u, 2u}) {
    std::vector<double> values{1.5, 2, 3.25};
    values[where] = nan;
    const auto d = compare_gradients(gradients<double>{tensor<double>("q", {3}, values)}, reference);
    CHECK(d.max_abs_difference != d.max_abs_difference);
    CHECK_FALSE(d.max_abs_difference <= 1e300);
    CHECK(d.worst == "q");
  }
}
