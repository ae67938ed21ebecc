// Runs f(i) for i in [0, count) on up to `threads` threads, for the independent (batch, head)
// problems of the reference models. Each i writes only its own output slice, so the result is
// bit-identical to one thread whatever the thread count. If several calls throw, the exception of
// the smallest i is rethrown: the error, too, does not depend on the thread count.
//
// MPFR values: the working precision is process-wide (scalar/precision_scope.hpp); open the
// precision_scope before calling this, never inside f. MPFR keeps per-thread caches (pi, log 2,
// ...) that only their own thread can free; each worker thread frees its caches before it ends,
// so nothing leaks (LeakSanitizer runs in the debug-sanitize preset).
#pragma once

#include <mpfr.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace kalman_oracle::detail {

template <class F>
void parallel_for(std::size_t count, unsigned threads, F&& f) {
  const std::size_t workers = std::min<std::size_t>(std::max(1u, threads), count);
  std::vector<std::exception_ptr> errors(count);
  auto run = [&](std::size_t worker) {
    for (std::size_t i = worker; i < count; i += workers) {
      try {
        f(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  if (workers <= 1) {
    run(0);
  } else {
    std::vector<std::thread> pool;
    pool.reserve(workers);
    for (std::size_t w = 0; w < workers; ++w)
      pool.emplace_back([&run, w] {
        run(w);
        mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
      });
    for (auto& t : pool) t.join();
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace kalman_oracle::detail
