// The sequences of a chunked delta-rule problem and where their chunks are (docs/kernels.md, "Variable-length
// batches"): B rows of T tokens each, or one row holding N sequences back to back (fla's cu_seqlens). The
// kernels' chunk-parallel launches run one block a (value head, chunk) over every sequence's chunks at once,
// the state launch one block a (sequence, value head, value columns); `delta_rule_chunk_map` says which
// sequence a chunk belongs to, for the kernels (its table in device memory) and the twin (in host memory)
// alike: one spelling of the index arithmetic, tested on the host (gpu/tests/delta_rule_sequences_test.cpp).
#pragma once

#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"

namespace kalman_oracle::gpu {

/// Where sequence n starts: its first token in the batch row, its first chunk among the problem's chunks
/// (sequence by sequence, ⌈T_n / C⌉ each, C = delta_rule_chunk_tokens). Entry N holds the totals.
struct delta_rule_sequence_start {
  long long first_token = 0, first_chunk = 0;
};

/// One sequence: the row of the [B, T, …] inputs that holds it, its first token there, its length, its
/// index along the states' first axis (initial_state and final_state [N, HV, K, V]), its chunks.
struct delta_rule_sequence {
  long long batch_row = 0, first_token = 0, state = 0, first_chunk = 0;
  int tokens = 0, chunks = 0;
};

/// The problem's chunks, sequence by sequence. Without cu_seqlens (starts null) sequence n is batch row n,
/// T tokens from token 0, and every sequence has the same ⌈T / C⌉ chunks: no table to read.
struct delta_rule_chunk_map {
  const delta_rule_sequence_start* starts = nullptr;  ///< N + 1 entries (varlen), else null
  long long sequences = 0;                            ///< N (varlen) or B
  int tokens = 0;                                     ///< T
  long long total_chunks = 0;                         ///< every sequence's chunks

  KALMAN_ORACLE_HD delta_rule_sequence sequence(long long n) const {
    delta_rule_sequence s;
    // (Planted bug gpu_varlen_state_of_batch_row: a packed sequence's states indexed by its batch row.)
    s.state = KALMAN_ORACLE_MUTANT(gpu_varlen_state_of_batch_row, n, starts == nullptr ? n : 0);
    if (starts == nullptr) {
      s.batch_row = n;
      s.tokens = tokens;
      s.chunks = (tokens + delta_rule_chunk_tokens - 1) / delta_rule_chunk_tokens;
      s.first_chunk = n * s.chunks;
    } else {
      s.first_token = starts[n].first_token;
      s.tokens = static_cast<int>(starts[n + 1].first_token - s.first_token);
      s.first_chunk = starts[n].first_chunk;
      s.chunks = static_cast<int>(starts[n + 1].first_chunk - s.first_chunk);
    }
    return s;
  }

  /// The sequence that chunk g (0 <= g < total_chunks) belongs to: the largest n with first_chunk(n) <= g
  /// (an empty sequence shares its first chunk with the next one, so it is never the largest), by
  /// bisection over the table.
  KALMAN_ORACLE_HD long long sequence_of_chunk(long long g) const {
    if (starts == nullptr) {
      const long long each = (tokens + delta_rule_chunk_tokens - 1) / delta_rule_chunk_tokens;
      return g / each;
    }
    long long lo = 0, hi = sequences - 1;  // the answer is in [lo, hi]
    while (lo < hi) {
      const long long mid = (lo + hi + 1) / 2;
      // (Planted bug gpu_varlen_chunk_map_off_by_one: a chunk that starts a sequence given to the one before.)
      if (KALMAN_ORACLE_MUTANT(gpu_varlen_chunk_map_off_by_one, starts[mid].first_chunk <= g,
                               starts[mid].first_chunk < g))
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
};

// The helpers below take any problem with cu_seqlens, sequences, batch and tokens (delta_rule_problem,
// kdn_gain_problem: both chunk by 64 tokens).

/// The table of delta_rule_chunk_map for a problem with cu_seqlens (N + 1 entries), else empty.
template <class Problem>
std::vector<delta_rule_sequence_start> delta_rule_sequence_starts(const Problem& p) {
  std::vector<delta_rule_sequence_start> starts;
  if (p.cu_seqlens == nullptr) return starts;
  starts.resize(static_cast<std::size_t>(p.sequences) + 1);
  long long chunks = 0;
  for (int n = 0; n <= p.sequences; ++n) {
    starts[n] = {p.cu_seqlens[n], chunks};
    if (n < p.sequences)
      chunks += (p.cu_seqlens[n + 1] - p.cu_seqlens[n] + delta_rule_chunk_tokens - 1) / delta_rule_chunk_tokens;
  }
  return starts;
}

/// The map over `starts` (delta_rule_sequence_starts(p), or the same entries copied to the device).
template <class Problem>
delta_rule_chunk_map delta_rule_chunks(const Problem& p, const std::vector<delta_rule_sequence_start>& host_starts,
                                       const delta_rule_sequence_start* starts) {
  delta_rule_chunk_map map;
  map.tokens = p.tokens;
  if (p.cu_seqlens == nullptr) {
    map.sequences = p.batch;
    map.total_chunks =
        static_cast<long long>(p.batch) * ((p.tokens + delta_rule_chunk_tokens - 1) / delta_rule_chunk_tokens);
  } else {
    map.starts = starts;
    map.sequences = p.sequences;
    map.total_chunks = host_starts.back().first_chunk;
  }
  return map;
}

/// Every sequence of the problem in order (host): the batch rows, or cu_seqlens' N sequences.
template <class Problem>
std::vector<delta_rule_sequence> delta_rule_sequence_list(const Problem& p) {
  const std::vector<delta_rule_sequence_start> starts = delta_rule_sequence_starts(p);
  const delta_rule_chunk_map map = delta_rule_chunks(p, starts, starts.empty() ? nullptr : starts.data());
  std::vector<delta_rule_sequence> list;
  for (long long n = 0; n < map.sequences; ++n) list.push_back(map.sequence(n));
  return list;
}

}  // namespace kalman_oracle::gpu
