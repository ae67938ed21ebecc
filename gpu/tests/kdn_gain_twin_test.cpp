// The KDN gain twin's own rules (label `twin`): what the conformance tests over the fixtures do not
// reach. exp_within_one_ulp is within one ulp of the correctly rounded e^x (MPFR) on a dense sample
// of binary32 arguments and at the edges; T = 0 returns the prior; sizes outside the kernels' range
// are refused by name; a variable-length batch (cu_seqlens) gives the bits of its sequences run one at
// a time, forward and backward (the backward's dμ and dτ: the sequences' own, summed in order). The
// twin's values are checked against the fixtures through `conform` (gpu/CMakeLists.txt:
// twin.kdn_gain.*), with a planted bug caught there.
#include <doctest/doctest.h>

#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kalman_oracle/gpu/kdn_gain_backward.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_backward_twin.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_twin.hpp"
#include "kdn_gain_cases.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

namespace {

/// e^x correctly rounded to binary32 (MPFR at 24 bits with the binary32 exponent range's subnormals).
float exp_correctly_rounded(float x) {
  mpfr_t y;
  mpfr_init2(y, 200);
  mpfr_set_flt(y, x, MPFR_RNDN);
  mpfr_exp(y, y, MPFR_RNDN);  // 200 bits: the rounding to binary32 below decides
  const float out = mpfr_get_flt(y, MPFR_RNDN);
  mpfr_clear(y);
  return out;
}

/// Distance in binary32 ulps between two finite non-negative floats (their bit patterns).
std::int64_t ulps(float a, float b) {
  std::int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return std::llabs(static_cast<long long>(x) - static_cast<long long>(y));
}

/// A strided input moved on by `steps` along `axis` (its first element then the old one's at that index).
strided_input moved(strided_input x, int axis, long long steps, input_dtype dtype) {
  if (x.data != nullptr)
    x.data = static_cast<const std::uint8_t*>(x.data) + steps * x.stride[axis] * (dtype == input_dtype::f32 ? 4 : 2);
  return x;
}

/// The gains' outputs, NaN until written.
struct gain_outputs {
  std::vector<float> predicted, gain, readout, final_covariance;
  gain_outputs(long long per_token, long long rows, long long finals)
      : predicted(per_token, NAN), gain(per_token, NAN), readout(rows, NAN), final_covariance(finals, NAN) {}
};

/// The gain path's gradients, NaN until written.
struct gain_gradients {
  std::vector<float> dq, dk, dg, domega, dr, dmu, dprior, dtau;
  gain_gradients(long long keys, long long gates, long long per_token, long long rows, long long heads,
                 long long finals)
      : dq(keys, NAN),
        dk(keys, NAN),
        dg(gates, NAN),
        domega(per_token, NAN),
        dr(rows, NAN),
        dmu(heads, NAN),
        dprior(finals, NAN),
        dtau(1, NAN) {}
  void point(kdn_gain_backward_problem& p) {
    p.dq = dq.data(), p.dk = dk.data(), p.dg = dg.data(), p.domega = domega.data(), p.dr = dr.data();
    p.dmu = dmu.data(), p.dinitial_covariance = dprior.data(), p.dtau = dtau.data();
  }
  /// (name, this one's, other's) for every gradient.
  std::vector<std::tuple<const char*, const std::vector<float>*, const std::vector<float>*>> named(
      const gain_gradients& other) const {
    return {{"dq", &dq, &other.dq},
            {"dk", &dk, &other.dk},
            {"dg", &dg, &other.dg},
            {"domega", &domega, &other.domega},
            {"dr", &dr, &other.dr},
            {"dmu", &dmu, &other.dmu},
            {"dinitial_covariance", &dprior, &other.dprior},
            {"dtau", &dtau, &other.dtau}};
  }
};

}  // namespace

TEST_SUITE("twin") {
  TEST_CASE("twin: a varlen batch of KDN gains gives the bits of its sequences run one at a time") {
    for_each_kdn_gain_varlen_case(900, [](const kdn_gain_case& c, kdn_gain_case_data& d) {
      const long long HV = c.H * c.group, L = c.form == kdn_form::diagonal ? c.K : 1;
      const long long rows = static_cast<long long>(c.T) * HV;
      gain_outputs packed(d.per_token, rows, d.finals), alone(d.per_token, rows, d.finals);
      kdn_gain_problem p = d.problem;
      p.predicted_covariance = packed.predicted.data(), p.gain = packed.gain.data();
      p.readout_variance = packed.readout.data(), p.final_covariance = packed.final_covariance.data();
      kdn_gain_twin(p);
      // Each sequence as a problem of its own: one row of its tokens, its own prior.
      for (std::size_t n = 0; n < c.lengths.size(); ++n) {
        const long long t0 = d.cu_seqlens[n];
        kdn_gain_problem q = d.problem;
        q.cu_seqlens = nullptr, q.sequences = 0;
        q.tokens = static_cast<int>(c.lengths[n]);
        for (strided_input* x : {&q.k, &q.q, &q.g, &q.omega, &q.r}) *x = moved(*x, 1, t0, c.dtype);
        q.initial_covariance = moved(q.initial_covariance, 0, static_cast<long long>(n), c.dtype);
        q.predicted_covariance = alone.predicted.data() + t0 * HV * L, q.gain = alone.gain.data() + t0 * HV * L;
        q.readout_variance = alone.readout.data() + t0 * HV;
        q.final_covariance = alone.final_covariance.data() + static_cast<long long>(n) * HV * L;
        kdn_gain_twin(q);
      }
      CHECK(first_difference("predicted_covariance", packed.predicted, alone.predicted) == "");
      CHECK(first_difference("gain", packed.gain, alone.gain) == "");
      CHECK(first_difference("readout_variance", packed.readout, alone.readout) == "");
      CHECK(first_difference("final_covariance", packed.final_covariance, alone.final_covariance) == "");
      // Every output written (equal NaNs would pass the comparisons above).
      for (const std::vector<float>* x : {&packed.predicted, &packed.gain, &packed.readout, &packed.final_covariance})
        CHECK(std::none_of(x->begin(), x->end(), [](float e) { return std::isnan(e); }));
    });
    // Bad offsets are refused naming the index and the rule, by the forward and the backward.
    kdn_gain_case_data d;
    make(d, kdn_gain_varlen_cases().front(), 1);
    std::vector<float> out(static_cast<std::size_t>(d.per_token + d.finals) * 2, NAN);
    kdn_gain_problem p = d.problem;
    p.readout_variance = out.data(), p.final_covariance = out.data() + d.per_token;
    std::vector<long long> offsets = d.cu_seqlens;
    std::swap(offsets[2], offsets[3]);
    p.cu_seqlens = offsets.data();
    CHECK_THROWS_WITH_AS(kdn_gain_twin(p), doctest::Contains("(rule: non-decreasing)"), std::invalid_argument);
    kdn_gain_backward_problem bp;
    bp.forward = p;
    CHECK_THROWS_WITH_AS(kdn_gain_backward_check(bp), doctest::Contains("(rule: non-decreasing)"),
                         std::invalid_argument);
  }

  TEST_CASE("twin: a varlen batch of KDN gain gradients gives its sequences' bits run one at a time") {
    std::mt19937 rng(77);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for_each_kdn_gain_varlen_case(950, [&](const kdn_gain_case& c, kdn_gain_case_data& d) {
      const long long HV = c.H * c.group, L = c.form == kdn_form::diagonal ? c.K : 1, N = c.lengths.size();
      const long long rows = static_cast<long long>(c.T) * HV, keys = static_cast<long long>(c.T) * c.H * c.K;
      // Every cotangent given (an absent one would leave some gradient terms untested).
      std::vector<float> d_gain(d.per_token), d_predicted(d.per_token), d_readout(rows), d_final(d.finals);
      for (std::vector<float>* x : {&d_gain, &d_predicted, &d_readout, &d_final})
        for (float& e : *x) e = unit(rng);
      gain_gradients packed(keys, rows * c.K, d.per_token, rows, HV, d.finals),
          alone(keys, rows * c.K, d.per_token, rows, HV, d.finals);
      kdn_gain_backward_problem bp;
      bp.forward = d.problem;
      bp.d_gain = d_gain.data(), bp.d_predicted_covariance = d_predicted.data();
      bp.d_readout_variance = d_readout.data(), bp.d_final_covariance = d_final.data();
      packed.point(bp);
      kdn_gain_backward_twin(bp);
      // Each sequence alone; its dμ and dτ summed over the sequences in order, from the first's.
      for (long long n = 0; n < N; ++n) {
        const long long t0 = d.cu_seqlens[n];
        kdn_gain_backward_problem q;
        q.forward = d.problem;
        q.forward.cu_seqlens = nullptr, q.forward.sequences = 0;
        q.forward.tokens = static_cast<int>(c.lengths[n]);
        for (strided_input* x : {&q.forward.k, &q.forward.q, &q.forward.g, &q.forward.omega, &q.forward.r})
          *x = moved(*x, 1, t0, c.dtype);
        q.forward.initial_covariance = moved(q.forward.initial_covariance, 0, n, c.dtype);
        q.d_gain = d_gain.data() + t0 * HV * L, q.d_predicted_covariance = d_predicted.data() + t0 * HV * L;
        q.d_readout_variance = d_readout.data() + t0 * HV, q.d_final_covariance = d_final.data() + n * HV * L;
        std::vector<float> dmu(HV), dtau(1);
        q.dq = alone.dq.data() + t0 * c.H * c.K, q.dk = alone.dk.data() + t0 * c.H * c.K;
        q.dg = alone.dg.data() + t0 * HV * c.K, q.domega = alone.domega.data() + t0 * HV * L;
        q.dr = alone.dr.data() + t0 * HV, q.dinitial_covariance = alone.dprior.data() + n * HV * L;
        q.dmu = dmu.data(), q.dtau = dtau.data();
        kdn_gain_backward_twin(q);
        for (long long h = 0; h < HV; ++h) alone.dmu[h] = n == 0 ? dmu[h] : add_rn(alone.dmu[h], dmu[h]);
        alone.dtau[0] = n == 0 ? dtau[0] : add_rn(alone.dtau[0], dtau[0]);
      }
      for (const auto& [name, x, y] : packed.named(alone)) {
        CHECK(first_difference(name, *x, *y) == "");
        CHECK(std::none_of(x->begin(), x->end(), [](float e) { return std::isnan(e); }));  // every gradient written
      }
    });
  }

  TEST_CASE("twin: exp_within_one_ulp is within one ulp of the correctly rounded e^x") {
    // Every 509th binary32 pattern from -104 up to 0 (the log gates' domain, subnormal results
    // included), every 509th from 0 to 88.7, and the edges.
    std::size_t checked = 0, exact = 0;
    std::int64_t worst = 0;
    float worst_at = 0;
    const auto check = [&](float x) {
      const float got = exp_within_one_ulp(x), want = exp_correctly_rounded(x);
      const std::int64_t d = ulps(got, want);
      exact += d == 0;
      if (d > worst) worst = d, worst_at = x;
      ++checked;
    };
    std::uint32_t lo, hi;
    const float minus_104 = -104.0f, plus_88 = 88.7f;
    std::memcpy(&lo, &minus_104, 4);
    for (std::uint32_t bits = 0x80000000u; bits <= lo; bits += 509) {
      float x;
      std::memcpy(&x, &bits, 4);
      check(x);
    }
    std::memcpy(&hi, &plus_88, 4);
    for (std::uint32_t bits = 0; bits <= hi; bits += 509) {
      float x;
      std::memcpy(&x, &bits, 4);
      check(x);
    }
    for (float x : {0.0f, -0.0f, -1.0f, -0x1p-149f, -103.97f, -87.3f, -0.5f, 1.0f, 88.72f, std::log(2.0f)}) check(x);
    INFO("checked ", checked, " arguments, ", exact, " correctly rounded; worst ", worst, " ulp at ", worst_at);
    CHECK(worst <= 1);
    CHECK(checked > 4000000);
    CHECK(exp_within_one_ulp(-105.0f) == 0.0f);
    CHECK(std::isinf(exp_within_one_ulp(90.0f)));
    CHECK(std::isnan(exp_within_one_ulp(NAN)));
  }

  TEST_CASE("twin: with T = 0 the KDN gains return the prior; sizes out of range are refused by name") {
    for (kdn_form form : {kdn_form::diagonal, kdn_form::isotropic}) {
      const bool diagonal = form == kdn_form::diagonal;
      const std::vector<float> prior{2.0f, 3.0f};
      std::vector<float> final_covariance(diagonal ? 2 : 1, NAN);
      kdn_gain_problem p;
      p.form = form;
      p.batch = 1;
      p.tokens = 0;
      p.heads = 1;
      p.key_dim = 2;
      p.tau = 0.5f;
      p.initial_covariance.data = prior.data();
      p.initial_covariance.stride[2] = diagonal ? 1 : 0;
      p.final_covariance = final_covariance.data();
      kdn_gain_twin(p);
      CHECK(final_covariance == std::vector<float>(prior.begin(), prior.begin() + (diagonal ? 2 : 1)));

      p.key_dim = 0;
      CHECK_THROWS_WITH_AS(kdn_gain_twin(p), doctest::Contains("K = 0"), std::invalid_argument);
      p.key_dim = kdn_gain_max_key_dim + 1;
      CHECK_THROWS_WITH_AS(kdn_gain_twin(p), doctest::Contains("K = 257"), std::invalid_argument);
      p.key_dim = 2;
      p.key_head_group = 3;
      CHECK_THROWS_WITH_AS(kdn_gain_twin(p), doctest::Contains("must divide HV"), std::invalid_argument);
      p.key_head_group = 1;
      p.tokens = 1;  // now the per-token inputs are needed
      CHECK_THROWS_WITH_AS(kdn_gain_twin(p), doctest::Contains("k is missing"), std::invalid_argument);
    }
  }
}
