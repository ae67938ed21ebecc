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
// checks a kernel on every fixture of its model. Exit 0 written, 2 bad input (a fixture of a model
// without a kernel, unreadable file, bad arguments), 1 a CUDA error.
//
//   kalman-oracle-gpu device        the CUDA device's name, or why there is none (exit 3)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "fixture_inputs.hpp"
#include "kalman_oracle/gpu/device.hpp"
#include "kalman_oracle/io/safetensors.hpp"
#include "run_kla.hpp"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"KalmanOracle's GPU kernels, or their CPU twins, run on fixtures"};
  app.require_subcommand(1);
  std::string fixture, output, device = "twin";
  CLI::App* run = app.add_subcommand("run", "Run a model's kernel on a fixture's inputs; write a candidate");
  run->add_option("--device", device, "twin (the kernel's CPU twin) or cuda (the kernel)")
      ->check(CLI::IsMember({"twin", "cuda"}));
  run->add_option("fixture", fixture, "fixture (.safetensors)")->required();
  run->add_option("output", output, "candidate to write (.safetensors)")->required();
  app.add_subcommand("device", "Print the CUDA device, or why there is none (exit 3)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes are not the documented ones: help is 0, every other argument error 2.
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  if (app.got_subcommand("device")) return print_device();
  try {
    const safetensors::file f = safetensors::read(fixture);
    const std::string model = fixture_model(f, fixture);
    const executor on = device == "cuda" ? executor::cuda : executor::twin;
    if (model != "kla") throw input_error(fixture + ": model " + model + " has no GPU kernel yet (kernels: kla)");
    safetensors::write_atomic(output, run_kla(f, fixture, on));
    return 0;
  } catch (const std::invalid_argument& e) {  // input_error, safetensors::format_error, a kernel's size rules
    std::fprintf(stderr, "kalman-oracle-gpu: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kalman-oracle-gpu: %s\n", e.what());
    return 1;
  }
}
