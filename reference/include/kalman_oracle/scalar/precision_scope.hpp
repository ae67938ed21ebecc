// Run-time precision for MPFR and MPFI values.
//
// Boost.Multiprecision 1.74 (Debian 12) sets the default precision in decimal digits and maps d
// digits to floor(1000 d / 301) + 1 or + 2 bits. A request for p bits therefore gets the smallest
// such precision that is >= p (256 requested -> 257 granted). Every bound in this project is
// computed from the granted precision (scalar_traits<T>::precision_bits()), never from the request,
// so the extra bit only makes the bounds a little tighter than they need to be.
//
// The default precision is a process-wide setting in this Boost version: set it before any worker
// thread starts and do not change it while threads compute.
#pragma once

#include <boost/multiprecision/detail/digits.hpp>
#include <stdexcept>
#include <string>

#include "kalman_oracle/scalar/types.hpp"

namespace kalman_oracle {

/// The decimal-digit setting whose binary precision is the smallest one >= `bits`.
inline unsigned digits10_for_bits(unsigned bits) {
  if (bits < 2) throw std::invalid_argument("precision: need at least 2 bits, got " + std::to_string(bits));
  unsigned d = 1;
  while (mp::detail::digits10_2_2(d) < bits) ++d;
  return d;
}

/// The binary precision that a request for `bits` is granted.
inline unsigned granted_bits(unsigned bits) {
  return static_cast<unsigned>(mp::detail::digits10_2_2(digits10_for_bits(bits)));
}

/// Sets the working precision of new MPFR and MPFI values for its lifetime, then restores it.
class precision_scope {
 public:
  explicit precision_scope(unsigned bits)
      : saved_mpfr_(mpfr_real::default_precision()), saved_mpfi_(mpfi_interval::default_precision()) {
    const unsigned d = digits10_for_bits(bits);
    mpfr_real::default_precision(d);
    mpfi_interval::default_precision(d);
  }
  precision_scope(const precision_scope&) = delete;
  precision_scope& operator=(const precision_scope&) = delete;
  ~precision_scope() {
    mpfr_real::default_precision(saved_mpfr_);
    mpfi_interval::default_precision(saved_mpfi_);
  }
  /// The binary precision new values get inside this scope.
  static unsigned bits() { return static_cast<unsigned>(mp::detail::digits10_2_2(mpfr_real::default_precision())); }

 private:
  unsigned saved_mpfr_;
  unsigned saved_mpfi_;
};

}  // namespace kalman_oracle
