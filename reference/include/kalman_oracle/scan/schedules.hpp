// Every prefix-scan schedule behind one switch (docs/math.md §8 fact 2: all of them equal the
// sequential fold over exact arithmetic; properties/scan_*.cpp test it, and the rounding bound of
// docs/math.md in MPFR).
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/scan/blelloch.hpp"
#include "kalman_oracle/scan/brent_kung.hpp"
#include "kalman_oracle/scan/chunked.hpp"
#include "kalman_oracle/scan/hillis_steele.hpp"
#include "kalman_oracle/scan/monoid.hpp"
#include "kalman_oracle/scan/sequential.hpp"
#include "kalman_oracle/scan/sklansky.hpp"

namespace kalman_oracle {

enum class scan_schedule { sequential, hillis_steele, blelloch, brent_kung, sklansky, chunked };

/// Every schedule, in declaration order.
inline constexpr std::array<scan_schedule, 6> all_scan_schedules = {
    scan_schedule::sequential, scan_schedule::hillis_steele, scan_schedule::blelloch,
    scan_schedule::brent_kung, scan_schedule::sklansky,      scan_schedule::chunked};

/// The chunk size the dispatchers use when none is given (a typical GPU chunk).
inline constexpr std::size_t default_scan_chunk_size = 64;

inline std::string to_string(scan_schedule schedule) {
  switch (schedule) {
    case scan_schedule::sequential: return "sequential";
    case scan_schedule::hillis_steele: return "hillis_steele";
    case scan_schedule::blelloch: return "blelloch";
    case scan_schedule::brent_kung: return "brent_kung";
    case scan_schedule::sklansky: return "sklansky";
    case scan_schedule::chunked: return "chunked";
  }
  throw std::invalid_argument("scan_schedule: unknown value");
}

/// inclusive[t] = x_t ∘ … ∘ x_0 by the chosen schedule. `chunk_size` is used by the chunked
/// schedule only (which rejects 0) and ignored by the others.
template <scan_monoid M>
std::vector<typename M::value_type> inclusive_scan(scan_schedule schedule, const M& monoid,
                                                   std::span<const typename M::value_type> xs,
                                                   std::size_t chunk_size = default_scan_chunk_size) {
  switch (schedule) {
    case scan_schedule::sequential: return sequential_inclusive_scan(monoid, xs);
    case scan_schedule::hillis_steele: return hillis_steele_inclusive_scan(monoid, xs);
    case scan_schedule::blelloch: return blelloch_inclusive_scan(monoid, xs);
    case scan_schedule::brent_kung: return brent_kung_inclusive_scan(monoid, xs);
    case scan_schedule::sklansky: return sklansky_inclusive_scan(monoid, xs);
    case scan_schedule::chunked: return chunked_inclusive_scan(monoid, xs, chunk_size);
  }
  throw std::invalid_argument("inclusive_scan: unknown scan_schedule");
}

/// exclusive[0] = identity, exclusive[t] = x_{t-1} ∘ … ∘ x_0 by the chosen schedule.
template <scan_monoid M>
std::vector<typename M::value_type> exclusive_scan(scan_schedule schedule, const M& monoid,
                                                   std::span<const typename M::value_type> xs,
                                                   std::size_t chunk_size = default_scan_chunk_size) {
  switch (schedule) {
    case scan_schedule::sequential: return sequential_exclusive_scan(monoid, xs);
    case scan_schedule::hillis_steele: return hillis_steele_exclusive_scan(monoid, xs);
    case scan_schedule::blelloch: return blelloch_exclusive_scan(monoid, xs);
    case scan_schedule::brent_kung: return brent_kung_exclusive_scan(monoid, xs);
    case scan_schedule::sklansky: return sklansky_exclusive_scan(monoid, xs);
    case scan_schedule::chunked: return chunked_exclusive_scan(monoid, xs, chunk_size);
  }
  throw std::invalid_argument("exclusive_scan: unknown scan_schedule");
}

}  // namespace kalman_oracle
