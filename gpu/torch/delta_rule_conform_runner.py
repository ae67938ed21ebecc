"""A conformance command for the PyTorch delta-rule op (docs/kernels.md, "PyTorch"):

    kalman-oracle conform --arithmetic bf16-tc --outputs o,final_state --models gla,delta_net,gated_delta_net,kda \\
        --suite DIR -- python gpu/torch/delta_rule_conform_runner.py {fixture} {output}

reads a fixed-gain fixture (python/kalman_oracle; BF16 inputs stay torch.bfloat16, so the op's 16-bit
path is what runs), runs kalman_oracle_torch.delta_rule on the GPU and writes o and final_state
(float32): a partial candidate. A varlen fixture's sequences (cu_seqlens) run in one call, each from
its own initial state, as `kalman-oracle-gpu run` runs them. With --gradients (check with
`conform --gradients-only`): the inputs as float32 leaves (the kernels widen 16-bit inputs exactly, so
the values are the same), autograd from the fixture's cotangents of o and the final state, and the
gradients the fixture certifies written instead (float32), as `kalman-oracle-gpu run --gradients`
(conform_runner.py); with --backward-operands tf32 the backward's matrix products on the tensor cores
(check with `--arithmetic tf32-tc`), as `run --gradients --operands tf32`.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conform_runner import Fixture, arguments  # noqa: E402
from kalman_oracle_torch import delta_rule  # noqa: E402

MODELS = ("gla", "delta_net", "gated_delta_net", "kda")


def main(fixture_path, output_path, gradients, backward_operands):
    f = Fixture(fixture_path, MODELS, gradients)
    x = f.x
    k = x["k"]
    B, T, H, K = k.shape

    def tokens(t):
        # Every per-token input expanded to [B, T, ...]: a fixture may store any of them broadcast along
        # B or T, as kalman-oracle-gpu's reader (run_delta_rule.cpp) accepts.
        return None if t is None else t.expand((B, T) + tuple(t.shape[2:]))

    # A varlen fixture's sequences in one call (cu_seqlens), each from its own initial state.
    o, final_state = delta_rule(f.fx.model, tokens(x["q"]), tokens(k), tokens(x["v"]), tokens(x.get("g")),
                                tokens(x.get("beta")), initial_state=x.get("initial_state"), output_final_state=True,
                                cu_seqlens=f.cu_seqlens, backward_operands=backward_operands)
    f.write(output_path, {"o": o, "final_state": final_state})


if __name__ == "__main__":
    main(*arguments("delta_rule_conform_runner.py"))
