// Random KDN gain problems for the GPU test (kernel against twin, bit for bit): both forms, T at the
// 64-token chunk edges ± 1 and over several chunks, K below, at and above a warp (and at 256), grouped
// value heads, every input dtype, given and default μ and priors; and variable-length batches (one row of
// sequences with cu_seqlens, empty and one-token sequences among them, each with its own prior).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kla_cases.hpp"  // store, contiguous

namespace kalman_oracle::gpu::testing {

struct kdn_gain_case {
  kdn_form form;
  int B, T, H, group, K;
  input_dtype dtype;
  bool given;                        ///< μ and the prior covariance given (else the defaults K and 1)
  std::vector<long long> lengths{};  ///< varlen: the sequences' lengths (B = 1, T their sum), else empty
};

struct kdn_gain_case_data {
  std::vector<std::uint8_t> k, q, g, omega, r, mu, prior;
  std::vector<long long> cu_seqlens;  ///< varlen: the offsets the problem points at
  kdn_gain_problem problem;
  long long per_token = 0, finals = 0;  ///< output sizes: [B, T, HV(, K)] and [N, HV(, K)]
};

inline void make(kdn_gain_case_data& d, const kdn_gain_case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), gate(-1.0f, 0.0f), log_omega(-4.0f, -1.0f),
      log_r(-2.0f, 1.0f), log_prior(-1.0f, 1.0f);
  const long long B = c.B, T = c.T, H = c.H, HV = c.H * c.group, K = c.K;
  const long long N = c.lengths.empty() ? B : static_cast<long long>(c.lengths.size());  // the priors' rows
  const bool diagonal = c.form == kdn_form::diagonal;
  const long long L = diagonal ? K : 1;
  for (long long i = 0; i < B * T * H * K; ++i) store(d.k, c.dtype, unit(rng));
  for (long long i = 0; i < B * T * H * K; ++i) store(d.q, c.dtype, unit(rng));
  for (long long i = 0; i < B * T * HV * K; ++i) store(d.g, c.dtype, gate(rng));
  for (long long i = 0; i < B * T * HV * L; ++i) store(d.omega, c.dtype, std::pow(10.0f, log_omega(rng)));
  for (long long i = 0; i < B * T * HV; ++i) store(d.r, c.dtype, std::pow(10.0f, log_r(rng)));
  kdn_gain_problem& p = d.problem;
  p = {};
  p.form = c.form;
  p.batch = c.B;
  p.tokens = c.T;
  p.heads = static_cast<int>(HV);
  p.key_dim = c.K;
  p.key_head_group = c.group;
  p.dtype = c.dtype;
  p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
  p.k = contiguous(d.k, {B, T, H, K});
  p.q = contiguous(d.q, {B, T, H, K});
  p.g = contiguous(d.g, {B, T, HV, K});
  p.omega = diagonal ? contiguous(d.omega, {B, T, HV, K}) : contiguous(d.omega, {B, T, HV});
  p.r = contiguous(d.r, {B, T, HV});
  if (c.given) {
    for (long long i = 0; i < HV; ++i) store(d.mu, c.dtype, static_cast<float>(K) * (0.5f + 0.5f * (unit(rng) + 1)));
    for (long long i = 0; i < N * HV * L; ++i) store(d.prior, c.dtype, std::pow(10.0f, log_prior(rng)));
    p.mu = contiguous(d.mu, {HV});
    p.initial_covariance = diagonal ? contiguous(d.prior, {N, HV, K}) : contiguous(d.prior, {N, HV});
  }
  if (!c.lengths.empty()) {
    d.cu_seqlens = {0};
    for (const long long length : c.lengths) d.cu_seqlens.push_back(d.cu_seqlens.back() + length);
    p.cu_seqlens = d.cu_seqlens.data();
    p.sequences = static_cast<int>(N);
  }
  d.per_token = B * T * HV * L;
  d.finals = N * HV * L;
}

/// The variable-length cases: one row of sequences (lengths at the chunk edges, empty ones first, in
/// the middle and last), both forms, K below and above a warp, grouped value heads, binary32 and
/// bfloat16 inputs, given and default μ and priors.
inline std::vector<kdn_gain_case> kdn_gain_varlen_cases() {
  std::vector<kdn_gain_case> cases;
  const std::vector<std::vector<long long>> length_lists{{0, 1, 63, 0, 64, 65, 130, 0}, {200, 5, 129, 1}};
  for (kdn_form form : {kdn_form::diagonal, kdn_form::isotropic})
    for (const std::vector<long long>& lengths : length_lists)
      for (const auto& [H, group, K] : std::vector<std::array<int, 3>>{{2, 2, 7}, {1, 1, 128}})
        for (input_dtype dtype : {input_dtype::f32, input_dtype::bf16})
          for (bool given : {false, true}) {
            long long T = 0;
            for (const long long length : lengths) T += length;
            cases.push_back({form, 1, static_cast<int>(T), H, group, K, dtype, given, lengths});
          }
  return cases;
}

/// Every variable-length case (kdn_gain_varlen_cases), each with its own seed from `seed` on.
inline void for_each_kdn_gain_varlen_case(std::uint32_t seed,
                                          const std::function<void(const kdn_gain_case&, kdn_gain_case_data&)>& body) {
  for (const kdn_gain_case& c : kdn_gain_varlen_cases()) {
    CAPTURE(static_cast<int>(c.form));
    CAPTURE(c.T);
    CAPTURE(c.lengths.size());
    CAPTURE(c.K);
    CAPTURE(static_cast<int>(c.dtype));
    CAPTURE(c.given);
    kdn_gain_case_data d;
    make(d, c, seed++);
    body(c, d);
  }
}

/// Every case (the variable-length ones last), each with its own seed.
inline void for_each_kdn_gain_case(const std::function<void(const kdn_gain_case&, kdn_gain_case_data&)>& body) {
  std::uint32_t seed = 1;
  for (kdn_form form : {kdn_form::diagonal, kdn_form::isotropic})
    for (const auto& [B, T, H, group, K] : std::vector<std::array<int, 5>>{{1, 0, 1, 1, 16},
                                                                           {2, 1, 2, 1, 16},
                                                                           {1, 63, 1, 2, 32},
                                                                           {2, 64, 1, 1, 33},
                                                                           {1, 65, 2, 2, 7},
                                                                           {1, 130, 1, 1, 128},
                                                                           {2, 300, 2, 1, 64},
                                                                           {1, 129, 1, 1, 256}})
      for (input_dtype dtype : {input_dtype::f32, input_dtype::bf16, input_dtype::f16})
        for (bool given : {false, true}) {
          const kdn_gain_case c{form, B, T, H, group, K, dtype, given};
          CAPTURE(static_cast<int>(form));
          CAPTURE(B);
          CAPTURE(T);
          CAPTURE(H);
          CAPTURE(group);
          CAPTURE(K);
          CAPTURE(static_cast<int>(dtype));
          CAPTURE(given);
          kdn_gain_case_data d;
          make(d, c, seed++);
          body(c, d);
        }
  for_each_kdn_gain_varlen_case(seed, body);
}

}  // namespace kalman_oracle::gpu::testing
