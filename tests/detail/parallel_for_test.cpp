// parallel_for: every index once, results independent of the thread count, deterministic errors.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/detail/parallel_for.hpp"

using kalman_oracle::detail::parallel_for;

TEST_CASE("parallel_for: each index runs once whatever the thread count") {
  for (unsigned threads : {0u, 1u, 2u, 3u, 8u, 100u}) {
    std::vector<int> hits(37, 0);
    parallel_for(hits.size(), threads, [&](std::size_t i) { hits[i] += static_cast<int>(i) + 1; });
    for (std::size_t i = 0; i < hits.size(); ++i) CHECK(hits[i] == static_cast<int>(i) + 1);
  }
  parallel_for(0, 4, [](std::size_t) { FAIL("no index to run"); });
}

TEST_CASE("parallel_for: the error of the smallest failing index is rethrown") {
  for (unsigned threads : {1u, 2u, 5u}) {
    CHECK_THROWS_WITH(parallel_for(20, threads,
                                   [](std::size_t i) {
                                     if (i == 7 || i == 13) throw std::runtime_error("index " + std::to_string(i));
                                   }),
                      "index 7");
  }
}
