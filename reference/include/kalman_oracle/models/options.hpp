// Options shared by every reference model's run (how gates are given is models/gates.hpp).
#pragma once

namespace kalman_oracle {

struct run_options {
  /// Threads over the independent (batch, head) problems (KLA: batch rows). Results are
  /// bit-identical to one thread (detail/parallel_for.hpp).
  unsigned threads = 1;
  /// Also return the per-token internals (lambda_t, p̂_t, b̂_t, kappa_t or beta_t).
  bool internals = false;
};

}  // namespace kalman_oracle
