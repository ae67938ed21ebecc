// The chunked delta-rule kernel's scalar arithmetic, written once for the kernel
// (gpu/src/delta_rule_chunked.cu) and its CPU twin (twin/delta_rule_chunked_twin.hpp): the bfloat16
// rounding of a tensor-core operand and the per-token decays (docs/kernels.md, "Chunked delta-rule
// memory"). The matrix products themselves are the tensor cores' (the twin: binary32 sums of exact
// products, in index order), whose order of accumulation is not specified: kernel and twin agree to a
// bound, not bit for bit.
#pragma once

#include <cstdint>

#include "kalman_oracle/gpu/float_ops.cuh"
#include "kalman_oracle/gpu/input_element.cuh"

namespace kalman_oracle::gpu {

/// x rounded to bfloat16 (nearest, ties to even) and widened back: a tensor-core operand
/// (scalar/operand_rounding.hpp's round_to_precision(x, 8)). NaN stays NaN; infinities stay.
KALMAN_ORACLE_HD float round_to_bf16(float x) {
  std::uint32_t bits;
  __builtin_memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // inf, NaN
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  return float_from_bits(rounded);
}

/// The lowest summed log gate at which a chunk's decay ratios are factored, ρ_tm = e^{G_t} · e^{−G_m}
/// (A and the scores then come from the tensor cores' products of (Γk), (Γτq) and (Γ⁻¹w)); a chunk with
/// a channel below it takes ρ_tm = e^{G_t − G_m} per pair instead, as the reference's chunked form does
/// (models/fixed_gain_chunked.hpp, factored_log_decay_floor, which the twin checks this equals).
constexpr float delta_rule_factored_log_decay_floor = -64.0f;

/// e^x in binary32 (the decay of a summed log gate): the device's expf, the host's std::exp; the two
/// may differ in the last bit (one of the places kernel and twin part).
KALMAN_ORACLE_HD float exp_f32(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

}  // namespace kalman_oracle::gpu
