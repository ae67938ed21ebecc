// kalman-oracle-gpu: the GPU kernels (or their CPU twins) as a conformance command (docs/kernels.md,
// "Running a kernel on the fixtures"):
//
//   kalman-oracle-gpu run [--device twin|cuda] FIXTURE OUTPUT
//
// reads a fixture's inputs, runs the model's kernel on them and writes the candidate the file
// protocol expects (docs/conformance.md), so that
//
//   kalman-oracle conform --models kla --suite DIR
//       -- kalman-oracle-gpu run --device cuda {fixture} {output}
//
// checks a kernel on every fixture of its model. For KDN fixtures the kernels are the gain path
// (gain, covariance, readout variance: run_kdn_gain.hpp), a partial candidate checked with
// `conform --outputs final_covariance,readout_variance`; for the fixed-gain family's (gla, delta_net,
// gated_delta_net, kda) the chunked delta-rule memory's forward on tensor cores (run_delta_rule.hpp),
// checked with `conform --arithmetic bf16-tc --outputs o,final_state`. With `--gradients`, the
// backward (binary32; with `--operands tf32` the memory's matrix products on the tensor cores, checked
// with `--arithmetic tf32-tc`) from the fixture's cotangents, the gradients alone, checked with `conform
// --gradients-only`: the memory's for the fixed-gain family, the memory's then the gain path's for the
// KDNs. Exit 0 written, 2 bad input (a fixture of a model without a kernel, unreadable file, bad
// arguments), 1 a CUDA error.
//
//   kalman-oracle-gpu device        the CUDA device's name, or why there is none (exit 3)
//   kalman-oracle-gpu bench [--only mobius_scan|kla|kdn_gain|delta_rule] [--repeats N]
//                                   the kernels' benchmarks, JSON lines (run_benches.hpp; gpu_bench runs
//                                   the same; exit 1 without a device)
//   kalman-oracle-gpu validate --model kla [--shape B,T,M,S ...] [--sample-channels N] [--json]
//   kalman-oracle-gpu validate --model kdn_diagonal|kdn_isotropic [--shape B,T,H,K[/N] ...] [--sample-heads N]
//   kalman-oracle-gpu validate --model gla|delta_net|gated_delta_net|kda [--shape B,T,H,K[,V][/N] ...]
//                                   [--sample-heads N]
//                                   a kernel (forward and backward) at production shapes against the
//                                   binary64 reference run on the spot (validate_kla.hpp,
//                                   validate_kdn_gain.hpp, validate_delta_rule.hpp,
//                                   validate_delta_rule_backward.hpp; exit 1 on a failure)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "fixture_inputs.hpp"
#include "kalman_oracle/gpu/device.hpp"
#include "kalman_oracle/gpu/kla_forward.hpp"
#include "kalman_oracle/io/safetensors.hpp"
#include "run_delta_rule.hpp"
#include "run_kdn_gain.hpp"
#include "run_kla.hpp"
#include "validate_delta_rule.hpp"
#include "validate_kdn_gain.hpp"
#include "validate_kla.hpp"
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
#include "run_benches.hpp"
#endif

using namespace kalman_oracle;
using namespace kalman_oracle::gpu::tools;

namespace {

/// `device`: the device's name (exit 0), or why there is none (exit 3).
int print_device() {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
  std::string why;
  if (gpu::cuda_device_available(why)) {
    std::printf("%s\n", gpu::cuda_device_name().c_str());
    return 0;
  }
  std::printf("%s\n", why.c_str());
#else
  std::printf("this build has no CUDA kernels (no CUDA compiler was found)\n");
#endif
  return 3;
}

/// Runs a validation, mapping its errors to the documented exit codes.
template <class Run>
int validate_with_codes(Run&& run) {
  try {
    return run();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "kalman-oracle-gpu: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kalman-oracle-gpu: %s\n", e.what());
    return 1;
  }
}

/// Whether the kernels can run (or the twin was asked for); prints why not.
bool device_ready(bool twin) {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
  std::string why;
  if (!twin && !gpu::cuda_device_available(why)) {
    std::fprintf(stderr, "kalman-oracle-gpu: validate needs a CUDA device (or --device twin): %s\n", why.c_str());
    return false;
  }
#endif
  (void)twin;
  return true;
}

/// "a,b,c,d" as four integers (nothing after them), or false.
bool parse_four(const std::string& text, int& a, int& b, int& c, int& d) {
  char tail = 0;
  return std::sscanf(text.c_str(), "%d,%d,%d,%d%c", &a, &b, &c, &d, &tail) == 4;
}

/// `validate --model gla|delta_net|gated_delta_net|kda`: the shapes given (B,T,H,K or B,T,H,K,V; V = K
/// when not given; "/N" after them: B = 1 and the T tokens as N sequences, cu_seqlens), or the issue's
/// production shapes, T at the 64-token chunk edges ± 1, narrow heads, and varlen batches.
int run_validate_delta_rule(const std::vector<std::string>& shape_texts, delta_rule_validate_options options) {
  for (const std::string& text : shape_texts) {
    delta_rule_validate_shape n{};
    const std::size_t slash = text.find('/');
    const std::string sizes = text.substr(0, slash);
    char tail = 0;
    const int read = std::sscanf(sizes.c_str(), "%d,%d,%d,%d,%d%c", &n.B, &n.T, &n.H, &n.K, &n.V, &tail);
    if (read == 4) n.V = n.K;
    bool good = (read == 4 || read == 5) && n.B >= 1 && n.T >= 0 && n.H >= 1;
    if (slash != std::string::npos)
      good = good && std::sscanf(text.c_str() + slash + 1, "%d%c", &n.sequences, &tail) == 1 && n.sequences >= 1 &&
             n.B == 1;
    if (!good) {
      std::fprintf(stderr,
                   "kalman-oracle-gpu: --shape %s: want B,T,H,K or B,T,H,K,V with B, H >= 1, T >= 0, optionally "
                   "followed by /N (N >= 1 sequences in T tokens, B = 1)\n",
                   text.c_str());
      return 2;
    }
    options.shapes.push_back(n);
  }
  if (options.shapes.empty())
    options.shapes = {{2, 16384, 16, 128, 128},
                      {1, 8192, 96, 128, 128},
                      {2, 63, 2, 64, 64},
                      {2, 64, 2, 64, 64},
                      {2, 65, 2, 64, 64},
                      {1, 4095, 2, 128, 128},
                      {1, 4097, 2, 128, 128},
                      {1, 200, 3, 16, 48},
                      {1, 1, 2, 32, 32},
                      // The production shape's tokens as 16 sequences in one row; chunk-edge lengths.
                      {1, 32768, 16, 128, 128, 16},
                      {1, 1000, 2, 64, 64, 12}};
  if (!device_ready(options.twin)) return 2;
  return validate_with_codes([&] {
    for (const delta_rule_validate_shape& n : options.shapes) {  // the kernel's size rules, before any work
      gpu::delta_rule_problem sizes;
      sizes.batch = n.B, sizes.tokens = 0, sizes.heads = n.H, sizes.key_dim = n.K, sizes.value_dim = n.V;
      sizes.tau = 1;
      float unused = 0;
      sizes.final_state = &unused;
      gpu::delta_rule_check(sizes);
    }
    return validate_delta_rule(options);
  });
}

/// `validate --model kdn_*`: the shapes given (B,T,H,K each; "/N" after them: B = 1 and the T tokens as
/// N sequences, cu_seqlens), or the production shape, T at the 64-token chunk edges ± 1, K around a
/// warp, and packed rows (the production shape's tokens as 16 sequences).
int run_validate_kdn(const std::vector<std::string>& shape_texts, kdn_gain_validate_options options) {
  for (const std::string& text : shape_texts) {
    kdn_gain_validate_shape n{};
    const std::size_t slash = text.find('/');
    char tail = 0;
    bool good = parse_four(text.substr(0, slash), n.B, n.T, n.H, n.K) && n.B >= 1 && n.T >= 0 && n.H >= 1 && n.K >= 1 &&
                n.K <= gpu::kdn_gain_max_key_dim;
    if (slash != std::string::npos)
      good = good && std::sscanf(text.c_str() + slash + 1, "%d%c", &n.sequences, &tail) == 1 && n.sequences >= 1 &&
             n.sequences <= 65535 && n.B == 1;
    if (!good) {
      std::fprintf(stderr,
                   "kalman-oracle-gpu: --shape %s: want B,T,H,K with B, H >= 1, T >= 0, 1 <= K <= 256, optionally "
                   "followed by /N (1 <= N <= 65535 sequences in T tokens, B = 1)\n",
                   text.c_str());
      return 2;
    }
    options.shapes.push_back(n);
  }
  if (options.shapes.empty())
    options.shapes = {{2, 16384, 16, 128},     {2, 63, 2, 64},      {2, 64, 2, 64}, {2, 65, 2, 64},
                      {1, 4095, 2, 128},       {1, 4097, 2, 128},   {1, 300, 3, 7}, {1, 200, 2, 256},
                      {1, 32768, 16, 128, 16}, {1, 1000, 2, 64, 12}};
  if (!device_ready(options.twin)) return 2;
  return validate_with_codes([&] { return validate_kdn_gain(options); });
}

/// `validate`: the shapes given (B,T,M,S each), or the production shape and T at chunk edges ± 1.
int run_validate(const std::vector<std::string>& shape_texts, kla_validate_options options) {
  for (const std::string& text : shape_texts) {
    kla_validate_shape n{};
    if (!parse_four(text, n.B, n.T, n.M, n.S) || n.B < 1 || n.T < 0 || n.M < 1 || n.S < 1 ||
        n.S > gpu::kla_forward_max_state) {
      std::fprintf(stderr, "kalman-oracle-gpu: --shape %s: want B,T,M,S with B, M >= 1, T >= 0, 1 <= S <= 256\n",
                   text.c_str());
      return 2;
    }
    options.shapes.push_back(n);
  }
  if (options.shapes.empty())
    options.shapes = {{8, 4096, 2048, 16}, {2, 15, 40, 16},   {2, 16, 40, 16},  {2, 17, 40, 16},
                      {1, 4095, 64, 16},   {1, 4097, 64, 16}, {2, 300, 33, 64}, {1, 200, 4, 256}};
  if (!device_ready(options.twin)) return 2;
  return validate_with_codes([&] { return validate_kla(options); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"KalmanOracle's GPU kernels, or their CPU twins, run on fixtures"};
  app.require_subcommand(1);
  std::string fixture, output, device = "twin";
  CLI::App* run = app.add_subcommand("run", "Run a model's kernel on a fixture's inputs; write a candidate");
  run->add_option("--device", device, "twin (the kernel's CPU twin) or cuda (the kernel)")
      ->check(CLI::IsMember({"twin", "cuda"}));
  bool with_memory = false;
  run->add_flag("--with-memory", with_memory,
                "KDN fixtures: also the memory (o, final_state) by the chunked delta-rule kernel on tensor cores "
                "(check with --arithmetic bf16-tc)");
  bool gradients = false;
  run->add_flag(
      "--gradients", gradients,
      "fixed-gain and KDN fixtures: the backward (binary32, or see --operands; the KDNs': the memory's, "
      "then the gain path's) from the fixture's cotangents; the candidate holds the gradients only (check with "
      "--gradients-only)");
  std::string operands = "f32";
  run->add_option("--operands", operands,
                  "with --gradients: the memory backward's matrix products in f32 (binary32 on the CUDA cores, the "
                  "default; check with --arithmetic f32) or tf32 (on the tensor cores, TF32 operands; check with "
                  "--arithmetic tf32-tc)")
      ->check(CLI::IsMember({"f32", "tf32"}));
  run->add_option("fixture", fixture, "fixture (.safetensors)")->required();
  run->add_option("output", output, "candidate to write (.safetensors)")->required();
  app.add_subcommand("device", "Print the CUDA device, or why there is none (exit 3)");
  CLI::App* bench = app.add_subcommand(
      "bench", "The kernels' benchmarks: JSON lines, medians of CUDA-event timings beside a device copy (needs a GPU)");
  std::string bench_only;
  int bench_repeats = 20;
  bench->add_option("--only", bench_only, "one benchmark: mobius_scan, kla, kdn_gain or delta_rule (default: all)")
      ->check(CLI::IsMember({"mobius_scan", "kla", "kdn_gain", "delta_rule"}));
  bench->add_option("--repeats", bench_repeats, "timed runs a median is taken over (after 3 warm-ups)")
      ->check(CLI::Range(1, 100000));
  CLI::App* validate = app.add_subcommand(
      "validate", "A kernel at production shapes against the binary64 reference run on the spot (needs a GPU)");
  std::string validate_model;
  std::vector<std::string> shape_texts;
  kla_validate_options validate_options;
  validate
      ->add_option("--model", validate_model,
                   "the model (kla; kdn_diagonal or kdn_isotropic: the gain kernels; gla, delta_net, gated_delta_net "
                   "or kda: the chunked delta-rule memory under the bf16-tc tier, and its binary32 backward)")
      ->required()
      ->check(CLI::IsMember({"kla", "kdn_diagonal", "kdn_isotropic", "gla", "delta_net", "gated_delta_net", "kda"}));
  validate->add_option("--shape", shape_texts,
                       "B,T,M,S for kla, B,T,H,K[/N] for the KDNs, B,T,H,K[,V][/N] for the fixed-gain family (/N: "
                       "B = 1, the T tokens as N sequences; repeatable; default: the production shapes, chunk "
                       "edges and varlen batches)");
  validate->add_option("--sample-channels", validate_options.sample_channels, "kla: channels compared per shape")
      ->check(CLI::Range(1, 1 << 20));
  kdn_gain_validate_options kdn_validate;
  validate
      ->add_option("--sample-heads", kdn_validate.sample_heads,
                   "kdn_* and the fixed-gain family: heads compared per shape")
      ->check(CLI::Range(1, 1 << 20));
  validate->add_option("--seed", validate_options.seed, "input seed");
  validate->add_option("--threads", validate_options.threads,
                       "threads for the binary64 reference and bounds (0: all cores)");
  validate->add_flag("--json", validate_options.json, "one JSON object per shape and output");
  std::string validate_backward_operands = "f32";
  validate
      ->add_option("--backward-operands", validate_backward_operands,
                   "the fixed-gain family: the backward's products in f32 (binary32, the default; the sequential "
                   "adjoint's budget) or tf32 (on the tensor cores; the tf32-tc tier's budget of the chunked adjoint)")
      ->check(CLI::IsMember({"f32", "tf32"}));
  bool validate_strict = false;
  validate->add_flag("--strict", validate_strict,
                     "the fixed-gain family and the KDN memory: an output or gradient within its budget but beyond the "
                     "typical envelope of honest evaluations (SUSPECT) fails too (exit 1)");
  std::string validate_device = "cuda";
  validate->add_option("--device", validate_device, "cuda (the kernel) or twin (its CPU twin: small shapes)")
      ->check(CLI::IsMember({"twin", "cuda"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes are not the documented ones: help is 0, every other argument error 2.
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  if (app.got_subcommand("device")) return print_device();
  if (app.got_subcommand("bench")) {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    return gpu::bench::run_benches(bench_only, bench_repeats, "kalman-oracle-gpu bench");
#else
    std::fprintf(stderr, "kalman-oracle-gpu bench: this build has no CUDA kernels (no CUDA compiler was found)\n");
    return 1;
#endif
  }
  validate_options.twin = validate_device == "twin";
  if (app.got_subcommand("validate") && validate_model != "kla" && validate_model.rfind("kdn_", 0) != 0) {
    delta_rule_validate_options delta;
    delta.model = validate_model;
    delta.sample_heads = kdn_validate.sample_heads;
    delta.seed = validate_options.seed;
    delta.json = validate_options.json;
    delta.threads = validate_options.threads;
    delta.twin = validate_options.twin;
    delta.strict = validate_strict;
    if (validate_backward_operands == "tf32") delta.backward_operands = gpu::delta_rule_backward_operands::tf32;
    return run_validate_delta_rule(shape_texts, delta);
  }
  if (app.got_subcommand("validate") && validate_backward_operands != "f32") {
    std::fprintf(stderr,
                 "kalman-oracle-gpu validate: --backward-operands %s with --model %s; rule: the fixed-gain family "
                 "only (gla, delta_net, gated_delta_net, kda)\n",
                 validate_backward_operands.c_str(), validate_model.c_str());
    return 2;
  }
  if (app.got_subcommand("validate") && validate_model == "kla" && validate_strict) {
    std::fprintf(stderr,
                 "kalman-oracle-gpu validate: --strict with --model kla; rule: the typical envelope it acts on is the "
                 "fixed-gain family's and the KDN memory's backward\n");
    return 2;
  }
  if (app.got_subcommand("validate") && validate_model != "kla") {
    kdn_validate.form = validate_model == "kdn_diagonal" ? gpu::kdn_form::diagonal : gpu::kdn_form::isotropic;
    kdn_validate.seed = validate_options.seed;
    kdn_validate.json = validate_options.json;
    kdn_validate.threads = validate_options.threads;
    kdn_validate.twin = validate_options.twin;
    kdn_validate.strict = validate_strict;
    return run_validate_kdn(shape_texts, kdn_validate);
  }
  if (app.got_subcommand("validate")) return run_validate(shape_texts, validate_options);
  try {
    const safetensors::file f = safetensors::read(fixture);
    const std::string model = fixture_model(f, fixture);
    const executor on = device == "cuda" ? executor::cuda : executor::twin;
    const gpu::delta_rule_backward_operands backward_operands =
        operands == "tf32" ? gpu::delta_rule_backward_operands::tf32 : gpu::delta_rule_backward_operands::f32;
    if (operands != "f32" && !gradients)
      throw input_error(fixture + ": --operands " + operands +
                        " without --gradients; rule: it sets the backward's arithmetic");
    if (gradients && model == "kla")
      throw input_error(fixture +
                        ": --gradients: KLA's candidate holds its gradients already (run without "
                        "--gradients); rule: the fixed-gain family and the KDNs");
    if (model == "kla")
      safetensors::write_atomic(output, run_kla(f, fixture, on));
    else if (model == "kdn_diagonal" || model == "kdn_isotropic")
      safetensors::write_atomic(output, run_kdn_gain(f, fixture, on, with_memory, gradients, backward_operands));
    else if (model == "gla" || model == "delta_net" || model == "gated_delta_net" || model == "kda")
      // o, final_state (bf16-tc), or the gradients
      safetensors::write_atomic(output, run_delta_rule(f, fixture, on, gradients, backward_operands));
    else
      throw input_error(fixture + ": model " + model +
                        " has no GPU kernel yet (kernels: kla; the gain path of kdn_diagonal and kdn_isotropic; the "
                        "forward memory of gla, delta_net, gated_delta_net and kda)");
    return 0;
  } catch (const std::invalid_argument& e) {  // input_error, safetensors::format_error, a kernel's size rules
    std::fprintf(stderr, "kalman-oracle-gpu: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kalman-oracle-gpu: %s\n", e.what());
    return 1;
  }
}
