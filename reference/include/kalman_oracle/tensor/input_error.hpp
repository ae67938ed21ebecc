// The one exception for bad input, of every model and reader: its message names the tensor, the
// index and the rule broken, e.g. "r: element [0, 3, 1] is -0.5; rule: observation noise must be
// > 0" (docs/math.md, "Bad input").
#pragma once

#include <stdexcept>

namespace kalman_oracle {

/// Thrown for any input that breaks a rule; the message names the tensor, the index and the rule.
class input_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace kalman_oracle
