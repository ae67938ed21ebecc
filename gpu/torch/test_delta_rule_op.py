"""The PyTorch delta-rule op's own checks on a GPU (run by gpu/torch/run_gpu.sh; docs/kernels.md,
"PyTorch"); the values are the fixtures' business (delta_rule_conform_runner.py):

1. BF16 and F16 inputs give the bits their float32 copies give (the kernels widen exactly);
2. broadcast inputs (β [B, T, 1] expanded by strides, an initial state [1, HV, K, V]) give the bits of
   their materialised copies;
3. the op on a side stream gives the bits it gives on the default stream;
   (the two-key memory, model two_key with its gain κ, too);
4. fla's names (chunk_kda, chunk_gated_delta_rule, chunk_gla, chunk_delta_rule) give the bits of
   delta_rule with the model named, the final state only when asked for;
5. the kernels compiled for K = V = 128 keep 1.'s law and give finite outputs;
6. a variable-length batch (fla's cu_seqlens, int32 on the GPU and int64 on the host) in one call gives
   the bits of its sequences run one at a time, each from its own initial state, forward and backward
   (every input's gradient), for every model, empty and one-token sequences among them;
7. backward_operands "tf32" (the backward's matrix products on the tensor cores) gives finite gradients
   that differ from binary32's (the rounding is there), the same bits twice (their values are the conform
   runs' business: run_gpu.sh, under tf32-tc);
8. bad input is refused with a message naming the input and the rule (dtype, device, sizes, offsets).
Exit status 1 on any failure.
"""
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kalman_oracle_torch import chunk_delta_rule, chunk_gated_delta_rule, chunk_gla, chunk_kda, delta_rule  # noqa: E402
from op_checks import expect, expect_refused, failures, same  # noqa: E402


def inputs(B=2, T=130, H=2, HV=4, K=64, V=64, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    u = lambda *shape: torch.rand(*shape, generator=g) * 2 - 1
    k = u(B, T, H, K)
    k = k / k.norm(dim=-1, keepdim=True)
    x = dict(q=u(B, T, H, K), k=k, v=u(B, T, HV, V), g_head=-torch.rand(B, T, HV, generator=g),
             g_channel=-torch.rand(B, T, HV, K, generator=g), beta=torch.rand(B, T, HV, generator=g),
             kappa=torch.rand(B, T, HV, K, generator=g) / K, initial_state=u(B, HV, K, V))
    return {n: t.cuda() for n, t in x.items()}


# The inputs each model reads (run() picks them from the dict).
READS = {"gla": ("q", "k", "v", "initial_state", "g_channel"), "delta_net": ("q", "k", "v", "initial_state", "beta"),
         "gated_delta_net": ("q", "k", "v", "initial_state", "g_head", "beta"),
         "kda": ("q", "k", "v", "initial_state", "g_channel", "beta"),
         "two_key": ("q", "k", "v", "initial_state", "g_channel", "kappa")}


def run(model, x, dtype=torch.float32, **kw):
    c = {n: t.to(dtype) for n, t in x.items()}
    g = {"gla": c["g_channel"], "kda": c["g_channel"], "gated_delta_net": c["g_head"], "delta_net": None,
         "two_key": c["g_channel"]}[model]
    beta = None if model in ("gla", "two_key") else c["beta"]
    kappa = c["kappa"] if model == "two_key" else None
    return delta_rule(model, c["q"], c["k"], c["v"], g, beta, initial_state=c["initial_state"],
                      output_final_state=True, kappa=kappa, **kw)


MODELS = ("gla", "delta_net", "gated_delta_net", "kda", "two_key")
x = inputs()
for model in MODELS:
    o32, s32 = run(model, {n: t.to(torch.bfloat16).float() for n, t in x.items()})
    o16, s16 = run(model, x, torch.bfloat16)
    expect(same(o32, o16) and same(s32, s16), f"{model}: bfloat16 inputs give their float32 copies' bits")
    oh32, sh32 = run(model, {n: t.half().float() for n, t in x.items()})
    oh, sh = run(model, x, torch.float16)
    expect(same(oh32, oh) and same(sh32, sh), f"{model}: float16 inputs give their float32 copies' bits")
    expect(bool(torch.isfinite(o32).all() and torch.isfinite(s32).all()), f"{model}: every output finite")

# Broadcast β and initial state.
b = dict(x)
b["beta"] = x["beta"][:, :, :1].expand_as(x["beta"])
b["initial_state"] = x["initial_state"][:1].expand_as(x["initial_state"])
o_b, s_b = run("kda", b)
o_m, s_m = run("kda", {n: t.contiguous() for n, t in b.items()})
expect(same(o_b, o_m) and same(s_b, s_m), "kda: broadcast beta and initial state give their copies' bits")

# A side stream.
o_d, s_d = run("gated_delta_net", x)
stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    o_s, s_s = run("gated_delta_net", x)
stream.synchronize()
expect(same(o_d, o_s) and same(s_d, s_s), "gated_delta_net: a side stream gives the default stream's bits")

# fla's names.
o_a, s_a = chunk_kda(x["q"], x["k"], x["v"], x["g_channel"], x["beta"], initial_state=x["initial_state"],
                     output_final_state=True)
o_r, s_r = run("kda", x)
expect(same(o_a, o_r) and same(s_a, s_r), "chunk_kda is delta_rule('kda', ...)")
o_n, none = chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"])
expect(none is None and o_n.shape == x["v"].shape, "chunk_delta_rule: no final state unless asked for")
prior = dict(initial_state=x["initial_state"], output_final_state=True)
for name, model, call in (
        ("chunk_gated_delta_rule", "gated_delta_net",
         lambda: chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g_head"], x["beta"], **prior)),
        ("chunk_gla", "gla", lambda: chunk_gla(x["q"], x["k"], x["v"], x["g_channel"], **prior)),
        ("chunk_delta_rule", "delta_net", lambda: chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"], **prior))):
    o_w, s_w = call()
    o_r, s_r = run(model, x)
    expect(same(o_w, o_r) and same(s_w, s_r), f"{name} is delta_rule('{model}', ...)")

# The tf32 backward: every model's gradients beside binary32's, the same cotangents.
for model in MODELS:
    reads = READS[model]
    grads = {}
    for operands in ("f32", "tf32", "tf32"):
        leaves = {n: t.clone().requires_grad_() if n in reads else t for n, t in x.items()}
        o, s = run(model, leaves, backward_operands=operands)
        cot = torch.Generator().manual_seed(11)
        d_o = (torch.rand(o.shape, generator=cot) * 2 - 1).cuda()
        d_s = (torch.rand(s.shape, generator=cot) * 2 - 1).cuda()
        grads.setdefault(operands, []).append(
            torch.autograd.grad([o, s], [leaves[n] for n in reads], [d_o, d_s]))
    f32, (tf32, again) = grads["f32"][0], grads["tf32"]
    expect(all(bool(torch.isfinite(g).all()) for g in tf32), f"{model} tf32 backward: every gradient finite")
    expect(all(same(a, b) for a, b in zip(tf32, again)), f"{model} tf32 backward: deterministic")
    expect(any(not same(a, b) for a, b in zip(tf32, f32)), f"{model} tf32 backward: differs from binary32's")
expect_refused("backward_operands: 'bf16'", lambda: run("kda", x, backward_operands="bf16"))

# fla's production head size K = V = 128, for which the kernels are compiled apart (index divisions as
# shifts): the law of 1. holds there too, and every output is finite. (Their values are the conform
# runner's business: the golden gdn and kdn_isotropic fixtures have K = V = 128.)
x128 = inputs(B=1, T=200, H=1, HV=2, K=128, V=128, seed=3)
for model in MODELS:
    o32, s32 = run(model, {n: t.to(torch.bfloat16).float() for n, t in x128.items()})
    o16, s16 = run(model, x128, torch.bfloat16)
    expect(same(o32, o16) and same(s32, s16), f"{model} K = V = 128: bfloat16 inputs give their float32 copies' bits")
    expect(bool(torch.isfinite(o16).all() and torch.isfinite(s16).all()), f"{model} K = V = 128: every output finite")

# Variable-length batches: one call on the packed row against each sequence alone, outputs and every
# input's gradient (cotangents drawn for o and every final state), bit for bit.
lengths = [0, 1, 63, 65, 130, 64, 0]
offsets = [0] + list(itertools.accumulate(lengths))
N = len(lengths)
xv = inputs(B=1, T=offsets[-1], seed=5)
xv["initial_state"] = (torch.rand(N, 4, 64, 64, generator=torch.Generator().manual_seed(6)) * 2 - 1).cuda()
for model, index_dtype, on in itertools.product(MODELS, (torch.int32, torch.int64), ("cuda", "cpu")):
    if (index_dtype == torch.int32) != (on == "cuda"):
        continue  # int32 on the GPU (fla's), int64 on the host
    reads = READS[model]
    packed = {n: t.clone().requires_grad_() if n in reads else t for n, t in xv.items()}
    o, s = run(model, packed, cu_seqlens=torch.tensor(offsets, dtype=index_dtype, device=on))
    cot = torch.Generator().manual_seed(7)
    d_o = (torch.rand(o.shape, generator=cot) * 2 - 1).cuda()
    d_s = (torch.rand(s.shape, generator=cot) * 2 - 1).cuda()
    grads = torch.autograd.grad([o, s], [packed[n] for n in reads], [d_o, d_s])
    outs, finals, parts = [], [], {n: [] for n in reads}
    for i in range(N):
        t0, t1 = offsets[i], offsets[i + 1]
        alone = {n: (t[i:i + 1] if n == "initial_state" else t[:, t0:t1]) for n, t in xv.items()}
        alone = {n: t.clone().requires_grad_() if n in reads else t for n, t in alone.items()}
        o_i, s_i = run(model, alone)
        outs.append(o_i)
        finals.append(s_i)
        for n, g_i in zip(reads, torch.autograd.grad([o_i, s_i], [alone[n] for n in reads],
                                                      [d_o[:, t0:t1], d_s[i:i + 1]])):
            parts[n].append(g_i)
    expect(same(o, torch.cat(outs, 1)) and same(s, torch.cat(finals, 0)),
           f"{model} varlen ({index_dtype}, {on}): one call = each sequence alone, o and final states")
    expect(all(same(g, torch.cat(parts[n], 0 if n == "initial_state" else 1)) for n, g in zip(reads, grads)),
           f"{model} varlen ({index_dtype}, {on}): one call = each sequence alone, every gradient "
           f"({', '.join('d' + n for n in reads)})")
cu = torch.tensor(offsets, device="cuda")
gdn = lambda **kw: chunk_gated_delta_rule(*(kw.get(n, xv[n]) for n in ("q", "k", "v", "g_head", "beta")),
                                          initial_state=kw.get("initial_state", xv["initial_state"]),
                                          cu_seqlens=kw.get("cu", cu))
for what, call in (("cu_seqlens[2] = 0 < cu_seqlens[1] = 1 (rule: non-decreasing)",
                    lambda: gdn(cu=torch.tensor([0, 1, 0, offsets[-1]], device="cuda"), initial_state=None)),
                   ("(rule: the last offset is the row's length)", lambda: gdn(cu=cu[:-2], initial_state=None)),
                   ("cu_seqlens has dtype", lambda: gdn(cu=cu.float())),
                   ("cu_seqlens must be [N + 1]", lambda: gdn(cu=cu[:1])),
                   ("cu_seqlens needs B = 1", lambda: chunk_gated_delta_rule(
                       x["q"], x["k"], x["v"], x["g_head"], x["beta"], cu_seqlens=torch.tensor([0, 130]).cuda())),
                   ("initial_state must broadcast to [7, 4, 64, 64]",
                    lambda: gdn(initial_state=xv["initial_state"][:2]))):
    expect_refused(what, call)

for what, call in (("beta", lambda: delta_rule("kda", x["q"], x["k"], x["v"], x["g_channel"], None)),
                   ("kappa", lambda: delta_rule("two_key", x["q"], x["k"], x["v"], x["g_channel"])),
                   ("kappa", lambda: delta_rule("kda", x["q"], x["k"], x["v"], x["g_channel"], x["beta"],
                                                kappa=x["kappa"])),
                   # Shapes in messages (a TORCH_CHECK that formats an IntArrayRef crashed: torch_views.hpp).
                   ("q must have k's shape [2, 130, 2, 64], got [2, 5, 2, 64]",
                    lambda: chunk_delta_rule(x["q"][:, :5], x["k"], x["v"], x["beta"])),
                   # A number in the message (formatted as a string: torch_views.hpp).
                   ("v's heads (3) must be a multiple of k's (2)",
                    lambda: chunk_delta_rule(x["q"], x["k"], x["v"][:, :, :3], x["beta"][:, :, :3])),
                   ("kappa must broadcast", lambda: delta_rule("two_key", x["q"], x["k"], x["v"], x["g_channel"],
                                                        kappa=x["kappa"][..., :8])),
                   # K = 80 is five whole tiles (taken); 72 is not.
                   ("K = 72", lambda: chunk_delta_rule(torch.zeros(1, 8, 1, 72, device="cuda"),
                                                       torch.zeros(1, 8, 1, 72, device="cuda"),
                                                       torch.zeros(1, 8, 1, 16, device="cuda"),
                                                       torch.zeros(1, 8, 1, device="cuda"))),
                   # The input that breaks the rule is named: a dtype, a device.
                   ("beta has dtype", lambda: chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"].half())),
                   ("v is on cpu", lambda: chunk_delta_rule(x["q"], x["k"], x["v"].cpu(), x["beta"])),
                   ("k is on cpu", lambda: chunk_delta_rule(x["q"].cpu(), x["k"].cpu(), x["v"].cpu(),
                                                            x["beta"].cpu()))):
    expect_refused(what, call)

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
