// `kalman-oracle-gpu validate --model kla`, its second half: the KLA backward kernels at production
// shapes against the binary64 reference adjoint run on the spot (docs/kernels.md, "validate").
#pragma once

#include <vector>

#include "kalman_oracle/gpu/kla_forward.hpp"
#include "validate_kla.hpp"

namespace kalman_oracle::gpu::tools {

/// For the problem `p` (binary32 inputs on the host, contiguous, ā and p̄ static [M, S]; its outputs
/// are not read) and the sampled channels: cotangents drawn in [-1, 1], the backward kernels (or the
/// twin) on the whole problem, and the gradients at the sampled channels against the binary64
/// adjoint (grad/kla.hpp) of the sub-problem made of those channels, within the fixtures' gradient
/// budget (2u × the adjoint's first-order running error, u = 2^-24, plus 2 · 2^-53 × the same for
/// the binary64 reference: an estimate, labelled so). dq and dk sum over every channel, so they are
/// compared on the kernels run again on the sub-problem alone (or on the whole one where every
/// channel is sampled). Prints one line (or JSON object) per gradient under `label`; returns 0 when
/// every compared element is within its budget, 1 otherwise.
int validate_kla_gradients(const kla_validate_options& o, const kla_validate_shape& n, const kla_forward_problem& p,
                           const std::vector<int>& channels, const char* label);

}  // namespace kalman_oracle::gpu::tools
