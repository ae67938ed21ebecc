"""A conformance command for a whole KDN through the PyTorch ops (docs/kernels.md, "PyTorch"):

    kalman-oracle conform --arithmetic bf16-tc --outputs o,final_state,readout_variance,final_covariance \\
        --models kdn_diagonal,kdn_isotropic --suite DIR -- python gpu/torch/kdn_conform_runner.py {fixture} {output}

reads a KDN fixture (python/kalman_oracle; BF16 inputs stay torch.bfloat16 for the gain op), runs
kalman_oracle_torch.kdn (the gain op, then the two-key memory op) on the GPU and writes o, final_state,
readout_variance and final_covariance (float32): a partial candidate. A varlen fixture (cu_seqlens) is
run sequence by sequence, each from its own priors (the KDN ops take no cu_seqlens yet; `kalman-oracle-gpu
run` passes them to the gain and memory kernels, and runs the gain backward sequence by sequence). With --gradients
(check with `conform --gradients-only`): the inputs as float32 leaves, autograd from the fixture's
cotangents, and the gradients the fixture certifies written instead, as `kalman-oracle-gpu run
--gradients` (conform_runner.py).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conform_runner import Fixture, arguments  # noqa: E402
from kalman_oracle_torch import kdn  # noqa: E402

FORMS = {"kdn_diagonal": "diagonal", "kdn_isotropic": "isotropic"}


def main(fixture_path, output_path, gradients):
    f = Fixture(fixture_path, FORMS, gradients)
    x = f.x
    B, T, H, K = x["k"].shape
    HV, V = x["v"].shape[2], x["v"].shape[3]
    L = (HV, K) if f.fx.model == "kdn_diagonal" else (HV,)
    per_sequence = []
    for n, (t0, t1) in enumerate(f.sequences):
        def tokens(name, *shape):
            # Per-token inputs may be stored broadcast (run_kdn_gain.cpp reads any numpy broadcast).
            return x[name].expand((B, T) + shape)[:, t0:t1]

        per_sequence.append(kdn(FORMS[f.fx.model], tokens("q", H, K), tokens("k", H, K), tokens("v", HV, V),
                                tokens("g", HV, K), tokens("omega", *L), tokens("r", HV), x.get("mu"),
                                f.prior("initial_covariance", n), f.prior("initial_state", n)))
    f.write(output_path, {"o": torch.cat([s[0] for s in per_sequence], dim=1),
                          "final_state": torch.cat([s[1] for s in per_sequence], dim=0),
                          "readout_variance": torch.cat([s[2] for s in per_sequence], dim=1),
                          "final_covariance": torch.cat([s[3] for s in per_sequence], dim=0)})


if __name__ == "__main__":
    main(*arguments("kdn_conform_runner.py"))
