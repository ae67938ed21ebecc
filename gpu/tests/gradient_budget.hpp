// The twins' backward tests against the reference adjoint: the fixtures' gradient budget per element
// (docs/error-model.md, "Gradients: first-order running error"), 2 u × the first-order running error
// bound of the reference's own adjoint, u = 2^-24, plus the binary64 reference's own (u = 2^-53), and
// the worst share of it over the compared elements.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/scalar/running_error.hpp"

namespace kalman_oracle::gpu::testing {

/// The worst |twin − reference| / budget over the compared elements, and where.
struct worst_ratio {
  double ratio = 0;
  std::string where;
  void add(const std::string& name, std::size_t at, float twin, double ref, double error_units) {
    const double budget = 2 * 0x1p-24 * error_units + 2 * 0x1p-53 * error_units;
    const double diff = std::abs(static_cast<double>(twin) - ref);
    const double r = diff == 0 ? 0 : (budget > 0 ? diff / budget : HUGE_VAL);
    if (!(r <= ratio)) {  // NaN is the worst
      ratio = std::isnan(diff) ? HUGE_VAL : r;
      where = name + "[" + std::to_string(at) + "]: twin " + std::to_string(twin) + ", reference " +
              std::to_string(ref) + ", budget " + std::to_string(budget);
    }
  }
};

/// A gradient laid out as the reference's, element by element.
inline void add_elements(worst_ratio& worst, const char* name, const std::vector<float>& twin,
                         const tensor<double>& ref, const tensor<running_error<double>>& err) {
  for (std::size_t i = 0; i < twin.size(); ++i) worst.add(name, i, twin[i], ref.data()[i], err.data()[i].error());
}

/// A gradient given per key head (dq, dk [rows, H, K]) against the reference's per value head
/// ([rows, H·group, K], value head h·group + j reading key head h), summed over the group in binary64;
/// the bound adds the sum's terms' own bounds and magnitudes (its rounding is far below them).
inline void add_key_head_sums(worst_ratio& worst, const char* name, const std::vector<float>& twin,
                              const tensor<double>& ref, const tensor<running_error<double>>& err, std::size_t rows,
                              std::size_t H, std::size_t group, std::size_t K) {
  for (std::size_t row = 0; row < rows; ++row)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < K; ++i) {
        double value = 0, units = 0;
        for (std::size_t j = 0; j < group; ++j) {
          const std::size_t at = (row * H * group + h * group + j) * K + i;
          value += ref.data()[at];
          units += err.data()[at].error() + std::abs(ref.data()[at]);
        }
        const std::size_t at = (row * H + h) * K + i;
        worst.add(name, at, twin[at], value, units);
      }
}

}  // namespace kalman_oracle::gpu::testing
