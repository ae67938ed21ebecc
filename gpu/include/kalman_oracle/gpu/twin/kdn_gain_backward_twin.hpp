// The CPU twin of the KDN gain backward kernels (gpu/src/kdn_gain_backward.cu; docs/kernels.md,
// "KDN gain backward"): the kernels' schedule over the same arithmetic (models/kdn_gain_backward.cuh),
// so it computes the kernels' bits, which the GPU test checks. Per (sequence, head), a sequence a
// batch row or one of cu_seqlens' (delta_rule_sequence_list):
//   forward  p̂_t from the forward twin (unless given);
//   map      per chunk of 64 tokens and covariance lane, the tokens' affine maps composed from the
//            chunk's last token down (kdn_adjoint_then);
//   carry    y at the last chunk's end = the final covariance's cotangent; y_end[c − 1] = F_c(y_end[c]);
//   emit     each chunk from its y_end, token by token downwards: every gradient, and y_{t−1};
//            dμ's and dτ's terms summed per lane (lane l: channels l, l + 32, …, tokens downwards;
//            the isotropic head's scalars on lane 0 only), then the lanes' tree;
//   reduce   dq, dk over a key head's value heads in head order; per sequence dμ over its chunks and
//            dτ = 2 Σ / τ, Σ over its (head, chunk)s, in index order from +0; then each over the
//            sequences in order, from the first sequence's.
// The sums over channels are in kdn_channel_sum_twin's order.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "kalman_oracle/gpu/kdn_gain_backward.hpp"
#include "kalman_oracle/gpu/models/kdn_gain_backward.cuh"
#include "kalman_oracle/gpu/twin/kdn_gain_twin.hpp"

namespace kalman_oracle::gpu {

namespace detail {

/// The lanes' tree of warp_channel_sum over 32 lane partials (lane l takes lane l + o, o = 16 … 1).
inline float kdn_lane_tree_twin(std::array<float, kdn_lanes> partial) {
  for (int offset = kdn_lanes / 2; offset > 0; offset /= 2)
    for (int lane = 0; lane < offset; ++lane) partial[lane] = add_rn(partial[lane], partial[lane + offset]);
  return partial[0];
}

/// A cotangent's element, 0 where none is given.
inline float cotangent_or_zero(const float* x, long long at) { return x ? x[at] : 0.0f; }

/// One token's quantities that the map and the emit pass share, per channel and per head.
struct kdn_backward_token {
  std::vector<float> key, query, a, u, predicted, d_gain, d_predicted;  // per channel (p̂, dκ, dp̂: per lane)
  float r = 0, d_readout = 0, innovation = 0, innovation_adjoint = 0;   // diagonal: D, D̄
  float key2 = 0, queries = 0, a_head = 0, u_head = 0;                  // isotropic: n, Q, a, c
};

template <class In>
struct kdn_backward_reader {
  const kdn_gain_backward_problem& bp;
  const float* predicted;  // [B, T, HV, L]
  kdn_gain_reader<In> in;

  kdn_backward_token token(long long t) const {
    const kdn_gain_problem& p = bp.forward;
    const long long T = p.tokens, HV = p.heads, K = p.key_dim, L = kdn_gain_channels(p);
    const long long row = (in.b * T + in.t0 + t) * HV + in.h;
    const float mu = in.mu();
    kdn_backward_token x;
    x.r = in.r(t);
    x.d_readout = cotangent_or_zero(bp.d_readout_variance, row);
    for (long long i = 0; i < K; ++i) {
      x.key.push_back(in.k(t, i));
      x.query.push_back(in.q(t, i));
      x.a.push_back(kdn_decay_squared(in.g(t, i)));
    }
    for (long long i = 0; i < L; ++i) {
      x.predicted.push_back(predicted[row * L + i]);
      x.d_gain.push_back(cotangent_or_zero(bp.d_gain, row * L + i));
      x.d_predicted.push_back(cotangent_or_zero(bp.d_predicted_covariance, row * L + i));
    }
    const int k = static_cast<int>(K);
    if (p.form == kdn_form::diagonal) {
      for (long long i = 0; i < K; ++i) x.u.push_back(kdn_diagonal_information(mu, x.key[i], x.r));
      x.innovation =
          add_rn(x.r, kdn_channel_sum_twin(k, [&](int i) { return kdn_innovation_term(x.predicted[i], x.key[i]); }));
      x.innovation_adjoint = kdn_innovation_adjoint(
          kdn_channel_sum_twin(
              k, [&](int i) { return kdn_gain_adjoint_term(x.d_gain[i], x.predicted[i], x.key[i], x.innovation); }),
          x.innovation);
    } else {
      const float channels = static_cast<float>(K);
      x.key2 = kdn_channel_sum_twin(k, [&](int i) { return mul_rn(x.key[i], x.key[i]); });
      x.queries = kdn_channel_sum_twin(k, [&](int i) { return kdn_scaled_query_squared(p.tau, x.query[i]); });
      x.a_head = div_rn(kdn_channel_sum_twin(k, [&](int i) { return x.a[i]; }), channels);
      x.u_head = kdn_isotropic_information(mu, x.key2, channels, x.r);
    }
    return x;
  }

  /// p_{t−1} of lane i: the prior at t = 0, else the posterior of p̂_{t−1}.
  float previous_covariance(long long t, long long i, const kdn_backward_token* before) const {
    if (t == 0) return in.prior(i);
    return kdn_posterior(before->predicted[i], bp.forward.form == kdn_form::diagonal ? before->u[i] : before->u_head);
  }

  /// Token t's affine map of lane i.
  kdn_adjoint_affine step(const kdn_backward_token& x, long long i) const {
    if (bp.forward.form == kdn_form::diagonal)
      return kdn_diagonal_adjoint_step(bp.forward.tau, x.query[i], x.d_readout, x.key[i], x.a[i], x.predicted[i],
                                       x.u[i], x.d_gain[i], x.innovation, x.innovation_adjoint, x.d_predicted[i]);
    return kdn_isotropic_adjoint_step(x.d_readout, x.queries, x.key2, x.a_head, x.predicted[0], x.u_head, x.r,
                                      x.d_gain[0], x.d_predicted[0]);
  }
};

template <class In>
void kdn_gain_backward_twin_typed(const kdn_gain_backward_problem& bp) {
  const kdn_gain_problem& p = bp.forward;
  const long long B = p.batch, HV = p.heads, K = p.key_dim, L = kdn_gain_channels(p);
  const long long H = HV / p.key_head_group, group = p.key_head_group;
  const long long chunk = kdn_gain_backward_chunk_tokens;
  const long long N = p.cu_seqlens != nullptr ? p.sequences : B;
  const bool diagonal = p.form == kdn_form::diagonal;
  // The forward's p̂, unless given.
  std::vector<float> own_predicted;
  const float* predicted = bp.predicted_covariance;
  if (predicted == nullptr) {
    own_predicted.resize(static_cast<std::size_t>(B * p.tokens * HV * L));
    std::vector<float> readout(static_cast<std::size_t>(B * p.tokens * HV)),
        final_covariance(static_cast<std::size_t>(N * HV * L));
    kdn_gain_problem f = p;
    f.predicted_covariance = own_predicted.data();
    f.gain = nullptr;
    f.readout_variance = readout.data();
    f.final_covariance = final_covariance.data();
    kdn_gain_twin(f);
    predicted = own_predicted.data();
  }
  // dq, dk per value head when value heads share a key head (summed below), else in place.
  std::vector<float> q_parts, k_parts;
  if (group > 1) {
    q_parts.resize(static_cast<std::size_t>(B * p.tokens * HV * K));
    k_parts.resize(q_parts.size());
  }
  const std::vector<delta_rule_sequence> sequences = delta_rule_sequence_list(p);
  // dμ's and dτ's partials per (sequence, head, chunk).
  std::vector<std::vector<float>> mu_partial(sequences.size() * HV), tau_partial(mu_partial.size());
  const float channels = static_cast<float>(K);
  for (std::size_t n = 0; n < sequences.size(); ++n)
    for (long long h = 0; h < HV; ++h) {
      const delta_rule_sequence& sequence = sequences[n];
      const long long T = sequence.tokens, chunks = sequence.chunks;
      const kdn_backward_reader<In> rd{
          bp, predicted, kdn_gain_reader<In>{p, sequence.batch_row, h, sequence.first_token, sequence.state}};
      std::vector<float>& mu_of = mu_partial[n * HV + h];
      std::vector<float>& tau_of = tau_partial[n * HV + h];
      // map.
      std::vector<kdn_adjoint_affine> total(static_cast<std::size_t>(chunks * L));
      for (long long c = 0; c < chunks; ++c) {
        const long long first = c * chunk, end = std::min(T, first + chunk);
        for (long long t = end - 1; t >= first; --t) {
          const kdn_backward_token x = rd.token(t);
          for (long long i = 0; i < L; ++i) {
            const kdn_adjoint_affine s = rd.step(x, i);
            total[c * L + i] = t == end - 1 ? s : kdn_adjoint_then(total[c * L + i], s);
          }
        }
      }
      // carry.
      std::vector<float> y_end(static_cast<std::size_t>(chunks * L));
      for (long long i = 0; i < L; ++i) {
        float y = cotangent_or_zero(bp.d_final_covariance, (sequence.state * HV + h) * L + i);
        for (long long c = chunks - 1; c >= 0; --c) {
          y_end[c * L + i] = y;
          if (c > 0) y = kdn_adjoint_apply(total[c * L + i], y);
        }
      }
      // emit.
      for (long long c = 0; c < chunks; ++c) {
        const long long first = c * chunk, end = std::min(T, first + chunk);
        std::vector<float> y(y_end.begin() + c * L, y_end.begin() + (c + 1) * L);
        std::array<float, kdn_lanes> mu_lane{}, tau_lane{};
        for (long long t = end - 1; t >= first; --t) {
          const kdn_backward_token x = rd.token(t);
          std::optional<kdn_backward_token> before;
          if (t > 0) before = rd.token(t - 1);
          const long long token = sequence.batch_row * p.tokens + sequence.first_token + t;  // in [B, T]
          const long long row = token * HV + h;
          const long long key_row = group > 1 ? row : token * H + h / group;
          float* dq = group > 1 ? q_parts.data() : bp.dq;
          float* dk = group > 1 ? k_parts.data() : bp.dk;
          if (diagonal) {
            std::vector<float> r_terms(static_cast<std::size_t>(K));
            for (long long i = 0; i < K; ++i) {
              const kdn_diagonal_token_gradients gi = kdn_diagonal_token_adjoint(
                  y[i], p.tau, x.query[i], x.d_readout, x.key[i], x.a[i], x.predicted[i],
                  rd.previous_covariance(t, i, before ? &*before : nullptr), x.u[i], x.r, rd.in.mu(), x.d_gain[i],
                  x.innovation, x.innovation_adjoint, x.d_predicted[i]);
              dq[key_row * K + i] = gi.dq;
              dk[key_row * K + i] = gi.dk;
              bp.dg[row * K + i] = gi.dg;
              bp.domega[row * K + i] = gi.domega;
              r_terms[i] = gi.r_term;
              mu_lane[i % kdn_lanes] = add_rn(mu_lane[i % kdn_lanes], gi.mu_term);
              tau_lane[i % kdn_lanes] = add_rn(tau_lane[i % kdn_lanes], gi.tau_term);
              y[i] = gi.y_previous;
            }
            bp.dr[row] = add_rn(x.innovation_adjoint,
                                -kdn_channel_sum_twin(static_cast<int>(K), [&](int i) { return r_terms[i]; }));
          } else {
            const kdn_isotropic_token_gradients gh =
                kdn_isotropic_token_adjoint(y[0], x.d_readout, x.queries, x.key2, x.a_head, x.predicted[0],
                                            rd.previous_covariance(t, 0, before ? &*before : nullptr), x.u_head, x.r,
                                            rd.in.mu(), channels, x.d_gain[0], x.d_predicted[0]);
            for (long long i = 0; i < K; ++i) {
              dq[key_row * K + i] = kdn_isotropic_query_gradient(gh.readout_scale, p.tau, x.query[i]);
              dk[key_row * K + i] = mul_rn(add_rn(gh.n_bar, gh.n_bar), x.key[i]);
              bp.dg[row * K + i] = kdn_isotropic_gate_gradient(gh.a_bar, x.a[i], channels);
            }
            bp.domega[row] = gh.domega;
            bp.dr[row] = gh.dr;
            mu_lane[0] = add_rn(mu_lane[0], gh.mu_term);
            tau_lane[0] = add_rn(tau_lane[0], gh.tau_term);
            y[0] = gh.y_previous;
          }
        }
        mu_of.push_back(kdn_lane_tree_twin(mu_lane));
        tau_of.push_back(kdn_lane_tree_twin(tau_lane));
        if (c == 0)
          for (long long i = 0; i < L; ++i) bp.dinitial_covariance[(sequence.state * HV + h) * L + i] = y[i];
      }
      if (T == 0)
        for (long long i = 0; i < L; ++i) {
          const long long at = (sequence.state * HV + h) * L + i;
          bp.dinitial_covariance[at] = cotangent_or_zero(bp.d_final_covariance, at);
        }
    }
  // reduce.
  if (group > 1)
    for (long long row = 0; row < B * p.tokens * H; ++row)
      for (long long i = 0; i < K; ++i) {
        const long long bt = row / H, hk = row % H;
        float q = q_parts[((bt * HV) + hk * group) * K + i], k = k_parts[((bt * HV) + hk * group) * K + i];
        for (long long j = 1; j < group; ++j) {
          q = add_rn(q, q_parts[((bt * HV) + hk * group + j) * K + i]);
          k = add_rn(k, k_parts[((bt * HV) + hk * group + j) * K + i]);
        }
        bp.dq[row * K + i] = q;
        bp.dk[row * K + i] = k;
      }
  if (bp.dmu)
    for (long long h = 0; h < HV; ++h) {
      float total = 0.0f;
      for (std::size_t n = 0; n < sequences.size(); ++n) {
        float own = 0.0f;
        for (const float x : mu_partial[n * HV + h]) own = add_rn(own, x);
        total = n == 0 ? own : add_rn(total, own);
      }
      bp.dmu[h] = total;
    }
  if (bp.dtau) {
    float total = 0.0f;
    for (std::size_t n = 0; n < sequences.size(); ++n) {
      float sum = 0.0f;
      for (long long h = 0; h < HV; ++h)
        for (const float x : tau_partial[n * HV + h]) sum = add_rn(sum, x);
      const float own = div_rn(add_rn(sum, sum), p.tau);
      total = n == 0 ? own : add_rn(total, own);
    }
    bp.dtau[0] = total;
  }
}

}  // namespace detail

/// The twin on host pointers (kdn_gain_backward.hpp's problem).
inline void kdn_gain_backward_twin(const kdn_gain_backward_problem& problem) {
  kdn_gain_backward_check(problem);
  switch (problem.forward.dtype) {
    case input_dtype::f32: return detail::kdn_gain_backward_twin_typed<float>(problem);
    case input_dtype::bf16: return detail::kdn_gain_backward_twin_typed<bf16_bits>(problem);
    case input_dtype::f16: return detail::kdn_gain_backward_twin_typed<f16_bits>(problem);
  }
}

}  // namespace kalman_oracle::gpu
