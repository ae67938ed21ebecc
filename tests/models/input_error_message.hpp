// The message of the input_error that f throws, for the model tests' checks of error texts (the
// tensor, the index and the rule); "(no input_error)" when f throws none.
#pragma once

#include <string>

#include "kalman_oracle/tensor/input_error.hpp"

namespace kalman_oracle::testing {

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const input_error& e) {
    return e.what();
  }
  return "(no input_error)";
}

}  // namespace kalman_oracle::testing
