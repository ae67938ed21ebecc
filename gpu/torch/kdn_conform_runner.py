"""A conformance command for a whole KDN through the PyTorch ops (docs/kernels.md, "PyTorch"):

    kalman-oracle conform --arithmetic bf16-tc --outputs o,final_state,readout_variance,final_covariance \\
        --models kdn_diagonal,kdn_isotropic --suite DIR -- python gpu/torch/kdn_conform_runner.py {fixture} {output}

reads a KDN fixture (python/kalman_oracle; BF16 inputs stay torch.bfloat16 for the gain op), runs
kalman_oracle_torch.kdn (the gain op, then the two-key memory op) on the GPU and writes o, final_state,
readout_variance and final_covariance (float32): a partial candidate. A varlen fixture's sequences
(cu_seqlens) run in one call of each op, each from its own priors, as `kalman-oracle-gpu run` runs them.
With --gradients (check with `conform --gradients-only`): the inputs as float32 leaves, autograd from the fixture's
cotangents, and the gradients the fixture certifies written instead, as `kalman-oracle-gpu run
--gradients` (conform_runner.py); with --backward-operands tf32 the memory's backward on the tensor cores
with TF32 operands (check with `--arithmetic tf32-tc`), as `run --gradients --operands tf32`.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conform_runner import Fixture, arguments  # noqa: E402
from kalman_oracle_torch import kdn  # noqa: E402

FORMS = {"kdn_diagonal": "diagonal", "kdn_isotropic": "isotropic"}


def main(fixture_path, output_path, gradients, backward_operands):
    f = Fixture(fixture_path, FORMS, gradients)
    x = f.x
    B, T, H, K = x["k"].shape
    HV, V = x["v"].shape[2], x["v"].shape[3]
    L = (HV, K) if f.fx.model == "kdn_diagonal" else (HV,)

    def tokens(name, *shape):
        # Per-token inputs may be stored broadcast (run_kdn_gain.cpp reads any numpy broadcast).
        return x[name].expand((B, T) + shape)

    o, final_state, readout_variance, final_covariance = kdn(
        FORMS[f.fx.model], tokens("q", H, K), tokens("k", H, K), tokens("v", HV, V), tokens("g", HV, K),
        tokens("omega", *L), tokens("r", HV), x.get("mu"), x.get("initial_covariance"), x.get("initial_state"),
        cu_seqlens=f.cu_seqlens, backward_operands=backward_operands)
    f.write(output_path, {"o": o, "final_state": final_state, "readout_variance": readout_variance,
                          "final_covariance": final_covariance})

if __name__ == "__main__":
    main(*arguments("kdn_conform_runner.py"))
