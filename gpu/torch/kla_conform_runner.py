"""A conformance command for the PyTorch op (docs/kernels.md, "PyTorch"):

    kalman-oracle conform --models kla --suite DIR -- python gpu/torch/kla_conform_runner.py {fixture} {output}

reads a KLA fixture (python/kalman_oracle), runs kalman_oracle_torch.kla on the GPU, back-propagates
the fixture's cotangents through torch.autograd, and writes y, y_var, final_lambda, final_eta and the
gradients (float32). BF16/F16 inputs are passed to the op as float32 copies (exact) so that the
gradients stay float32 (autograd returns a gradient in its input's dtype); the op's 16-bit input
path is tested in test_kla_op.py.
"""
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))
sys.path.insert(0, _HERE)

import kalman_oracle  # noqa: E402
from kalman_oracle import safetensors_file  # noqa: E402
from kalman_oracle_torch import kla  # noqa: E402

NAMES = ("v", "Lambda", "k", "q", "a_bar", "p_bar", "lambda_0", "eta_0")


def main(fixture_path, output_path):
    fx = kalman_oracle.load(fixture_path)
    if fx.model != "kla":
        raise SystemExit(f"{fixture_path}: model {fx.model}: this runner runs KLA fixtures only")
    inputs = {n: torch.tensor(fx.inputs[n], dtype=torch.float32, device="cuda", requires_grad=True)
              for n in NAMES if n in fx.inputs}
    y, y_var, final_lambda, final_eta = kla(*(inputs.get(n) for n in NAMES))
    outputs = {"y": y, "y_var": y_var, "final_lambda": final_lambda, "final_eta": final_eta}
    if fx.cotangents:
        pairs = [(outputs[name[1:]], torch.tensor(c, dtype=torch.float32, device="cuda"))
                 for name, c in fx.cotangents.items()]
        torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
        for n, x in inputs.items():
            if "d" + n in fx.outputs:
                outputs["d" + n] = x.grad
    safetensors_file.write(output_path, {n: t.detach().cpu().numpy() for n, t in outputs.items() if n in fx.outputs})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: kla_conform_runner.py FIXTURE OUTPUT")
    main(sys.argv[1], sys.argv[2])
