"""The PyTorch op's own checks on a GPU (run by gpu/torch/run_gpu.sh; docs/kernels.md, "PyTorch"):

1. BF16 and F16 inputs give the bits their float32 copies give (the kernels widen exactly);
2. broadcast inputs (Λ [B, T, 1], ā and p̄ [M, S] or [S]) give the forward bits of their expanded
   copies, and gradients summed to the inputs' shapes;
3. the op on a side stream gives the bits it gives on the default stream;
4. every gradient equals torch.autograd's through a float64 sequential KLA to within 1e-4 relative
   (a coarse end-to-end check of the wiring; the fixtures check the values);
5. a bad shape is refused with a message naming the input and both shapes.
Exit status 1 on any failure.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kalman_oracle_torch import kla  # noqa: E402
from op_checks import expect, expect_refused, failures, same  # noqa: E402


def inputs(B=2, T=37, M=24, S=16, seed=0, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    u = lambda *shape: (torch.rand(*shape, generator=g) * 2 - 1)
    x = dict(v=u(B, T, M), Lambda=10 ** u(B, T, M), k=u(B, T, S), q=u(B, T, S),
             a_bar=0.5 + 0.5 * torch.rand(M, S, generator=g), p_bar=10 ** (-2.5 + 1.5 * u(M, S)),
             lambda_0=10 ** u(B, M, S), eta_0=u(B, M, S))
    return {n: t.to(device) for n, t in x.items()}


ORDER = ("v", "Lambda", "k", "q", "a_bar", "p_bar", "lambda_0", "eta_0")

# 1. 16-bit inputs.
for dtype in (torch.bfloat16, torch.float16):
    x = {n: t.to(dtype) for n, t in inputs(seed=1).items()}
    low = kla(*(x[n] for n in ORDER))
    wide = kla(*(x[n].float() for n in ORDER))
    expect(all(same(a, b) for a, b in zip(low, wide)), f"{dtype} inputs give the bits of their float32 copies")

# 2. Broadcasting.
x = inputs(seed=2)
B, T, M = x["v"].shape
S = x["k"].shape[2]
narrow = dict(x, Lambda=x["Lambda"][:, :, :1], p_bar=x["p_bar"][0])  # [B, T, 1] and [S]
full = dict(x, Lambda=narrow["Lambda"].expand(B, T, M).contiguous(), p_bar=narrow["p_bar"].expand(M, S).contiguous())
a = kla(*(narrow[n] for n in ORDER))
b = kla(*(full[n] for n in ORDER))
expect(all(same(p, r) for p, r in zip(a, b)), "broadcast Lambda [B, T, 1] and p_bar [S] give the bits of their copies")
leaves = {n: t.clone().requires_grad_(True) for n, t in narrow.items()}
out = kla(*(leaves[n] for n in ORDER))
sum(o.sum() for o in out).backward()
expect(leaves["Lambda"].grad.shape == (B, T, 1) and leaves["p_bar"].grad.shape == (S,),
       "gradients of broadcast inputs have the inputs' shapes")

# 3. Streams.
x = inputs(seed=3)
default = kla(*(x[n] for n in ORDER))
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    on_side = kla(*(x[n] for n in ORDER))
side.synchronize()
expect(all(same(p, r) for p, r in zip(default, on_side)), "a side stream gives the default stream's bits")


# 4. Gradients against autograd through a float64 sequential KLA (models/kla.hpp, line by line).
def kla_reference(v, Lambda, k, q, a_bar, p_bar, lambda_0, eta_0):
    lam, eta = lambda_0, eta_0
    ys, yvs = [], []
    for t in range(v.shape[1]):
        phi = Lambda[:, t, :, None] * k[:, t, None, :] ** 2
        rho = v[:, t, :, None] * Lambda[:, t, :, None] * k[:, t, None, :]
        den = a_bar ** 2 + p_bar * lam
        lam, eta = lam / den + phi, a_bar / den * eta + rho
        ys.append((q[:, t, None, :] * eta / lam).sum(-1))
        yvs.append((q[:, t, None, :] ** 2 / lam).sum(-1))
    return torch.stack(ys, 1), torch.stack(yvs, 1), lam, eta


x = inputs(B=2, T=21, M=5, S=4, seed=4)
ours = {n: t.clone().requires_grad_(True) for n, t in x.items()}
ref = {n: t.double().clone().requires_grad_(True) for n, t in x.items()}
cot = [torch.randn(o.shape, dtype=torch.float64, device="cuda") for o in kla_reference(*(ref[n] for n in ORDER))]
torch.autograd.backward(list(kla(*(ours[n] for n in ORDER))), [c.float() for c in cot])
torch.autograd.backward(list(kla_reference(*(ref[n] for n in ORDER))), cot)
for n in ORDER:
    err = (ours[n].grad.double() - ref[n].grad).abs().max().item()
    scale = ref[n].grad.abs().max().item()
    expect(err <= 1e-4 * scale, f"d{n} within 1e-4 of float64 autograd (max error {err:.2e}, scale {scale:.2e})")

# 5. Shapes in messages (a TORCH_CHECK that formats an IntArrayRef crashed: torch_views.hpp).
x = inputs(B=2, T=5, M=3, S=4, seed=5)
expect_refused("kla: q must have k's shape [2, 5, 4], got [2, 5, 3]",
               lambda: kla(x["v"], x["Lambda"], x["k"], x["q"][..., :3], x["a_bar"], x["p_bar"]))
expect_refused("Lambda must broadcast to [2, 5, 3], got [2, 5, 2]",
               lambda: kla(x["v"], x["Lambda"][..., :2], x["k"], x["q"], x["a_bar"], x["p_bar"]))

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
