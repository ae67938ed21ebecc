"""The KDN gain op's own checks on a GPU (run by gpu/torch/run_gpu.sh; docs/kernels.md, "PyTorch"):

1. BF16 and F16 inputs give the bits their float32 copies give (the kernels widen exactly);
2. broadcast inputs (g, omega, r per head only, mu and the prior) give the forward bits of their
   expanded copies, and gradients of the inputs' shapes;
3. the op on a side stream gives the bits it gives on the default stream;
4. both forms, grouped value heads: the outputs within 1e-5 and every gradient within 1e-4 (relative
   to its largest element) of torch.autograd through a float64 sequential gain path (models/diagonal.hpp,
   models/isotropic.hpp, line by line) (a coarse end-to-end check of the wiring; `validate` and the
   fixtures check the values against their budgets);
5. variable-length batches (cu_seqlens, int32 on the GPU and int64 on the host): one call on the packed
   row gives the bits of its sequences run one at a time, each from its own prior, outputs and every
   gradient (dmu: the sequences' summed in order, from the first's), for the gain op and for the whole
   KDN (kdn: the gain op and the two-key memory op); bad offsets are refused by rule;
6. a bad shape is refused with a message naming the input and both shapes.
Exit status 1 on any failure.
"""
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kalman_oracle_torch import kdn, kdn_gain  # noqa: E402
from op_checks import expect, expect_refused, failures, same  # noqa: E402

ORDER = ("k", "q", "g", "omega", "r", "mu", "initial_covariance")


def inputs(form, B=2, T=70, H=2, group=2, K=40, seed=0, device="cuda"):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    u = lambda *shape: (torch.rand(*shape, generator=gen) * 2 - 1)
    HV = H * group
    L = (K,) if form == "diagonal" else ()
    k = u(B, T, H, K)
    x = dict(k=k / k.norm(dim=-1, keepdim=True), q=u(B, T, H, K), g=-torch.rand(B, T, HV, K, generator=gen),
             omega=10 ** (-2.5 + 1.5 * u(B, T, HV, *L)), r=10 ** (-0.5 + 1.5 * u(B, T, HV)),
             mu=K * (0.75 + 0.25 * u(HV)), initial_covariance=10 ** u(B, HV, *L))
    return {n: t.to(device) for n, t in x.items()}


def reference(form, k, q, g, omega, r, mu, initial_covariance, scale):
    """The gain path in float64 autograd, token by token."""
    B, T, H, K = k.shape
    HV = g.shape[2]
    kk, qq = k.repeat_interleave(HV // H, dim=2), q.repeat_interleave(HV // H, dim=2)
    alpha2 = torch.exp(g) ** 2
    p = initial_covariance
    predicted, gains, readout = [], [], []
    for t in range(T):
        if form == "diagonal":
            ph = alpha2[:, t] * p + omega[:, t]
            den = r[:, t, :, None] + (ph * kk[:, t] ** 2).sum(-1, keepdim=True)
            gain = ph * kk[:, t] / den
            u = mu[None, :, None] * kk[:, t] ** 2 / r[:, t, :, None]
            p = ph / (1 + u * ph)
            readout.append(((scale * qq[:, t]) ** 2 * p).sum(-1))
        else:
            n = (kk[:, t] ** 2).sum(-1)
            ph = alpha2[:, t].mean(-1) * p + omega[:, t]
            gain = ph / (r[:, t] + ph * n)
            c = mu[None, :] * n / (K * r[:, t])
            p = ph / (1 + c * ph)
            readout.append(p * ((scale * qq[:, t]) ** 2).sum(-1))
        predicted.append(ph)
        gains.append(gain)
    return torch.stack(predicted, 1), torch.stack(gains, 1), torch.stack(readout, 1), p


for form in ("diagonal", "isotropic"):
    # 1. 16-bit inputs.
    for dtype in (torch.bfloat16, torch.float16):
        x = {n: t.to(dtype) for n, t in inputs(form, seed=1).items()}
        low = kdn_gain(form, *(x[n] for n in ORDER))
        wide = kdn_gain(form, *(x[n].float() for n in ORDER))
        expect(all(same(a, b) for a, b in zip(low, wide)), f"{form}: {dtype} inputs give the bits of their float32 copies")

    # 2. Broadcasting: g, omega, r the same for every batch row and token; mu and the prior per head only.
    x = inputs(form, seed=2)
    B, T, H, K = x["k"].shape
    HV = x["g"].shape[2]
    narrow = dict(x, g=x["g"][:1, :1], omega=x["omega"][:1, :1], r=x["r"][:1, :1],
                  initial_covariance=x["initial_covariance"][:1])
    full = {n: narrow[n].expand_as(x[n]).contiguous() for n in ORDER}
    a = kdn_gain(form, *(narrow[n] for n in ORDER))
    b = kdn_gain(form, *(full[n] for n in ORDER))
    expect(all(same(p, q) for p, q in zip(a, b)), f"{form}: broadcast inputs give the bits of their expanded copies")
    leaves = {n: t.clone().requires_grad_(True) for n, t in narrow.items()}
    out = kdn_gain(form, *(leaves[n] for n in ORDER))
    sum(o.sum() for o in out).backward()
    expect(all(leaves[n].grad.shape == narrow[n].shape for n in ORDER),
           f"{form}: gradients of broadcast inputs have the inputs' shapes")

    # 3. Streams.
    x = inputs(form, seed=3)
    default = kdn_gain(form, *(x[n] for n in ORDER))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = kdn_gain(form, *(x[n] for n in ORDER))
    side.synchronize()
    expect(all(same(p, q) for p, q in zip(default, on_side)), f"{form}: a side stream gives the default stream's bits")

    # 4. Outputs and gradients against float64 autograd.
    x = inputs(form, B=2, T=150, H=2, group=2, K=40, seed=4)
    scale = float(torch.tensor(40 ** -0.5, dtype=torch.float32))
    ours = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    ref = {n: t.double().clone().requires_grad_(True) for n, t in x.items()}
    got = kdn_gain(form, *(ours[n] for n in ORDER), scale=scale)
    want = reference(form, *(ref[n] for n in ORDER), scale)
    for name, o, w in zip(("predicted_covariance", "gain", "readout_variance", "final_covariance"), got, want):
        err = (o.double() - w).abs().max().item()
        expect(err <= 1e-5 * w.abs().max().item(), f"{form}: {name} within 1e-5 of float64 (max error {err:.2e})")
    cot = [torch.randn(w.shape, dtype=torch.float64, device="cuda") for w in want]
    torch.autograd.backward(list(got), [c.float() for c in cot])
    torch.autograd.backward(list(want), cot)
    for n in ORDER:
        err = (ours[n].grad.double() - ref[n].grad).abs().max().item()
        scale_n = ref[n].grad.abs().max().item()
        expect(err <= 1e-4 * scale_n,
               f"{form}: d{n} within 1e-4 of float64 autograd (max error {err:.2e}, scale {scale_n:.2e})")

# 5. Variable-length batches.
lengths = [0, 1, 63, 65, 130, 64, 0]
offsets = [0] + list(itertools.accumulate(lengths))
N, H, group, K, V = len(lengths), 2, 2, 48, 32
HV = H * group


def sum_in_order(parts):
    """The sequences' gradients of a shared input summed in sequence order, from the first's (float32)."""
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


for form, whole in itertools.product(("diagonal", "isotropic"), (False, True)):
    L = (K,) if form == "diagonal" else ()
    x = inputs(form, B=1, T=offsets[-1], H=H, group=group, K=K, seed=7)
    gen = torch.Generator().manual_seed(8)
    x["initial_covariance"] = (10 ** (torch.rand(N, HV, *L, generator=gen) * 2 - 1)).cuda()
    names = ORDER
    if whole:
        x["v"] = (torch.rand(1, offsets[-1], HV, V, generator=gen) * 2 - 1).cuda()
        x["initial_state"] = (torch.rand(N, HV, K, V, generator=gen) * 2 - 1).cuda()
        names = ("q", "k", "v", "g", "omega", "r", "mu", "initial_covariance", "initial_state")
    call = (lambda y, cu=None: kdn(form, *(y[n] for n in names), cu_seqlens=cu)) if whole else \
        (lambda y, cu=None: kdn_gain(form, *(y[n] for n in names), cu_seqlens=cu))
    what = f"{form} {'kdn' if whole else 'kdn_gain'} varlen"
    # Which outputs are per token ([1, T, ...]; the others per sequence, [N, ...]).
    per_token = (True, False, True, False) if whole else (True, True, True, False)
    per_sequence_inputs = ("initial_covariance", "initial_state")
    for index_dtype, on in ((torch.int32, "cuda"), (torch.int64, "cpu")):
        packed = {n: t.clone().requires_grad_() for n, t in x.items()}
        out = call(packed, torch.tensor(offsets, dtype=index_dtype, device=on))
        cot = torch.Generator().manual_seed(9)
        cots = [(torch.rand(o.shape, generator=cot) * 2 - 1).cuda() for o in out]
        grads = torch.autograd.grad(list(out), [packed[n] for n in names], cots)
        outs, parts = [[] for _ in out], {n: [] for n in names}
        for i in range(N):
            t0, t1 = offsets[i], offsets[i + 1]
            alone = {n: (t[i:i + 1] if n in per_sequence_inputs else t if n == "mu" else t[:, t0:t1])
                     for n, t in x.items()}
            alone = {n: t.clone().requires_grad_() for n, t in alone.items()}
            out_i = call(alone)
            for j, o in enumerate(out_i):
                outs[j].append(o)
            # The per-token outputs' cotangents are the packed ones' tokens; the finals' their row.
            cots_i = [c[:, t0:t1] if token else c[i:i + 1] for c, token in zip(cots, per_token)]
            for n, g_i in zip(names, torch.autograd.grad(list(out_i), [alone[n] for n in names], cots_i)):
                parts[n].append(g_i)
        joined = [torch.cat(o, 1 if token else 0) for o, token in zip(outs, per_token)]
        expect(all(same(a, b) for a, b in zip(out, joined)),
               f"{what} ({index_dtype}, {on}): one call = each sequence alone, every output")
        want = {n: (sum_in_order(parts[n]) if n == "mu" else torch.cat(parts[n], 0 if n in per_sequence_inputs else 1))
                for n in names}
        expect(all(same(g, want[n]) for n, g in zip(names, grads)),
               f"{what} ({index_dtype}, {on}): one call = each sequence alone, every gradient "
               f"({', '.join('d' + n for n in names)}; dmu summed in order)")
        expect(all(bool(torch.isfinite(g).all()) for g in grads),
               f"{what} ({index_dtype}, {on}): every gradient finite")
x = inputs("diagonal", B=1, T=offsets[-1], H=H, group=group, K=K, seed=7)
x["initial_covariance"] = None
for message, cu in (("cu_seqlens[2] = 0 < cu_seqlens[1] = 1 (rule: non-decreasing)", [0, 1, 0, offsets[-1]]),
                    ("(rule: the last offset is the row's length)", offsets[:-2])):
    expect_refused(message, lambda: kdn_gain("diagonal", *(x[n] for n in ORDER),
                                             cu_seqlens=torch.tensor(cu, device="cuda")))
expect_refused("cu_seqlens needs B = 1", lambda: kdn_gain("diagonal", *(inputs("diagonal", seed=1)[n] for n in ORDER),
                                                          cu_seqlens=torch.tensor([0, 70])))

# 6. Shapes in messages (a TORCH_CHECK that formats an IntArrayRef crashed: torch_views.hpp).
x = inputs("diagonal", B=1, T=3, H=1, group=1, K=16, seed=6)
expect_refused("kdn_gain: q must have k's shape [1, 3, 1, 16], got [1, 3, 1, 8]",
               lambda: kdn_gain("diagonal", x["k"], x["q"][..., :8], x["g"], x["omega"], x["r"]))
expect_refused("omega must broadcast to [1, 3, 1, 16], got [1, 3, 1, 8]",
               lambda: kdn_gain("diagonal", x["k"], x["q"], x["g"], x["omega"][..., :8], x["r"]))

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
