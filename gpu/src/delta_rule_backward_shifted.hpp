// The host launcher of the chunked delta-rule backward with its cotangent d_o placed off the 16-byte
// alignment that device allocations have (private to gpu/src and its tests): a caller's d_o may be a
// view into a larger tensor, and launch 4 then copies its rows 4 bytes at a time instead of 16
// (copy_rows_async, async_copy.cuh). gpu/tests/delta_rule_backward_gpu_test.cpp checks that both paths
// give the same bits.
#pragma once

#include "kalman_oracle/gpu/delta_rule_backward.hpp"

namespace kalman_oracle::gpu {

/// delta_rule_backward_host (host pointers in, host gradients out) with d_o uploaded d_o_shift floats
/// past the start of its device allocation.
void delta_rule_backward_host_shifted(const delta_rule_backward_problem& host, int d_o_shift);

}  // namespace kalman_oracle::gpu
