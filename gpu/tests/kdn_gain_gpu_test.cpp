// On the GPU (label `gpu`): the KDN gain kernels equal their CPU twin bit for bit on random problems
// (kdn_gain_cases.hpp: both forms, T at the chunk edges, K around a warp, grouped value heads, every
// input dtype, variable-length batches), with the outputs poisoned with NaN first, and give the same bits
// when run again.
// The fixtures are checked through `conform` (gpu.kdn_gain.*). Without a CUDA device: "SKIP: <why>".
#include <doctest/doctest.h>

#include <vector>

#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_twin.hpp"
#include "kdn_gain_cases.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

namespace {

struct gain_outputs {
  std::vector<float> predicted, gain, readout, final_covariance;
  gain_outputs(const kdn_gain_case_data& d, long long rows)
      : predicted(d.per_token), gain(d.per_token), readout(rows), final_covariance(d.finals) {}
  void point(kdn_gain_problem& p) {
    p.predicted_covariance = predicted.data();
    p.gain = gain.data();
    p.readout_variance = readout.data();
    p.final_covariance = final_covariance.data();
  }
};

}  // namespace

TEST_CASE("gpu: the KDN gain kernels equal their twin bit for bit, run after run") {
  if (skip_without_device()) return;
  for_each_kdn_gain_case([](const kdn_gain_case& c, kdn_gain_case_data& d) {
    const long long rows = static_cast<long long>(c.B) * c.T * c.H * c.group;
    gain_outputs twin(d, rows);
    kdn_gain_problem p = d.problem;
    twin.point(p);
    kdn_gain_twin(p);
    for (int run = 0; run < 2; ++run) {
      CAPTURE(run);
      gain_outputs kernel(d, rows);
      kdn_gain_problem q = d.problem;
      kernel.point(q);
      kdn_gain_host(q);
      CHECK(first_difference("predicted_covariance", kernel.predicted, twin.predicted) == "");
      CHECK(first_difference("gain", kernel.gain, twin.gain) == "");
      CHECK(first_difference("readout_variance", kernel.readout, twin.readout) == "");
      CHECK(first_difference("final_covariance", kernel.final_covariance, twin.final_covariance) == "");
    }
  });
}
