"""What the sequence-model conformance runners share (delta_rule_conform_runner.py,
kdn_conform_runner.py; docs/kernels.md, "PyTorch"): the command line, a fixture's inputs on the GPU
(float32 leaves for --gradients: the kernels widen 16-bit inputs exactly, so the values are the
same), its token offsets (cu_seqlens) if it has them, and the candidate written: the outputs, or with
--gradients the gradients the fixture certifies, by torch.autograd from the fixture's cotangents."""
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))

import kalman_oracle  # noqa: E402
from kalman_oracle import safetensors_file  # noqa: E402


def arguments(runner):
    """(fixture, output, gradients, backward_operands) from sys.argv, or exit with the runner's usage.
    --backward-operands f32|tf32 (with --gradients; f32 by default): the delta-rule memory's backward in
    binary32, or its matrix products on the tensor cores with TF32 operands (check with
    --arithmetic tf32-tc)."""
    usage = f"usage: {runner} [--gradients [--backward-operands f32|tf32]] FIXTURE OUTPUT"
    args, operands = list(sys.argv[1:]), "f32"
    if "--backward-operands" in args:
        i = args.index("--backward-operands")
        if i + 1 >= len(args) or args[i + 1] not in ("f32", "tf32"):
            raise SystemExit(f"--backward-operands: rule: f32 or tf32\n{usage}")
        operands = args[i + 1]
        del args[i:i + 2]
    gradients = "--gradients" in args
    args = [a for a in args if a != "--gradients"]
    if len(args) != 2 or (operands != "f32" and not gradients):
        raise SystemExit(usage)
    return args[0], args[1], gradients, operands


class Fixture:
    """A fixture of one of `models` read for a runner: `fx` (kalman_oracle.load), `x` the inputs on
    the GPU (cu_seqlens left out; float32 leaves with gradients), `cu_seqlens` a varlen fixture's token
    offsets (int64 on the host) or None."""

    def __init__(self, path, models, gradients):
        self.path, self.gradients = path, gradients
        self.fx = kalman_oracle.load(path, torch=True)
        if self.fx.model not in models:
            raise SystemExit(f"{path}: model {self.fx.model}: this runner runs {', '.join(models)} fixtures only")
        self.x = {n: t.cuda() for n, t in self.fx.inputs.items() if n != "cu_seqlens"}
        if gradients:
            self.x = {n: t.float().requires_grad_() for n, t in self.x.items()}
        cu = self.fx.inputs.get("cu_seqlens")
        self.cu_seqlens = None if cu is None else cu.long()  # host offsets, as the ops take them

    def write(self, output_path, outputs):
        """The candidate: `outputs` (name -> tensor), or with gradients the certified gradients of the
        inputs after back-propagating the fixture's cotangents of `outputs`."""
        if self.gradients:
            pairs = [(outputs[n], self.fx.cotangents["d" + n].cuda().float()) for n in outputs
                     if "d" + n in self.fx.cotangents]
            if not pairs:
                raise SystemExit(f"{self.path}: --gradients: the fixture has no cotangents")
            torch.autograd.backward([t for t, _ in pairs], [d for _, d in pairs])
            outputs = {"d" + n: t.grad for n, t in self.x.items() if "d" + n in self.fx.outputs and t.grad is not None}
        safetensors_file.write(output_path, {n: t.detach().cpu().numpy() for n, t in outputs.items()})
