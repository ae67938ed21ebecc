"""A conformance command for the PyTorch delta-rule op (docs/kernels.md, "PyTorch"):

    kalman-oracle conform --arithmetic bf16-tc --outputs o,final_state --models gla,delta_net,gated_delta_net,kda \\
        --suite DIR -- python gpu/torch/delta_rule_conform_runner.py {fixture} {output}

reads a fixed-gain fixture (python/kalman_oracle; BF16 inputs stay torch.bfloat16, so the op's 16-bit
path is what runs), runs kalman_oracle_torch.delta_rule on the GPU and writes o and final_state
(float32): a partial candidate. A varlen fixture (cu_seqlens) is run sequence by sequence, each from
its own initial state, as `kalman-oracle-gpu run` does. With --gradients (check with
`conform --gradients-only`): the inputs as float32 leaves (the kernels widen 16-bit inputs exactly, so
the values are the same), autograd from the fixture's cotangents of o and the final state, and the
gradients the fixture certifies written instead (float32), as `kalman-oracle-gpu run --gradients`.
"""
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))
sys.path.insert(0, _HERE)

import kalman_oracle  # noqa: E402
from kalman_oracle import safetensors_file  # noqa: E402
from kalman_oracle_torch import delta_rule  # noqa: E402

MODELS = ("gla", "delta_net", "gated_delta_net", "kda")


def main(fixture_path, output_path, gradients=False):
    fx = kalman_oracle.load(fixture_path, torch=True)
    if fx.model not in MODELS:
        raise SystemExit(f"{fixture_path}: model {fx.model}: this runner runs {', '.join(MODELS)} fixtures only")
    x = {n: t.cuda() for n, t in fx.inputs.items() if n != "cu_seqlens"}
    if gradients:
        x = {n: t.float().requires_grad_() for n, t in x.items()}
    leaves = dict(x)
    k = x["k"]
    B, T, H, K = k.shape
    q = x["q"].expand(k.shape)
    v = x["v"]
    g, beta, initial = x.get("g"), x.get("beta"), x.get("initial_state")
    cu = fx.inputs.get("cu_seqlens")
    bounds = [(int(cu[n]), int(cu[n + 1])) for n in range(len(cu) - 1)] if cu is not None else [(0, T)]
    outputs, finals = [], []
    for n, (t0, t1) in enumerate(bounds):
        def tokens(t):
            return None if t is None else t.expand((B, T) + tuple(t.shape[2:]))[:, t0:t1]
        prior = None
        if initial is not None:
            prior = initial[n:n + 1] if cu is not None and initial.shape[0] > 1 else initial
        # Every per-token input through tokens(): a fixture may store any of them broadcast along B or
        # T, as kalman-oracle-gpu's reader (run_delta_rule.cpp) accepts.
        o, final_state = delta_rule(fx.model, tokens(q), tokens(k), tokens(v), tokens(g), tokens(beta),
                                    initial_state=prior, output_final_state=True)
        outputs.append(o)
        finals.append(final_state)
    out = {"o": torch.cat(outputs, dim=1), "final_state": torch.cat(finals, dim=0)}
    if gradients:
        pairs = [(out[n], fx.cotangents["d" + n].cuda().float()) for n in ("o", "final_state")
                 if "d" + n in fx.cotangents]
        if not pairs:
            raise SystemExit(f"{fixture_path}: --gradients: the fixture has no cotangents")
        torch.autograd.backward([t for t, _ in pairs], [d for _, d in pairs])
        out = {"d" + n: t.grad for n, t in leaves.items() if "d" + n in fx.outputs and t.grad is not None}
    safetensors_file.write(output_path, {n: t.detach().cpu().numpy() for n, t in out.items()})


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--gradients"]
    if len(args) != 2:
        raise SystemExit("usage: delta_rule_conform_runner.py [--gradients] FIXTURE OUTPUT")
    main(args[0], args[1], gradients="--gradients" in sys.argv[1:])
