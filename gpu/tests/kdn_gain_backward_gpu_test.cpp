// On the GPU (label `gpu`): the KDN gain backward kernels equal their CPU twin bit for bit on random
// problems (kdn_gain_cases.hpp's: both forms, T at the chunk edges, K around a warp and at 256,
// grouped value heads, every input dtype, given and default μ and priors; variable-length batches), with
// random cotangents,
// some absent, with p̂ given and recomputed, the gradients poisoned with NaN first, and the same bits
// when run again. The twin is checked against the reference adjoint in CI
// (kdn_gain_backward_twin_test.cpp). Without a CUDA device: "SKIP: <why>".
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "kalman_oracle/gpu/kdn_gain_backward.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_backward_twin.hpp"
#include "kdn_gain_cases.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

namespace {

/// The gradients of one run.
struct gain_gradients {
  std::vector<float> dq, dk, dg, domega, dr, dmu, dprior, dtau;
  gain_gradients(const kdn_gain_case& c, const kdn_gain_case_data& d) {
    const long long HV = static_cast<long long>(c.H) * c.group, key_rows = static_cast<long long>(c.B) * c.T * c.H;
    dq.resize(key_rows * c.K);
    dk.resize(key_rows * c.K);
    dg.resize(static_cast<long long>(c.B) * c.T * HV * c.K);
    domega.resize(d.per_token);
    dr.resize(static_cast<long long>(c.B) * c.T * HV);
    dmu.resize(HV);
    dprior.resize(d.finals);
    dtau.resize(1);
  }
  void point(kdn_gain_backward_problem& p) {
    p.dq = dq.data(), p.dk = dk.data(), p.dg = dg.data(), p.domega = domega.data(), p.dr = dr.data();
    p.dmu = dmu.data(), p.dinitial_covariance = dprior.data(), p.dtau = dtau.data();
  }
};

}  // namespace

TEST_CASE("gpu: the KDN gain backward kernels equal their twin bit for bit, run after run") {
  if (skip_without_device()) return;
  std::uint32_t seed = 1000;
  for_each_kdn_gain_case([&](const kdn_gain_case& c, kdn_gain_case_data& d) {
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    const int present = static_cast<int>(rng() % 16);  // which cotangents are given
    const long long rows = static_cast<long long>(c.B) * c.T * c.H * c.group;
    std::vector<float> d_gain, d_predicted, d_readout, d_final;
    const auto fill = [&](std::vector<float>& v, long long n, bool given) {
      if (given)
        for (long long i = 0; i < n; ++i) v.push_back(unit(rng));
    };
    fill(d_gain, d.per_token, present & 1);
    fill(d_predicted, d.per_token, present & 2);
    fill(d_readout, rows, present & 4);
    fill(d_final, d.finals, present & 8);
    const auto or_null = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
    kdn_gain_backward_problem bp;
    bp.forward = d.problem;
    bp.d_gain = or_null(d_gain);
    bp.d_predicted_covariance = or_null(d_predicted);
    bp.d_readout_variance = or_null(d_readout);
    bp.d_final_covariance = or_null(d_final);
    gain_gradients twin(c, d);
    kdn_gain_backward_problem t = bp;
    twin.point(t);
    kdn_gain_backward_twin(t);
    // p̂ from the forward twin, for the runs that are given it.
    std::vector<float> predicted(d.per_token), readout(rows), final_covariance(d.finals);
    kdn_gain_problem f = d.problem;
    f.predicted_covariance = predicted.data();
    f.readout_variance = readout.data();
    f.final_covariance = final_covariance.data();
    kdn_gain_twin(f);
    for (int run = 0; run < 3; ++run) {
      CAPTURE(run);  // run 2: p̂ given
      CAPTURE(present);
      gain_gradients kernel(c, d);
      kdn_gain_backward_problem k = bp;
      if (run == 2) k.predicted_covariance = predicted.data();
      kernel.point(k);
      kdn_gain_backward_host(k);
      CHECK(first_difference("dq", kernel.dq, twin.dq) == "");
      CHECK(first_difference("dk", kernel.dk, twin.dk) == "");
      CHECK(first_difference("dg", kernel.dg, twin.dg) == "");
      CHECK(first_difference("domega", kernel.domega, twin.domega) == "");
      CHECK(first_difference("dr", kernel.dr, twin.dr) == "");
      CHECK(first_difference("dmu", kernel.dmu, twin.dmu) == "");
      CHECK(first_difference("dinitial_covariance", kernel.dprior, twin.dprior) == "");
      CHECK(first_difference("dtau", kernel.dtau, twin.dtau) == "");
    }
  });
}
