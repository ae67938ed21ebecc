// Options shared by every reference model.
#pragma once

namespace kalman_oracle {

/// How diagonal decays are given: fla's log-space gates g <= 0 (decay alpha = e^g), or alpha in
/// (0, 1] itself (linear: what exact rational tests use, since e^g is irrational).
enum class gate_space { log, linear };

struct run_options {
  /// Threads over the independent (batch, head) problems (KLA: batch rows). Results are
  /// bit-identical to one thread (detail/parallel_for.hpp).
  unsigned threads = 1;
  /// Also return the per-token internals (lambda_t, p̂_t, b̂_t, kappa_t or beta_t).
  bool internals = false;
};

}  // namespace kalman_oracle
