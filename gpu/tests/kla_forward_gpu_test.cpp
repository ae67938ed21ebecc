// On the GPU (label `gpu`): the fused KLA forward kernel equals its CPU twin bit for bit on random
// problems (S from 1 to 256, T at the 16-token chunk edges ± 1, M not a multiple of a block's
// channels, ā and p̄ static or per token, given or default priors, F32, BF16 and F16 inputs), with
// the outputs poisoned with NaN first, and gives the same bits when run again. The fixtures are
// checked through `conform` (docs/kernels.md). Without a CUDA device: "SKIP: <why>".
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/kla_forward.hpp"
#include "kalman_oracle/gpu/twin/kla_forward_twin.hpp"
#include "kla_cases.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

TEST_CASE("gpu: the fused KLA forward kernel equals its twin bit for bit (outputs and checkpoints), run after run") {
  if (skip_without_device()) return;
  for_each_kla_case(1, [](const kla_case&, kla_case_data& d, std::uint32_t) {
    // The twin with checkpoints; the kernel without (run 0) and with them (run 1, training).
    const std::size_t checkpoints = static_cast<std::size_t>(kla_checkpoint_count(d.problem));
    std::vector<float> twin_checkpoint_lambda(checkpoints), twin_checkpoint_eta(checkpoints);
    kla_forward_problem twin = d.problem;
    point_outputs(twin, d.y, d.y_var, d.final_lambda, d.final_eta);
    twin.checkpoint_lambda = twin_checkpoint_lambda.data();
    twin.checkpoint_eta = twin_checkpoint_eta.data();
    kla_forward_twin(twin);
    for (int run = 0; run < 2; ++run) {
      CAPTURE(run);
      std::vector<float> y(d.y.size()), y_var(d.y.size()), final_lambda(d.final_lambda.size()),
          final_eta(d.final_eta.size()), checkpoint_lambda(checkpoints), checkpoint_eta(checkpoints);
      kla_forward_problem kernel = d.problem;
      point_outputs(kernel, y, y_var, final_lambda, final_eta);
      if (run == 1) {
        kernel.checkpoint_lambda = checkpoint_lambda.data();
        kernel.checkpoint_eta = checkpoint_eta.data();
      }
      kla_forward_host(kernel);
      if (run == 1) {
        CHECK(first_difference("checkpoint_lambda", checkpoint_lambda, twin_checkpoint_lambda) == "");
        CHECK(first_difference("checkpoint_eta", checkpoint_eta, twin_checkpoint_eta) == "");
      }
      CHECK(first_difference("y", y, d.y) == "");
      CHECK(first_difference("y_var", y_var, d.y_var) == "");
      CHECK(first_difference("final_lambda", final_lambda, d.final_lambda) == "");
      CHECK(first_difference("final_eta", final_eta, d.final_eta) == "");
    }
  });
}
