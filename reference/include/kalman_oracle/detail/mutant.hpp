// Planted bugs for the meta-tests (docs/testing.md, "Meta-tests").
//
// A meta-test must show that a property can fail. Rather than keep broken copies of the code, each
// place where a classic bug can hide is marked once, in the real code, with
//
//     KALMAN_ORACLE_MUTANT(name, correct_expression, broken_expression)
//
// In every normal build the macro is exactly `correct_expression`. Only the meta-test binaries are
// compiled with KALMAN_ORACLE_ENABLE_MUTANTS; there the environment variable KALMAN_ORACLE_MUTANT
// names at most one site whose broken expression is used, and the meta-test expects the properties
// of its law family to find a counterexample. So the properties are run on the real code with one
// planted bug, never on a copy.
#pragma once

#ifdef KALMAN_ORACLE_ENABLE_MUTANTS
#include <cstdlib>
#include <string_view>

namespace kalman_oracle::detail {
/// True when the environment asks for the planted bug `name`.
inline bool mutant_active(std::string_view name) {
  static const char* const chosen = std::getenv("KALMAN_ORACLE_MUTANT");
  return chosen != nullptr && name == chosen;
}
}  // namespace kalman_oracle::detail

#define KALMAN_ORACLE_MUTANT(name, correct, broken) \
  (::kalman_oracle::detail::mutant_active(#name) ? (broken) : (correct))
#else
#define KALMAN_ORACLE_MUTANT(name, correct, broken) (correct)
#endif
