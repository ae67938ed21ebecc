"""A conformance command for a whole KDN through the PyTorch ops (docs/kernels.md, "PyTorch"):

    kalman-oracle conform --arithmetic bf16-tc --outputs o,final_state,readout_variance,final_covariance \\
        --models kdn_diagonal,kdn_isotropic --suite DIR -- python gpu/torch/kdn_conform_runner.py {fixture} {output}

reads a KDN fixture (python/kalman_oracle; BF16 inputs stay torch.bfloat16 for the gain op), runs
kalman_oracle_torch.kdn (the gain op, then the two-key memory op) on the GPU and writes o, final_state,
readout_variance and final_covariance (float32): a partial candidate. A varlen fixture (cu_seqlens) is
run sequence by sequence, each from its own priors, as `kalman-oracle-gpu run` does. With --gradients
(check with `conform --gradients-only`): the inputs as float32 leaves (the kernels widen 16-bit inputs
exactly), autograd from the fixture's cotangents, and the gradients the fixture certifies written
instead, as `kalman-oracle-gpu run --gradients`.
"""
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))
sys.path.insert(0, _HERE)

import kalman_oracle  # noqa: E402
from kalman_oracle import safetensors_file  # noqa: E402
from kalman_oracle_torch import kdn  # noqa: E402

FORMS = {"kdn_diagonal": "diagonal", "kdn_isotropic": "isotropic"}
OUTPUTS = ("o", "final_state", "readout_variance", "final_covariance")


def main(fixture_path, output_path, gradients=False):
    fx = kalman_oracle.load(fixture_path, torch=True)
    if fx.model not in FORMS:
        raise SystemExit(f"{fixture_path}: model {fx.model}: this runner runs {', '.join(FORMS)} fixtures only")
    x = {n: t.cuda() for n, t in fx.inputs.items() if n != "cu_seqlens"}
    if gradients:
        x = {n: t.float().requires_grad_() for n, t in x.items()}
    leaves = dict(x)
    v = x["v"]
    B, T, H, K = x["k"].shape
    HV = v.shape[2]
    cu = fx.inputs.get("cu_seqlens")
    bounds = [(int(cu[n]), int(cu[n + 1])) for n in range(len(cu) - 1)] if cu is not None else [(0, T)]
    per_sequence = []
    for n, (t0, t1) in enumerate(bounds):
        def tokens(name, *shape):
            # Per-token inputs may be stored broadcast (run_kdn_gain.cpp reads any numpy broadcast).
            return x[name].expand((B, T) + shape)[:, t0:t1]

        def prior(name):
            t = x.get(name)
            return t[n:n + 1] if t is not None and cu is not None and t.shape[0] > 1 else t

        L = (HV, K) if fx.model == "kdn_diagonal" else (HV,)
        per_sequence.append(kdn(FORMS[fx.model], tokens("q", H, K), tokens("k", H, K), tokens("v", HV, v.shape[3]),
                                tokens("g", HV, K), tokens("omega", *L), tokens("r", HV), x.get("mu"),
                                prior("initial_covariance"), prior("initial_state")))
    out = {"o": torch.cat([s[0] for s in per_sequence], dim=1),
           "final_state": torch.cat([s[1] for s in per_sequence], dim=0),
           "readout_variance": torch.cat([s[2] for s in per_sequence], dim=1),
           "final_covariance": torch.cat([s[3] for s in per_sequence], dim=0)}
    if gradients:
        pairs = [(out[n], fx.cotangents["d" + n].cuda().float()) for n in OUTPUTS if "d" + n in fx.cotangents]
        if not pairs:
            raise SystemExit(f"{fixture_path}: --gradients: the fixture has no cotangents")
        torch.autograd.backward([t for t, _ in pairs], [d for _, d in pairs])
        out = {"d" + n: t.grad for n, t in leaves.items() if "d" + n in fx.outputs and t.grad is not None}
    safetensors_file.write(output_path, {n: t.detach().cpu().numpy() for n, t in out.items()})


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--gradients"]
    if len(args) != 2:
        raise SystemExit("usage: kdn_conform_runner.py [--gradients] FIXTURE OUTPUT")
    main(args[0], args[1], gradients="--gradients" in sys.argv[1:])
