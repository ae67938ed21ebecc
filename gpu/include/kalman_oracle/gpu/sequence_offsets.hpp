// A variable-length batch's token offsets (fla's cu_seqlens), as the chunked delta-rule and KDN gain
// kernels take them: N + 1 offsets 0 = cu_seqlens[0] <= … <= cu_seqlens[N] = T in host memory, with B = 1.
// One check for every kernel that takes them, naming the index and the rule an offset breaks.
#pragma once

#include <string>

namespace kalman_oracle::gpu {

/// Calls fail(message) (which throws) where `cu_seqlens` (null: one sequence a batch row) and `sequences`
/// break a rule: sequences is 0 without offsets; with them B = 1, N >= 1, the first offset 0, the offsets
/// non-decreasing, the last T.
template <class Fail>
void check_sequence_offsets(const long long* cu_seqlens, int sequences, int batch, int tokens, const Fail& fail) {
  if (cu_seqlens == nullptr) {
    if (sequences != 0)
      fail("sequences = " + std::to_string(sequences) +
           " without cu_seqlens (rule: sequences counts cu_seqlens' entries less one, 0 without it)");
    return;
  }
  if (batch != 1 || sequences < 1)
    fail("cu_seqlens needs B = 1 and sequences >= 1, got B = " + std::to_string(batch) +
         ", sequences = " + std::to_string(sequences));
  if (cu_seqlens[0] != 0) fail("cu_seqlens[0] = " + std::to_string(cu_seqlens[0]) + " (rule: it starts at 0)");
  for (int n = 0; n < sequences; ++n)
    if (cu_seqlens[n + 1] < cu_seqlens[n])
      fail("cu_seqlens[" + std::to_string(n + 1) + "] = " + std::to_string(cu_seqlens[n + 1]) + " < cu_seqlens[" +
           std::to_string(n) + "] = " + std::to_string(cu_seqlens[n]) + " (rule: non-decreasing)");
  if (cu_seqlens[sequences] != tokens)
    fail("cu_seqlens[" + std::to_string(sequences) + "] = " + std::to_string(cu_seqlens[sequences]) +
         " but T = " + std::to_string(tokens) + " (rule: the last offset is the row's length)");
}

}  // namespace kalman_oracle::gpu
