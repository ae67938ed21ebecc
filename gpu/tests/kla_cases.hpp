// Random KLA problems for the GPU tests (kernel against twin, bit for bit): shapes at the chunk and
// block edges, every input dtype, static and per-token decays, given and default priors, and
// cotangents for the backward.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/kla_backward.hpp"
#include "kalman_oracle/gpu/kla_forward.hpp"

namespace kalman_oracle::gpu::testing {

struct kla_case {
  int B, T, M, S;
  input_dtype dtype;
  bool token_decay, priors;
};

/// Inputs of one case, stored in its dtype, with the strides the runner would give them.
struct kla_case_data {
  std::vector<std::uint8_t> q, k, v, Lambda, a_bar, p_bar, lambda_0, eta_0;
  std::vector<float> y, y_var, final_lambda, final_eta;
  kla_forward_problem problem;
};

/// Stores x in the case's dtype: binary32 as is, bfloat16 and binary16 by truncating a binary32
/// (any stored value is an input; the values stay in the inputs' domains).
inline void store(std::vector<std::uint8_t>& to, input_dtype d, float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if (d == input_dtype::f32) {
    to.insert(to.end(), reinterpret_cast<const std::uint8_t*>(&bits), reinterpret_cast<const std::uint8_t*>(&bits) + 4);
    return;
  }
  std::uint16_t half_bits;
  if (d == input_dtype::bf16) {
    half_bits = static_cast<std::uint16_t>(bits >> 16);
  } else {
    // binary16 by truncation of a normal value in binary16's range (|x| in [2^-14, 2^15)) or 0.
    const std::uint32_t sign = (bits >> 16) & 0x8000u;
    const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127;
    half_bits = x == 0.0f        ? static_cast<std::uint16_t>(sign)
                : exponent < -14 ? static_cast<std::uint16_t>(sign)  // below binary16's normals: 0
                                 : static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(exponent + 15) << 10 |
                                                              ((bits >> 13) & 0x3ffu));
  }
  to.push_back(static_cast<std::uint8_t>(half_bits & 0xff));
  to.push_back(static_cast<std::uint8_t>(half_bits >> 8));
}

inline strided_input contiguous(const std::vector<std::uint8_t>& bytes, std::initializer_list<long long> shape) {
  strided_input x;
  x.data = bytes.data();
  long long stride = 1;
  int axis = static_cast<int>(shape.size());
  for (auto it = shape.end(); it != shape.begin();) {
    --it;
    x.stride[--axis] = stride;
    stride *= *it;
  }
  return x;
}

inline void make(kla_case_data& d, const kla_case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), decay(0.5f, 1.0f), log_noise(-4.0f, -1.0f),
      log_precision(-1.0f, 1.0f);
  const long long B = c.B, T = c.T, M = c.M, S = c.S;
  for (long long i = 0; i < B * T * S; ++i) store(d.q, c.dtype, unit(rng));
  for (long long i = 0; i < B * T * S; ++i) store(d.k, c.dtype, unit(rng));
  for (long long i = 0; i < B * T * M; ++i) store(d.v, c.dtype, unit(rng));
  for (long long i = 0; i < B * T * M; ++i) store(d.Lambda, c.dtype, std::pow(10.0f, log_precision(rng)));
  const long long decays = c.token_decay ? B * T * M * S : M * S;
  for (long long i = 0; i < decays; ++i) store(d.a_bar, c.dtype, decay(rng));
  for (long long i = 0; i < decays; ++i) store(d.p_bar, c.dtype, std::pow(10.0f, log_noise(rng)));
  kla_forward_problem& p = d.problem;
  p = {};
  p.batch = c.B;
  p.tokens = c.T;
  p.channels = c.M;
  p.state = c.S;
  p.dtype = c.dtype;
  p.q = contiguous(d.q, {B, T, S});
  p.k = contiguous(d.k, {B, T, S});
  p.v = contiguous(d.v, {B, T, M});
  p.Lambda = contiguous(d.Lambda, {B, T, M});
  if (c.token_decay) {
    p.a_bar = contiguous(d.a_bar, {B, T, M, S});
    p.p_bar = contiguous(d.p_bar, {B, T, M, S});
  } else {
    p.a_bar = contiguous(d.a_bar, {1, 1, M, S});  // [M, S] broadcast: strides along B and T are 0
    p.p_bar = contiguous(d.p_bar, {1, 1, M, S});
    p.a_bar.stride[0] = p.a_bar.stride[1] = p.p_bar.stride[0] = p.p_bar.stride[1] = 0;
  }
  if (c.priors) {
    for (long long i = 0; i < B * M * S; ++i) store(d.lambda_0, c.dtype, std::pow(10.0f, log_precision(rng)));
    for (long long i = 0; i < B * M * S; ++i) store(d.eta_0, c.dtype, unit(rng));
    p.lambda_0 = contiguous(d.lambda_0, {B, M, S});
    p.eta_0 = contiguous(d.eta_0, {B, M, S});
  }
  d.y.assign(B * T * M, 0.0f);
  d.y_var.assign(B * T * M, 0.0f);
  d.final_lambda.assign(B * M * S, 0.0f);
  d.final_eta.assign(B * M * S, 0.0f);
}

inline void point_outputs(kla_forward_problem& p, std::vector<float>& y, std::vector<float>& y_var,
                          std::vector<float>& final_lambda, std::vector<float>& final_eta) {
  p.y = y.data();
  p.y_var = y_var.data();
  p.final_lambda = final_lambda.data();
  p.final_eta = final_eta.data();
}

/// "" when the two are equal bit for bit, else the first differing element.
inline std::string first_difference(const char* name, const std::vector<float>& got, const std::vector<float>& want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s[%zu]: kernel %a, twin %a", name, i, static_cast<double>(got[i]),
                    static_cast<double>(want[i]));
      return buf;
    }
  return "";
}

/// S = 1 … 256, T at the 16-token chunk (and 8-token half) edges ± 1 and T = 0, M not a multiple of
/// a block's channels, every dtype, static and per-token ā and p̄, given and default priors; the
/// forward's grouped split with every lane full (S = 8, 16, 64, 128, 256) and with lanes that have no
/// elements (S = 12: 3 of 4; 100: 25 of 32; 136, eight a lane: 17 of 32), and its other kernel
/// (S = 1, 3, 5, 17).
inline const kla_case kla_cases[] = {
    {1, 19, 7, 12, input_dtype::f32, false, true},  {2, 33, 5, 100, input_dtype::bf16, true, false},
    {1, 20, 3, 136, input_dtype::f16, false, true}, {2, 41, 16, 16, input_dtype::f32, false, true},
    {1, 15, 3, 1, input_dtype::f32, false, false},  {1, 16, 5, 5, input_dtype::f32, true, true},
    {3, 17, 70, 3, input_dtype::f32, false, true},  {1, 33, 2, 256, input_dtype::f32, false, true},
    {2, 100, 9, 64, input_dtype::bf16, true, true}, {1, 47, 33, 17, input_dtype::f16, false, false},
    {2, 0, 4, 8, input_dtype::f32, false, true},    {1, 300, 300, 16, input_dtype::bf16, false, true},
    {2, 64, 1, 128, input_dtype::f16, true, false}, {1, 7, 20, 16, input_dtype::f32, false, true},
    {2, 9, 40, 8, input_dtype::f32, true, false},
};

/// Cotangents for a case: dy, dy_var [B, T, M], dfinal_lambda, dfinal_eta [B, M, S] in [-1, 1].
struct kla_cotangents {
  std::vector<float> dy, dy_var, dfinal_lambda, dfinal_eta;
};

inline kla_cotangents make_cotangents(const kla_case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  kla_cotangents out;
  const long long per_token = static_cast<long long>(c.B) * c.T * c.M, state = static_cast<long long>(c.B) * c.M * c.S;
  for (long long i = 0; i < per_token; ++i) out.dy.push_back(unit(rng));
  for (long long i = 0; i < per_token; ++i) out.dy_var.push_back(unit(rng));
  for (long long i = 0; i < state; ++i) out.dfinal_lambda.push_back(unit(rng));
  for (long long i = 0; i < state; ++i) out.dfinal_eta.push_back(unit(rng));
  return out;
}

/// Runs f(case, its inputs, a seed for its cotangents) on every case of kla_cases, with the case's
/// sizes captured for doctest's messages.
template <class F>
void for_each_kla_case(std::uint32_t seed, F&& f) {
  for (const kla_case& c : kla_cases) {
    CAPTURE(c.B);
    CAPTURE(c.T);
    CAPTURE(c.M);
    CAPTURE(c.S);
    CAPTURE(static_cast<int>(c.dtype));
    CAPTURE(c.token_decay);
    kla_case_data d;
    make(d, c, seed++);
    f(c, d, seed++);
  }
}

}  // namespace kalman_oracle::gpu::testing
