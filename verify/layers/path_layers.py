"""fla's PaTHAttention and ForgettingAttention (fla.layers.path_attn, fla.layers.forgetting_attn) against the
float64 literals of references/path_layer_literal.py; the same literal run in the check's dtype (SameDtype) sets
the budget.

Comparisons (each one check per variant and dtype that `declared` keeps):
  train       the full forward at T around the 64-token chunk, the tensors the layer hands to its op (q, k, v,
              w, beta, g), and the gradients of the input and of every parameter (float64 autograd)
  generation  prefill T0 with an all-ones attention_mask and a fla Cache, then decode one token at a time:
              outputs against the literal (the error per bucket of generated length and its growth in details),
              PaTH's key cache after the prefill and after the last token against decode_cache
  padding     a left-padded batch prefilled with a cache, then decoded: the valid tokens against the literal
              of each unpadded sequence
  mask        attention_mask (left and interior padding) without a cache, against each unpadded sequence
  convention-silu, convention-gate_scaled   PaTH's declared departures from the paper, measured
"""
from __future__ import annotations

import importlib
import itertools
import math
from contextlib import contextmanager

import torch

from pathmdn_verify.references import path_layer_literal as L
from pathmdn_verify import same_dtype
from pathmdn_verify.core.budget import verdict
from pathmdn_verify.core.metrics import rel_err
from pathmdn_verify.platform.mutation import Mutant
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import BUDGET_FACTOR_BLOCKWISE as C
from pathmdn_verify.core.registry import Result
from pathmdn_verify.layers import history
from pathmdn_verify.layers.table import LayerCase, LayerRecord, add
from pathmdn_verify.layers.kv_cache import new_cache
from pathmdn_verify.layers.calls import Calls, Why, case_ids
from pathmdn_verify.layers.common import (
    build,
    cache_ops,
    call,
    combine,
    judge,
    padded_mask,
    params64,
    precision,
)


class _Store(torch.autograd.Function):
    """Round to the storage dtype in the forward and the gradient in the backward (a bf16 layer stores both)."""
    generate_vmap_rule = True     # the heads of pathmdn_verify.references.path_oracle.per_head run under torch.vmap

    @staticmethod
    def forward(x, dtype):
        return x.to(dtype).float()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dtype = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dtype).float(), None


class SameDtype:
    """The literal's arithmetic in a working precision: attention products in the kernels' dot format, projections
    as torch's CPU linear computes them (bf16 operands, or IEEE fp32), fp32 math, tensors stored in the dtype."""
    def __init__(self, prec: Precision):
        self.prec = prec
        self.mm = prec.mm
        self.dense = Precision(prec.storage, "bf16" if prec.storage == "bf16" else "ieee").mm

    def store(self, x):
        return _Store.apply(x, self.prec.torch_dtype)

    def path_attn(self, q, k, v, w, beta, g, scale, gate_scaled):
        return same_dtype.path_attn(q, k, v, w, beta, g, None, self.prec, scale, gate_scaled)

    def fox_attn(self, q, k, v, g, scale, window):
        if window is None:
            return same_dtype.fox_attn(q, k, v, g, None, self.prec, scale, False)
        return L.windowed_fox(self, q, k, v, g, scale, window)

    def decode_cache(self, k, w, beta):
        return same_dtype.decode_keys(k, w, beta, self.prec)


HIDDEN, HEADS = 32, 2           # head dim 16 at quick and ci; 64 at full (hidden 256, 4 heads)
WINDOW = 4                      # FoX's window: the default gates (f ~ 0.5) leave keys beyond ~16 tokens no weight


def sizes(case: LayerCase) -> dict:
    hidden, heads = case.ctx.pick((HIDDEN, HEADS), (HIDDEN, HEADS), (256, 4))
    return {"hidden_size": hidden, "num_heads": heads, "layer_idx": 0}


def spec_of(case: LayerCase, layer, **conventions) -> L.Spec:
    """The literal's Spec: the heads and every option as the case asks for them (never as the built layer says it
    holds them), and the tree's declared forms (history path.qk_norm, path.gate_dtype; PaTH's w low-rank by
    default, before 2025-07-08 only without GQA)."""
    kw = case.kwargs
    heads = sizes(case)["num_heads"] if case.options is None else GQA_SIZES(case, None)["num_heads"]
    kv = kw.get("num_kv_heads") or heads
    if case.record.name == "path":
        declared = {"qk_norm_flat": history.value("path.qk_norm") == "flat",
                    "gates_stored": history.value("path.gate_dtype") == "layer"}
        low_rank = kw.get("use_low_rank_w", True if history.value("path.w_options") else kv == heads)
        return L.Spec(heads, kv, kw.get("use_qk_norm", False), kw.get("use_forget_gate", False),
                      low_rank_w=low_rank, w_conv=kw.get("use_w_shortconv", True),
                      conv_bias=kw.get("conv_bias", False), **{**declared, **conventions})
    return L.Spec(heads, kv, kw.get("qk_norm", False), kw.get("use_output_gate", False), kw.get("window_size"),
                  qkv_bias=kw.get("qkv_bias", False), **conventions)


def hidden_states(case: LayerCase, seed: int, B: int, T: int, hidden: int):
    """x in the case dtype on the device (from a CPU generator seeded by seed and the run's --seed) and its values
    in float64 on the CPU."""
    gen = torch.Generator().manual_seed(seeded(case, seed))
    x = torch.randn(B, T, hidden, generator=gen, dtype=torch.float64).to(precision(case).torch_dtype)
    return x.to(case.ctx.device), x.double()


def literal(case: LayerCase):
    """(layer fn, generate fn) of the case's literal."""
    if case.record.name == "path":
        return L.path_layer, L.path_generate
    return L.fox_layer, lambda ar, p, x, T0, spec: (L.fox_generate(ar, p, x, T0, spec), None, None)


def seeded(case: LayerCase, seed: int) -> int:
    return 1009 * case.ctx.seed + seed


def setup(case: LayerCase, seed: int):
    layer = build(case, seeded(case, seed), **sizes(case))
    p64 = params64(layer)
    return layer, p64, {n: t.float() for n, t in p64.items()}, spec_of(case, layer)


@contextmanager
def captured(case: LayerCase, stub=None):
    """The tensors the layer hands to its op, captured by replacing the op in the layer's module for the duration
    (stub: return stub(**args) instead of running the op)."""
    module = importlib.import_module(case.record.module)
    name = history.value("path.op") if case.record.name == "path" else "parallel_forgetting_attn"
    op, seen = getattr(module, name), {}

    def wrapper(*args, **kwargs):
        names = ("q", "k", "v", "w", "beta", "g") if case.record.name == "path" else ("q", "k", "v", "g")
        seen.update(dict(zip(names, args)), **kwargs)
        return stub(**seen) if stub else op(*args, **kwargs)
    setattr(module, name, wrapper)
    try:
        yield seen
    finally:
        setattr(module, name, op)


def stage_tensors(seen: dict, truth: dict, same: dict) -> list[tuple]:
    return [(f"stage {n}", seen[n], truth[n], same[n]) for n in truth if truth[n] is not None]


def _leaves(p: dict) -> dict:
    return {n: t.clone().requires_grad_() for n, t in p.items()}


def train(case: LayerCase) -> Result:
    """Forward, stages and gradients at each T of the profile."""
    fwd, _ = literal(case)
    Ts = (case.ctx.pick((20,), (65,), (63, 64, 65, 512, 513)) if case.variant == "base"   # the chunk boundary
          else case.ctx.pick((20,), (20,), (65, 513)))                                   # an option's code
    results = []
    for i, T in enumerate(Ts):
        layer, p64, p32, spec = setup(case, i)
        x, x64 = hidden_states(case, 100 + i, 1, T, layer.hidden_size)
        x = x.requires_grad_()
        with captured(case) as seen:
            o = call(layer, x)[0]
        do = torch.randn(o.shape, generator=torch.Generator().manual_seed(seeded(case, 200 + i)), dtype=torch.float64)
        call(o.backward, do.to(o.dtype).to(o.device))
        grads = {"x": x.grad, **{n: torch.zeros_like(t) if t.grad is None else t.grad   # no gradient reached it
                                 for n, t in layer.named_parameters()}}
        outs = {}
        for key, ar, p, xx in (("truth", L.EXACT, _leaves(p64), x64.clone().requires_grad_()),
                               ("same", SameDtype(precision(case)), _leaves(p32), x64.float().requires_grad_())):
            o_l, st = fwd(ar, p, xx, spec)
            (o_l * do.to(o_l.dtype)).sum().backward()
            outs[key] = o_l.detach(), {n: t.detach() if t is not None else None for n, t in st.items()}, \
                {"x": xx.grad, **{n: t.grad for n, t in p.items()}}
        (ot, st, gt), (os_, ss, gs) = outs["truth"], outs["same"]
        results.append(judge(case, [(f"o T={T}", o, ot, os_)] + stage_tensors(seen, st, ss), C["fwd"], f"T={T} forward"))
        results.append(judge(case, [(f"d{n} T={T}", grads[n], gt[n], gs[n]) for n in gt], C["bwd"], f"T={T} backward"))
    return combine(results, "train", {"T": list(Ts)})


def _mask(B, T, device):
    return torch.ones(B, T, dtype=torch.long, device=device)


def _fla_generate(case, layer, x, T0, mask=None):
    """fla's prefill of x[:, :T0] (attention_mask: mask[:, :T0], default ones) with a Cache, then one token at a
    time; returns (outputs [B, T, hidden], the cache's first attention tensor after the prefill and at the end,
    which cache: pathmdn_verify.layers.kv_cache.new_cache)."""
    B, T = x.shape[:2]
    mask = _mask(B, T, x.device) if mask is None else mask
    cache, which = new_cache()
    outs = [call(layer, x[:, :T0], attention_mask=mask[:, :T0], past_key_values=cache, use_cache=True)[0]]
    k0 = cache[0]["attn_state"][0].clone()
    for t in range(T0, T):
        outs.append(call(layer, x[:, t:t + 1], attention_mask=mask[:, :t + 1], past_key_values=cache,
                         use_cache=True)[0])
    return torch.cat(outs, 1), k0, cache[0]["attn_state"][0], which


def buckets(o, truth, T0: int, size: int) -> dict:
    """Relative error of the decoded outputs per bucket of generated length (tokens 1..size, size+1..2 size, ...)."""
    dec, ref = o[:, T0:].detach().double().cpu(), truth[:, T0:]
    return {f"{a + 1}-{min(a + size, dec.shape[1])}": rel_err(dec[:, a:a + size], ref[:, a:a + size])
            for a in range(0, dec.shape[1], size)}


def generation(case: LayerCase) -> Result:
    """Prefill then decode against the literal's full forward (equal to its decoding) and its key cache."""
    T0, n, size = case.ctx.pick((20, 4, 2), (30, 4, 2), (500, 2048, 256))     # full: 2048 generated tokens
    layer, p64, p32, spec = setup(case, 0)
    x, x64 = hidden_states(case, 100, 1, T0 + n, layer.hidden_size)
    if precision(case).storage == "bf16":       # a device whose interpreter refuses bf16 decoding says so at once
        _fla_generate(case, layer, x[:, :2], 1)
    o, k0, k, which = _fla_generate(case, layer, x, T0)
    _, gen = literal(case)
    with torch.no_grad():
        ot, k0t, kt = gen(L.EXACT, p64, x64, T0, spec)
        os_, k0s, ks = gen(SameDtype(precision(case)), p32, x64.float(), T0, spec)
    tensors = [("prefill o", o[:, :T0], ot[:, :T0], os_[:, :T0]), ("decode o", o[:, T0:], ot[:, T0:], os_[:, T0:])]
    if k0t is not None:
        tensors += [("key cache after prefill", k0, k0t.flatten(2), k0s.flatten(2)),
                    ("key cache after decoding", k, kt.flatten(2), ks.flatten(2))]
    b = buckets(o, ot, T0, size)
    first, last = next(iter(b.values())), list(b.values())[-1]
    details = {"T0": T0, "decoded": n, "decode_rel_err_by_generated_length": b,
               "growth": last / first if first else None, "cache": which}
    return judge(case, tensors, C["decode"], f"T0={T0}, {n} decoded", details)


def continuation(case: LayerCase) -> Result:
    """Prefill T0, then two multi-token calls with the cache (a chunked prefill, a speculative step), then one
    token at a time: every output against the literal's full forward."""
    T0, chunks, n = case.ctx.pick((12, (5, 3), 2), (20, (8, 5), 3), (500, (40, 100), 32))
    layer, p64, p32, spec = setup(case, 0)
    x, x64 = hidden_states(case, 100, 1, T0 + sum(chunks) + n, layer.hidden_size)
    (cache, which), cuts = new_cache(), [0, T0, T0 + chunks[0], T0 + sum(chunks), T0 + sum(chunks) + n]
    step = lambda a, b: call(layer, x[:, a:b], attention_mask=_mask(1, b, x.device), past_key_values=cache,
                             use_cache=True)[0]
    with torch.no_grad():
        outs = [step(a, b) for a, b in itertools.pairwise(cuts[:4])]      # the prefill and the two chunks
        o = torch.cat(outs + [step(t, t + 1) for t in range(cuts[3], cuts[4])], 1)
        fwd, _ = literal(case)
        truth, same = fwd(L.EXACT, p64, x64, spec)[0], fwd(SameDtype(precision(case)), p32, x64.float(), spec)[0]
    names = (f"prefill {T0}", f"continuation of {chunks[0]}", f"continuation of {chunks[1]}", f"{n} decoded")
    tensors = [(nm, o[:, a:b], truth[:, a:b], same[:, a:b]) for nm, (a, b) in zip(names, itertools.pairwise(cuts))]
    return judge(case, tensors, C["decode"], f"prefill {T0}, then {chunks[0]} and {chunks[1]} tokens per call, "
                                             f"then {n} one at a time", {"cache": which})


def cache_operations(case: LayerCase) -> Result:
    """pathmdn_verify.layers.common.cache_ops on the layer: repeat, reorder and crop (PaTH's cache holds the w
    convolution's state, so its crop must refuse)."""
    T0, n = case.ctx.pick((12, 2), (20, 3), (500, 32))
    layer, p64, p32, spec = setup(case, 0)
    prompts = hidden_states(case, 100, 2, T0, layer.hidden_size)[1]
    fwd, _ = literal(case)
    drawn = iter(range(200, 10**6))

    def step(tokens, cache, length):
        x = tokens.to(device=case.ctx.device, dtype=precision(case).torch_dtype)
        return call(layer, x, attention_mask=_mask(x.shape[0], length, x.device), past_key_values=cache,
                    use_cache=True)[0]

    def truths(hist):
        rows = [hist[b:b + 1] for b in range(hist.shape[0])]
        return (torch.cat([fwd(L.EXACT, p64, r, spec)[0] for r in rows]),
                torch.cat([fwd(SameDtype(precision(case)), p32, r.float(), spec)[0] for r in rows]))
    with torch.no_grad():
        return cache_ops(case, prompts, lambda rows, k: hidden_states(case, next(drawn), rows, k, layer.hidden_size)[1],
                         step, truths, crop=case.record.name == "fox", c=C["decode"], n=n)


def _rows(case, layer, p64, p32, spec, x64, mask, T0=None):
    """Each row's valid tokens through the literal (alone, unpadded): (truth, same) lists of [1, Tb, hidden];
    with T0, prefill of the row's valid prompt tokens then decoding."""
    fwd, gen = literal(case)
    truth, same = [], []
    with torch.no_grad():
        for b in range(x64.shape[0]):
            xb = x64[b:b + 1, mask[b].bool().cpu()]
            pad = int((mask[b] == 0).sum())
            for out, ar, p, xx in ((truth, L.EXACT, p64, xb), (same, SameDtype(precision(case)), p32, xb.float())):
                out.append(fwd(ar, p, xx, spec)[0] if T0 is None else gen(ar, p, xx, T0 - pad, spec)[0])
    return truth, same


def padding(case: LayerCase) -> Result:
    """Left padding with a cache: prefill a batch whose second row starts with padding, then decode."""
    T0, n, pad = case.ctx.pick((20, 2, 5), (24, 2, 9), (500, 32, 100))
    layer, p64, p32, spec = setup(case, 0)
    x, x64 = hidden_states(case, 100, 2, T0 + n, layer.hidden_size)
    mask = _mask(2, T0 + n, x.device)
    mask[1, :pad] = 0
    o, _, _, which = _fla_generate(case, layer, x, T0, mask)
    truth, same = _rows(case, layer, p64, p32, spec, x64, mask, T0)
    tensors = [(f"row {b} ({'padded' if b else 'unpadded'})", o[b:b + 1, mask[b].bool()], truth[b], same[b])
               for b in range(2)]
    return judge(case, tensors, C["decode"], f"T0={T0} (row 1: {pad} padding tokens), {n} decoded", {"cache": which})


def _masked(case: LayerCase, masks: list, labels: tuple[str, str], what: str) -> Result:
    """The layer called without a cache once per mask (patterns [2, T], from padded_mask), all held in one tensor
    refilled in place between the calls; the last call's valid tokens (row b labelled labels[b]) against each
    unpadded sequence."""
    layer, p64, p32, spec = setup(case, 0)
    x, x64 = hidden_states(case, 100, 2, masks[0].shape[1], layer.hidden_size)
    m = _mask(2, masks[0].shape[1], x.device)
    with torch.no_grad():
        for pattern in masks:
            m.copy_(pattern)
            o = call(layer, x, attention_mask=m)[0]
    truth, same = _rows(case, layer, p64, p32, spec, x64, m)
    tensors = [(f"row {b} ({labels[b]})", o[b:b + 1, m[b].bool()], truth[b], same[b]) for b in range(2)]
    return judge(case, tensors, C["fwd"], what)


def mask(case: LayerCase) -> Result:
    """attention_mask without a cache: row 0 left padding, row 1 interior padding."""
    T, pad = case.ctx.pick((24, 5), (48, 9), (513, 100))
    return _masked(case, [padded_mask(T, pad, True, True)], ("left padding", "interior padding"),
                   f"T={T}, {pad} padding tokens per row")


def mask_reused(case: LayerCase) -> Result:
    """attention_mask as a buffer the caller refills in place between two calls (the same tensor object, left
    padding in row 0, then interior padding in row 1): the second call against each unpadded sequence (`mask` is
    the same comparison with a fresh tensor)."""
    T, pad = case.ctx.pick((24, 5), (48, 9), (513, 100))
    return _masked(case, [padded_mask(T, pad, True, False), padded_mask(T, pad, False, True)], ("second call", "second call"),
                   f"T={T}: the mask refilled in place between two calls")


def _convention(case, name, declared, other, what_else) -> Result:
    """The layer's tensor against the literal under the declared convention (within budget) and under the
    alternative (more than 10x the relative budget away)."""
    out, truth, same = declared
    prec = precision(case)
    v = verdict(name, out.detach().to("cpu", torch.float64), truth, same.detach().double().cpu(), prec, C["fwd"])
    ratio = rel_err(out, other) / v.budget_rel
    ok = v.ratio <= 1 and ratio > 10
    return Result("pass" if ok else "fail", v.measured, v.budget,
                  f"declared convention: {v.summary()}; alternative ({what_else}): rel error {rel_err(out, other):.2e} "
                  f"= {ratio:.0f}x the relative budget -> " + ("declared convention confirmed" if ok else
                                                                "DECLARED CONVENTION NOT CONFIRMED"),
                  details={"tensors": [v.as_json()], "alternative_ratio": ratio if math.isfinite(ratio) else None},
                  kind=None if ok else "over_budget", measure=v.decided_by)


def convention_silu(case: LayerCase) -> Result:
    """w handed to the op: conv then SiLU (declared), not the paper's conv alone."""
    layer, p64, p32, _spec = setup(case, 0)
    x, x64 = hidden_states(case, 100, 1, 32, layer.hidden_size)
    stub = lambda q, v, **_: (torch.zeros_like(q), None)
    with captured(case, stub) as seen, torch.no_grad():
        call(layer, x)
    with torch.no_grad():
        w = lambda ar, p, xx, **c: L.path_stages(ar, p, xx, spec_of(case, layer, **c))["w"]
        return _convention(case, "stage w", (seen["w"], w(L.EXACT, p64, x64), w(SameDtype(precision(case)), p32,
                                             x64.float())), w(L.EXACT, p64, x64, silu=False), "silu=False")


def convention_gate_scaled(case: LayerCase) -> Result:
    """The output with the forget gate times the attention scale (declared), not the paper's unscaled gate."""
    layer, p64, p32, _spec = setup(case, 0)
    x, x64 = hidden_states(case, 100, 1, 64, layer.hidden_size)
    with torch.no_grad():
        o = call(layer, x)[0]
        out = lambda ar, p, xx, **c: L.path_layer(ar, p, xx, spec_of(case, layer, **c))[0]
        return _convention(case, "o", (o, out(L.EXACT, p64, x64), out(SameDtype(precision(case)), p32, x64.float())),
                           out(L.EXACT, p64, x64, gate_scaled=False), "gate_scaled=False")


def convention_qk_norm(case: LayerCase) -> Result:
    """q and k handed to the op: RMS-normalised as declared for the tree (history path.qk_norm: per head from
    2025-10-03, over the flat projection before), the other form more than 10x the budget away."""
    layer, p64, p32, _spec = setup(case, 0)
    x, x64 = hidden_states(case, 100, 1, 32, layer.hidden_size)
    stub = lambda q, v, **_: (torch.zeros_like(q), None)
    with captured(case, stub) as seen, torch.no_grad():
        call(layer, x)
    flat = history.value("path.qk_norm") == "flat"

    def qk(ar, p, xx, flat):
        st = L.path_stages(ar, p, xx, spec_of(case, layer, qk_norm_flat=flat))
        return torch.cat([st["q"].flatten(), st["k"].flatten()])
    with torch.no_grad():
        got = torch.cat([seen["q"].flatten(), seen["k"].flatten()])
        return _convention(case, "stages q, k", (got, qk(L.EXACT, p64, x64, flat),
                                                 qk(SameDtype(precision(case)), p32, x64.float(), flat)),
                           qk(L.EXACT, p64, x64, not flat), "per head" if flat else "over the flat projection")


def convention_gate_dtype(case: LayerCase) -> Result:
    """beta and w handed to the op in the dtype declared for the tree (history path.gate_dtype: float32 from
    2025-10-03, the layer's before), with the values of the literal that stores them so."""
    layer, p64, p32, spec = setup(case, 0)
    x, x64 = hidden_states(case, 100, 1, 32, layer.hidden_size)
    stub = lambda q, v, **_: (torch.zeros_like(q), None)
    with captured(case, stub) as seen, torch.no_grad():
        call(layer, x)
    declared = history.value("path.gate_dtype")
    want = torch.float32 if declared == "fp32" else precision(case).torch_dtype
    got = {n: seen[n].dtype for n in ("beta", "w")}
    if any(d != want for d in got.values()):
        return Result("fail", message=f"declared {declared} ({want}), the op receives {got}: DECLARED CONVENTION "
                      "NOT CONFIRMED", kind="over_budget")
    with torch.no_grad():
        truth = L.path_stages(L.EXACT, p64, x64, spec)
        same = L.path_stages(SameDtype(precision(case)), p32, x64.float(), spec)
    res = judge(case, [(f"stage {n}", seen[n], truth[n], same[n]) for n in ("beta", "w")], C["fwd"],
                f"beta and w in {want}")
    res.message += "; declared convention " + ("confirmed" if res.status == "pass" else "NOT CONFIRMED")
    return res


COMPARISONS = {
    "train": (("forward at T around the 64-token chunk, the op's inputs (q, k, v and the gates; PaTH's w, beta) and "
              "the gradients of the input and every parameter against the float64 literal"), train),
    "generation": (("prefill with a Cache then one-token decoding against the literal (outputs per generated-length "
                   "bucket; PaTH's key cache against decode_cache)"), generation),
    "padding": ("a left-padded batch prefilled with a Cache then decoded, against each unpadded sequence", padding),
    "mask": ("attention_mask (left and interior padding) without a cache, against each unpadded sequence", mask),
    "continuation": (("prefill, then multi-token calls with the cache (a chunked prefill, a speculative step), then "
                      "one token at a time, against the literal's full forward"), continuation),
    "mask-reused": (("attention_mask refilled in place between two calls (the same tensor object), against each "
                     "unpadded sequence"), mask_reused),
    "cache-ops": (("the cache repeated per return sequence, reordered as a beam step and cropped, then decoded, "
                   "against decoding each row's history from scratch (PaTH's crop must refuse: its cache holds the "
                   "w convolution's state)"), cache_operations),
}
PATH_COMPARISONS = {**COMPARISONS,
                    "convention-silu": ("declared: SiLU after the w short convolution (the paper has none)",
                                        convention_silu),
                    "convention-gate_scaled": ("declared: the forget gate multiplied by the attention scale",
                                               convention_gate_scaled),
                    "convention-qk-norm": ("declared per tree: q / k RMS-normalised per head (before 2025-10-03 over "
                                           "the flat projection)", convention_qk_norm),
                    "convention-gate-dtype": ("declared per tree: beta and w reach the op in float32 (before "
                                              "2025-10-03 in the layer's dtype)", convention_gate_dtype)}

PATH_DECLARED = {   # comparison -> (variant, dtype) pairs that exist
    "train": {("base", "bf16"), ("base", "fp32"), ("gate-gqa", "fp32"), ("qknorm", "fp32")},
    "generation": {("base", "bf16"), ("base", "fp32"), ("gate-gqa", "fp32"), ("qknorm", "fp32")},
    "padding": {("base", "fp32")},
    "mask": {("base", "fp32")},
    "continuation": {("base", "fp32")},
    "cache-ops": {("base", "fp32")},
    "mask-reused": set(),          # PaTHAttention refuses a mask without a cache (layer.fla.path.base.fp32.mask)
    "convention-silu": {("base", "fp32")},
    "convention-gate_scaled": {("gate-gqa", "fp32")},
    "convention-qk-norm": {("qknorm", "fp32")},
    "convention-gate-dtype": {("base", "bf16")},
}
FOX_DECLARED = {
    "train": {("base", "bf16"), ("base", "fp32"), ("options", "fp32")},
    "generation": {("base", "bf16"), ("base", "fp32"), ("window", "fp32")},
    "padding": {("base", "fp32")},
    "mask": {("base", "fp32")},
    "continuation": {("base", "fp32")},
    "cache-ops": {("base", "fp32")},
    "mask-reused": {("base", "fp32")},
}

PATH_FILE, FOX_FILE = "layers/path_attn.py", "layers/forgetting_attn.py"
PATH_MUTANTS = (
    Mutant("layer_path_beta_halved", "PaTHAttention: beta = sigmoid(bt_proj x) (the factor 2 dropped: no negative "
           "eigenvalues)", PATH_FILE, "beta = self.bt_proj(hidden_states).float().sigmoid() * 2",
           "beta = self.bt_proj(hidden_states).float().sigmoid()", ("layer.fla.path.base.fp32.train",)),
    Mutant("layer_path_qk_norm_skipped", "PaTHAttention: the q/k RMSNorm skipped in the training forward",
           PATH_FILE, "            q, k = self.maybe_q_norm(q), self.maybe_k_norm(k)\n", "",
           ("layer.fla.path.qknorm.fp32.train",)),
    Mutant("layer_path_cache_update_no_beta", "PaTHAttention decoding: the key cache updated with beta = 1 "
           "(k <- k - w (w^T k))", PATH_FILE,
           "k = k - beta[..., None].float() * (k * w).sum(-1, keepdim=True) * w",
           "k = k - (k * w).sum(-1, keepdim=True) * w", ("layer.fla.path.base.fp32.generation",)),
    Mutant("layer_path_prefill_cache_right_aligned", "PaTHAttention prefill: the key cache of a padded batch put "
           "back at the first positions (right-aligned) instead of the valid ones", PATH_FILE,
           "k_cache = pad_input(k_cache.squeeze(0), indices_q, batch_size, q_len)",
           "k_cache = pad_input(k_cache.squeeze(0), torch.arange(k_cache.shape[1], device=k_cache.device), "
           "batch_size, q_len)", ("layer.fla.path.base.fp32.padding",)),
)
FOX_MUTANTS = (
    Mutant("layer_fox_decode_gate_scaled", "ForgettingAttention decoding: the forget gate multiplied by the "
           "attention scale in the one-step kernel (training's convention is unscaled)", FOX_FILE,
           "o = attn_decoding_one_step(q, k, v, f, cu_seqlens=cu_seqlens)",
           "o = attn_decoding_one_step(q, k, v, f, cu_seqlens=cu_seqlens, do_gate_scale=True)",
           ("layer.fla.fox.base.fp32.generation",)),
    Mutant("layer_cache_repeat_tiled", "fla's Cache: batch_repeat_interleave tiles the batch (rows 0, 1, 0, 1) instead "
           "of repeating each row in place (0, 0, 1, 1): the return sequences decode from the wrong prompts",
           "models/cache_utils.py", "value.repeat_interleave(repeats, dim=0)",
           "value.repeat(repeats, *[1] * (value.dim() - 1))",
           ("layer.fla.fox.base.fp32.cache-ops", "layer.fla.gdn.default.fp32.cache-ops"), count=2),
    Mutant("layer_fox_mask_passed_whole", "ForgettingAttention: the attention_mask handed to unpad_input as the "
           "caller's object instead of its slice, so fla's identity-keyed tensor_cache answers a refilled mask with "
           "the previous call's padding", FOX_FILE, "            attention_mask = attention_mask[:, -k.shape[1]:]\n",
           "", ("layer.fla.fox.base.fp32.mask-reused",)),
)

def _literal_of(case: LayerCase, layer, p: dict, x, exact: bool):
    """The literal's output of one sequence (pathmdn_verify.layers.calls): PaTH's or FoX's, the case's options in
    its Spec."""
    fwd, _ = literal(case)
    return fwd(L.EXACT if exact else SameDtype(precision(case)), p, x, spec_of(case, layer))[0]


GQA_SIZES = lambda case, row: {"hidden_size": 64, "num_heads": 4, "layer_idx": 0}   # head dim 16; kv heads 4, 2, 1
SIZES_WHY = Why("a size: hidden 64 and 4 query heads (head dim 16, the ops' smallest) in every case")
SLOT_WHY = Why("the cache slot: every case is one layer, at slot 0")
NO_ATTENTIONS = Why("the layer returns no attention weights (None) whatever it is given")
CONTINUATION_WHY = Why("more than one token with a non-empty cache is refused: the finding of the layer's "
                       "continuation check (AssertionError / NotImplementedError / TorchRuntimeError by the tree)")
ATTENTION_FORWARD = {"hidden_states": "q_len", "attention_mask": "input", "past_key_values": "cache",
                     "use_cache": "cache", "output_attentions": NO_ATTENTIONS, "cu_seqlens": "input",
                     "**kwargs": Why("its other keys are ignored: the ones the forward reads are listed (cu_seqlens)")}

PATH_CALLS = Calls(
    constructor={"hidden_size": SIZES_WHY, "num_heads": SIZES_WHY, "num_kv_heads": (None, 2, 1),
                 "use_forget_gate": (False, True), "use_qk_norm": (False, True), "layer_idx": SLOT_WHY,
                 "use_low_rank_w": (True, False), "use_w_shortconv": (True, False), "conv_size": (3, 4),
                 "conv_bias": (False, True)},
    forward=ATTENTION_FORWARD, sizes=GQA_SIZES, literal=_literal_of, c_fwd=C["fwd"], c_bwd=C["bwd"],
    levels={"cache": ("none", "step")},
    left_out={"cache=segments": CONTINUATION_WHY, **dict.fromkeys(("cache=train-segments", "cache=train-short"),
                                                                    Why("training asserts use_cache is False"))},
    excluded=(({"input": ("mask",), "cache": ("none",)}, "an attention_mask without a cache raises TypeError: the "
               "finding layer.fla.path.base.fp32.mask"),
              ({"input": ("dense",), "cache": ("step",)}, "PaTHAttention decodes only given an attention_mask (without "
               "one it takes the training branch, which asserts use_cache is False); the all-ones mask is the "
               "generation check's"),
              ({"use_qk_norm": (True,), "cache": ("step",)}, "the prefill / decode branch skips the q/k norm (from "
               "2025-10-03): the finding layer.fla.path.qknorm.fp32.generation"),
              *(({"use_w_shortconv": (False,), o: (v,)}, f"{o}={v} acts only through the w convolution")
                for o, v in (("conv_size", 4), ("conv_bias", True)))),
    explained=tuple(({o: (v,)}, "path.w_options") for o, v in (("use_low_rank_w", False), ("conv_size", 4),
                                                               ("conv_bias", True)))
    + (({"input": ("mask+cu_seqlens",)}, "path.mask_and_cu_seqlens"),))
FOX_CALLS = Calls(
    constructor={"hidden_size": SIZES_WHY, "num_heads": SIZES_WHY, "num_kv_heads": (None, 2, 1),
                 "qkv_bias": (False, True), "qk_norm": (False, True), "use_output_gate": (False, True),
                 "window_size": Why("the forward never hands it to the op, only the cache keeps a window: the finding "
                                    "layer.fla.fox.window.fp32.generation, which a case with it would show again"),
                 "layer_idx": SLOT_WHY},
    forward=ATTENTION_FORWARD, sizes=GQA_SIZES, literal=_literal_of, c_fwd=C["fwd"], c_bwd=C["bwd"],
    levels={"cache": ("none", "step")},
    left_out=dict.fromkeys(("cache=segments", "cache=train-segments", "cache=train-short"), CONTINUATION_WHY),
    excluded=(({"input": ("dense",), "cache": ("step",)}, "ForgettingAttention decodes only given an attention_mask "
               "(without one it asserts q_len == kv_len); the all-ones mask is the generation check's"),),
    explained=(({"input": ("mask+cu_seqlens",)}, "fox.mask_and_cu_seqlens"),))

MODULE_MUTANTS_PATH = (
    Mutant("layer_path_conv_bwd_bias_per_tap", "ShortConvolution backward (PaTHAttention's w convolution): the bias "
           "gradient accumulated at every tap instead of the first (W times too large); reached only by training "
           "with conv_bias=True", "modules/causal_conv1d/ops.py", "if HAS_BIAS and i_w == 0:", "if HAS_BIAS:",
           case_ids("path", PATH_CALLS, conv_bias=True, phase="train"), count=3),)
MODULE_MUTANTS_FOX = (
    Mutant("layer_fox_group_norm_dw_partial", "layer_norm backward (ForgettingAttention's q/k GroupNorm, "
           "PaTHAttention's q/k RMSNorm): each group's weight gradient is its first program's partial sum only, "
           "whole only while the SM count gives one program per group (a CPU's 1, not the H200's 132)",
           "modules/norm/layernorm.py", "dw = dw.view(G, -1, D).sum(1).to(weight)",
           "dw = dw.view(G, -1, D)[:, :1].sum(1).to(weight)",
           ("layer.fla.fox.options.fp32.train", "layer.fla.path.qknorm.fp32.train")),
    Mutant("layer_fox_decode_gqa_heads", "attn_decoding_one_step (ForgettingAttention's and PaTHAttention's "
           "decoding): query head i reads key / value head i mod H instead of i // G (the same head whenever H is "
           "1 or every head has its own)", "ops/attn/decoding.py", "i_h = i_hq // G", "i_h = i_hq % H",
           case_ids("fox", FOX_CALLS, num_kv_heads=2, cache="step")
           + case_ids("path", PATH_CALLS, num_kv_heads=2, cache="step")))

PATH = add(LayerRecord(
    name="path", module="fla.layers.path_attn", cls="PaTHAttention",
    description="PaTH attention: projections, beta = 2 sigmoid, low-rank w with a short convolution and L2 norm, "
                "optional forget gate and q/k RMSNorm, GQA; Householder key cache for decoding",
    variants={"base": {}, "qknorm": {"use_qk_norm": True}, "gate-gqa": {"use_forget_gate": True, "num_kv_heads": 1}},
    comparisons=PATH_COMPARISONS, declared=lambda v, d, c: (v, d) in PATH_DECLARED[c],
    mutants=PATH_MUTANTS + MODULE_MUTANTS_PATH, calls=PATH_CALLS))

FOX = add(LayerRecord(
    name="fox", module="fla.layers.forgetting_attn", cls="ForgettingAttention",
    description="Forgetting attention: projections, f = log sigmoid(f_proj x), optional q/k norm, output gate and "
                "sliding window",
    variants={"base": {}, "window": {"window_size": WINDOW},
              "options": {"qk_norm": True, "use_output_gate": True, "qkv_bias": True}},
    comparisons=COMPARISONS, declared=lambda v, d, c: (v, d) in FOX_DECLARED[c],
    mutants=FOX_MUTANTS + MODULE_MUTANTS_FOX, calls=FOX_CALLS))
