// Benchmark of the chunked delta-rule kernel (docs/kernels.md, "Chunked delta-rule memory"): the
// forward (o and the final state) at the shapes, B = 2, T = 16384, H = 16, K = V = 128 and
// B = 1, T = 8192, H = 96, K = V = 128, bfloat16 inputs, for DeltaNet (no gate), GDN (a gate per head)
// and KDA (a gate per channel), and at B = 2 a KDA whose log gates reach −4 (every chunk decaying
// strongly: the per-pair path of docs/kernels.md, "Strong decay"), one JSON line each: the time, the
// effective bandwidth (every input read once, every output written once, over the time) and its ratio
// to a device-to-device copy of the same bytes in the same run, the tensor-core rate (the chunked
// form's matrix-product FLOPs over the time) and its fraction of a bfloat16 cuBLAS product's rate
// measured in the same run; and each of the three launches timed alone (prepare_ms, state_ms,
// output_ms). Then the backward (delta_rule_backward.hpp; binary32, then with its products on the tensor
// cores in TF32: "operands") on the same inputs from random
// cotangents of o and the final state, every gradient: its time, its ratio to the forward's, and its
// five launches timed alone (launch_ms: operands, states, cotangents, value sums, channels). Last, GDN's
// varlen batch of the same 32768 tokens at H = 16 (B = 1, 16 sequences of 2048 ± d, d from 0 to 2047:
// lengths 1 to 4095, cu_seqlens; docs/kernels.md, "Variable-length batches"), to set beside B = 2.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "benches.hpp"
#include "device_data.hpp"
#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "matmul_baseline.hpp"

#ifdef KALMAN_ORACLE_DELTA_RULE_PREPARE_CLOCKS
namespace kalman_oracle::gpu {
void delta_rule_prepare_clocks_reset();
std::vector<long long> delta_rule_prepare_phase_cycles();
}  // namespace kalman_oracle::gpu
#endif

namespace kalman_oracle::gpu::bench {

void delta_rule_bench(int repeats, const cudaDeviceProp& prop) {
  // The tensor cores' rate on a large square bfloat16 product (cuBLAS), measured once in this run.
  const matmul_baseline matmul = bf16_matmul_baseline(8192, repeats);
  const std::string matmul_json = matmul.missing.empty() ? std::to_string(matmul.tflops) : "null";
  if (!matmul.missing.empty())
    std::fprintf(stderr, "gpu_bench: no bf16 matrix-product baseline: %s\n", matmul.missing.c_str());
  struct shape {
    int B, T, H;
    bool varlen = false;  // B = 1 holding varlen_lengths, GDN only
  };
  std::vector<long long> cu_seqlens{0};
  for (const long long d : {1, 65, 2047, 0, 64, 1000, 33, 0})
    for (const long long length : {2048 - d, 2048 + d}) cu_seqlens.push_back(cu_seqlens.back() + length);
  // The log gates drawn in [g_lo, 0]; the last variant (B = 2 only) decays strongly, about −2 a token:
  // every chunk past the factoring floor, per pair off the tensor cores (docs/kernels.md, "Strong decay").
  struct variant {
    delta_rule_gate gate;
    float g_lo;
    const char* name;
  };
  const variant variants[] = {{delta_rule_gate::none, -0.05f, "delta_net"},
                              {delta_rule_gate::per_head, -0.05f, "gdn"},
                              {delta_rule_gate::per_channel, -0.05f, "kda"},
                              {delta_rule_gate::per_channel, -4.0f, "kda_strong_decay"}};
  for (const shape s : {shape{2, 16384, 16}, shape{1, 8192, 96}, shape{1, 32768, 16, true}})
    for (const variant& x : variants) {
      if (x.g_lo < -1 && s.B != 2) continue;
      if (s.varlen && x.gate != delta_rule_gate::per_head) continue;
      const delta_rule_gate gate = x.gate;
      const std::size_t B = s.B, t = s.T, H = s.H, K = 128, V = 128;
      const input_dtype dtype = input_dtype::bf16;
      const std::size_t G = gate == delta_rule_gate::per_channel ? K : 1;
      const std::size_t N = s.varlen ? cu_seqlens.size() - 1 : B;       // sequences
      void* k = device_inputs(B * t * H * K, 1, -0.09f, 0.09f, dtype);  // |k| about 0.6
      void* q = device_inputs(B * t * H * K, 2, -1.0f, 1.0f, dtype);
      void* v = device_inputs(B * t * H * V, 3, -1.0f, 1.0f, dtype);
      void* beta = device_inputs(B * t * H, 4, 0.0f, 1.0f, dtype);
      void* g = device_inputs(B * t * H * G, 5, x.g_lo, 0.0f, dtype);
      float *o = nullptr, *final_state = nullptr;
      check(cudaMalloc(&o, B * t * H * V * 4), "cudaMalloc");
      check(cudaMalloc(&final_state, N * H * K * V * 4), "cudaMalloc");
      delta_rule_problem p;
      p.rule = delta_rule_kind::beta_form;
      p.gate = gate;
      p.batch = s.B;
      p.tokens = s.T;
      p.heads = s.H;
      p.key_dim = static_cast<int>(K);
      p.value_dim = static_cast<int>(V);
      p.dtype = dtype;
      p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
      if (s.varlen) p.cu_seqlens = cu_seqlens.data(), p.sequences = static_cast<int>(N);
      const long long tk = s.T, h = s.H, kk = static_cast<long long>(K);
      p.k = strided_view(k, tk * h * kk, h * kk, kk, 1);
      p.q = strided_view(q, tk * h * kk, h * kk, kk, 1);
      p.v = strided_view(v, tk * h * kk, h * kk, kk, 1);
      p.beta = strided_view(beta, tk * h, h, 1);
      p.g = gate == delta_rule_gate::per_channel ? strided_view(g, tk * h * kk, h * kk, kk, 1)
                                                 : strided_view(g, tk * h, h, 1);
      p.o = o;
      p.final_state = final_state;
      // The workspace allocated once, as a caller that runs the kernels repeatedly would.
      const std::size_t workspace_bytes = delta_rule_workspace_bytes(p);
      check(cudaMalloc(&p.workspace, workspace_bytes), "cudaMalloc");
      const std::size_t bytes = 2 * (B * t * H * (2 * K + V + 1 + G)) + 4 * (B * t * H * V + N * H * K * V);
      // Per chunk of C = 64 and value block: A and the scores (C·C·K each), W (C·C·K), U, WS, the
      // inter-chunk read and P·Ũ (C·C·V, C·K·V, C·K·V, C·C·V), the carry (K·C·V); 2 FLOPs a product.
      const double C = 64;
      double chunks = B * std::ceil(static_cast<double>(t) / C);  // every sequence's
      if (s.varlen) {
        chunks = 0;
        for (std::size_t n = 0; n < N; ++n)
          chunks += std::ceil(static_cast<double>(cu_seqlens[n + 1] - cu_seqlens[n]) / C);
      }
      const double flops = 2.0 * H * chunks * (3 * C * C * K + 2 * C * C * V + 3 * C * K * V);
      const double ms = median_ms(repeats, [&] { delta_rule_device(p); });
      check(cudaGetLastError(), "delta_rule kernel");
      // Where the time goes: each launch alone, on the workspace the full runs above left.
      double launch_ms[3];
      for (const delta_rule_launch which :
           {delta_rule_launch::prepare, delta_rule_launch::state, delta_rule_launch::output})
        launch_ms[static_cast<int>(which)] = median_ms(repeats, [&] { delta_rule_device_launch(p, which); });
      const double baseline = copy_ms(bytes, repeats);
#ifdef KALMAN_ORACLE_DELTA_RULE_PREPARE_CLOCKS
      // Where the prepare launch's time goes: one more launch with its marks (docs/kernels.md).
      delta_rule_prepare_clocks_reset();
      delta_rule_device_launch(p, delta_rule_launch::prepare);
      check(cudaDeviceSynchronize(), "prepare clocks");
      std::string phases;
      for (const long long cycles : delta_rule_prepare_phase_cycles())
        phases += (phases.empty() ? "" : ", ") + std::to_string(cycles);
      std::printf("{\"kernel\": \"delta_rule_prepare_phases\", \"gate\": %d, \"B\": %d, \"H\": %d, \"cycles\": [%s]}\n",
                  static_cast<int>(gate), s.B, s.H, phases.c_str());
#endif
      const std::string label = std::string(x.name) + (s.varlen ? "_varlen" + std::to_string(N) : "");
      const char* name = label.c_str();
      std::printf(
          "{\"device\": \"%s\", \"kernel\": \"delta_rule_chunked\", \"problem\": \"%s_B%d_T%d_H%d_K128_V128\", "
          "\"B\": %d, \"T\": %d, \"H\": %d, \"K\": 128, \"V\": 128, \"dtype\": \"bf16\", \"ms\": %.4f, "
          "\"prepare_ms\": %.4f, \"state_ms\": %.4f, \"output_ms\": %.4f, \"copy_ms\": %.4f, \"ratio_to_copy\": %.3f, "
          "\"GB_per_s\": %.1f, \"TFLOP_per_s\": %.2f, \"workspace_bytes\": "
          "%zu, \"bf16_matmul_TFLOP_per_s\": %s, \"fraction_of_matmul\": %.4f}\n",
          prop.name, name, s.B, s.T, s.H, s.B, s.T, s.H, ms, launch_ms[0], launch_ms[1], launch_ms[2], baseline,
          ms / baseline, static_cast<double>(bytes) / 1e6 / ms, flops / 1e9 / ms, workspace_bytes, matmul_json.c_str(),
          matmul.tflops > 0 ? flops / 1e9 / ms / matmul.tflops : 0.0);
      std::fflush(stdout);
      cudaFree(p.workspace);
      p.workspace = nullptr;

      // The backward (binary32, CUDA cores) from random cotangents of o and the final state: every
      // gradient, its workspace allocated once; each of its five launches timed alone too.
      delta_rule_backward_problem bp;
      bp.forward = p;
      void* d_o = device_inputs(B * t * H * V, 6, -1.0f, 1.0f, input_dtype::f32);
      void* d_final = device_inputs(N * H * K * V, 7, -1.0f, 1.0f, input_dtype::f32);
      bp.d_o = static_cast<const float*>(d_o);
      bp.d_final_state = static_cast<const float*>(d_final);
      std::vector<void*> gradients;
      const auto gradient = [&](std::size_t count) {
        void* x = nullptr;
        check(cudaMalloc(&x, count * 4), "cudaMalloc");
        gradients.push_back(x);
        return static_cast<float*>(x);
      };
      bp.dq = gradient(B * t * H * K), bp.dk = gradient(B * t * H * K), bp.dv = gradient(B * t * H * V);
      bp.dbeta = gradient(B * t * H), bp.dg = gradient(B * t * H * G), bp.d_initial_state = gradient(N * H * K * V);
      if (gate == delta_rule_gate::none) bp.dg = nullptr;
      const std::size_t backward_workspace = delta_rule_backward_workspace_bytes(bp);
      check(cudaMalloc(&bp.workspace, backward_workspace), "cudaMalloc");
      // Both arithmetics of the products (delta_rule_backward_operands), one after the other.
      for (const delta_rule_backward_operands operands :
           {delta_rule_backward_operands::f32, delta_rule_backward_operands::tf32}) {
        bp.operands = operands;
        const double backward_ms = median_ms(repeats, [&] { delta_rule_backward_device(bp); });
        check(cudaGetLastError(), "delta_rule backward kernels");
        std::string launches;
        for (const delta_rule_backward_launch which :
             {delta_rule_backward_launch::operands, delta_rule_backward_launch::states,
              delta_rule_backward_launch::cotangents, delta_rule_backward_launch::value_sums,
              delta_rule_backward_launch::channels})
          launches += (launches.empty() ? "" : ", ") +
                      std::to_string(median_ms(repeats, [&] { delta_rule_backward_device_launch(bp, which); }));
        std::printf(
            "{\"device\": \"%s\", \"kernel\": \"delta_rule_backward\", \"problem\": \"%s_B%d_T%d_H%d_K128_V128\", "
            "\"B\": %d, \"T\": %d, \"H\": %d, \"dtype\": \"bf16\", \"operands\": \"%s\", \"ms\": %.4f, "
            "\"forward_ms\": %.4f, \"backward_over_forward\": %.3f, \"launch_ms\": [%s], \"workspace_bytes\": %zu}\n",
            prop.name, name, s.B, s.T, s.H, s.B, s.T, s.H,
            operands == delta_rule_backward_operands::tf32 ? "tf32" : "f32", backward_ms, ms, backward_ms / ms,
            launches.c_str(), backward_workspace);
        std::fflush(stdout);
      }
      for (void* ptr : gradients) cudaFree(ptr);
      for (void* ptr :
           {k, q, v, beta, g, d_o, d_final, static_cast<void*>(o), static_cast<void*>(final_state), bp.workspace})
        cudaFree(ptr);
    }
}

}  // namespace kalman_oracle::gpu::bench
