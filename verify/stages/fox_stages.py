"""fla FoX (forgetting attention), stage by stage (fla/ops/forgetting_attn/parallel.py, which runs
fla/ops/attn/parallel.py's ParallelAttentionFunction).

The forward (and, for a backward check, the backward) runs unchanged; the functions it calls are captured
(stages.capturing) and so are the launches of the backward's two kernels (stages.launches), whose results the
launching function never returns.  Each result is compared, sequence by sequence and query head by query
head, with the softmax-attention equations in float64 (docs/design.md section 4; references/path_oracle.py),
scores s_ij = scale q_i.k_j + G_i - G_j for j <= i (fla's declared gate_scaled=False), G = cumsum g:

  gate cumsum       chunk_global_cumsum            G per sequence (fla keeps G / ln 2), as the forward kernel
                                                   receives it
  softmax stats     parallel_attn_fwd_kernel       lse_i = logsumexp_j s_ij (fla: (row max + log2 of the row
                                                   sum) in base 2)
  output o          parallel_attn_fwd_kernel       softmax(s) V
Backward (one upstream gradient dO drawn from a fixed seed), with P = softmax(s), dS = P .* (dO V^T - delta):
  delta             parallel_attn_bwd_preprocess   rowsum(O * dO), O the exact output
  dq kernel         parallel_attn_bwd_kernel_dq    dq = scale dS K, and (gate) dg_q = rowsum dS (= 0 exactly)
  dk/dv kernel      parallel_attn_bwd_kernel_dkv   per query head dk = scale dS^T Q, dv = P^T dO, and (gate)
                                                   dg_k = -colsum dS
  gradients         the autograd backward          dq, dk, dv, dg after the GQA sums and the gate's reverse
                                                   cumsum: autograd of the oracle
The logits with the gate, the row max and the probabilities stay in the kernels' registers: a bug there shows
first in lse (forward) or in the dq kernel's results (backward).  The same-dtype values come from the same
equations in fp32 with the dtype's rounded products (pathmdn_verify.same_dtype.fox_attn's softmax and storage).
"""
from __future__ import annotations

import math

import torch

from pathmdn_verify import same_dtype
from pathmdn_verify.core.errors import KernelUnavailable
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import scale_of
from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify.stages import Stage, capturing, judge_gradients, launches

MODULE = "fla.ops.attn.parallel"
FORWARD = ("parallel_attn_fwd",)
BACKWARD = ("parallel_attn_bwd_preprocess",)
KERNELS = {"parallel_attn_bwd_kernel_dq": ("dq", "dg_cumsum"),
           "parallel_attn_bwd_kernel_dkv": ("dk", "dv", "dg_cumsum")}
FLOATS = ("q", "k", "v", "g")
LN2 = math.log(2.0)


def run(x: dict, scale: float, do: torch.Tensor | None) -> tuple[dict, dict, dict]:
    """fla's parallel_forgetting_attn on x, forward (and backward with upstream do), its stages captured.
    Returns ({function: [(args, kwargs, outputs), ...]}, {kernel: {argument: tensor}}, {input: gradient})."""
    from pathmdn_verify.core.engine import grads_of
    mod = fla_ops._import(MODULE)
    kernel = lambda **a: fla_ops.forgetting_attn(a["q"], a["k"], a["v"], a["g"], scale, a["cu_seqlens"])
    names = FORWARD + (BACKWARD if do is not None else ())
    with capturing(mod, names) as calls, launches(mod, KERNELS if do is not None else {}) as launched:
        if do is None:
            with torch.no_grad():
                kernel(**x)
            grads = {}
        else:
            grads = grads_of(lambda **kw: kernel(**{**x, **kw}), {n: x[n] for n in FLOATS if x[n] is not None},
                             lambda outs: [do])
    expected = {n: 1 for n in names + (tuple(KERNELS) if do is not None else ())}
    found = {n: len(c) for n, c in (calls | launched).items()}
    if any(found[n] != k for n, k in expected.items()):
        raise KernelUnavailable(f"{mod.__file__}: calls {found}, not {expected}; localize knows fla-core 0.6.0's "
                                "ParallelAttentionFunction")
    return calls, {n: c[0] for n, c in launched.items() if c}, grads


def _head(q, k, v, g, scale, mm, store=lambda t: t) -> dict:
    """One head's scores s, lse, P, O (O rounded by `store`) in the dtype of q; g None: no gate."""
    s = P.scores(P.plain_logits(q, k, mm), None if g is None else P.gate_matrix(g), scale)
    p = torch.softmax(s, dim=-1) if q.dtype == torch.float64 else same_dtype._softmax(s)
    return {"G": None if g is None else torch.cumsum(g, 0), "lse": torch.logsumexp(s, dim=-1), "P": p,
            "O": store(mm(p, v))}


def _head_grads(h: dict, q, k, v, do, scale, mm) -> dict:
    """The backward's per-kernel results of one head from its forward h: delta, dS and what each kernel writes."""
    delta = (h["O"] * do).sum(-1)
    dS = h["P"] * (mm(do, v.T) - delta[:, None])
    # rowsum dS = rowsum(P .* dP) - delta = 0 exactly: the oracle is 0 and the same-dtype value its rounding noise
    dg_q = torch.zeros_like(delta) if q.dtype == torch.float64 else dS.sum(1)
    return {"delta": delta, "dq": scale * mm(dS, k), "dg_q": dg_q, "dk": scale * mm(dS.T, q),
            "dv": mm(h["P"].T, do), "dg_k": -dS.sum(0)}


def stages(op, x: dict, dtype: str, fp32_dot: str, backward: bool = False) -> list[Stage]:
    """Run the kernel on x and return its stages, in the order it computes them."""
    assert not fla_ops.FOX_CONVENTIONS.gate_scaled, "the stage definitions follow fla's declared gate_scaled=False"
    scale = scale_of(x)
    wide, fp32 = Precision.of_op(op, dtype, fp32_dot), Precision.of_op(op, "fp32", fp32_dot)
    lse_prec = Precision("fp32", wide.dot)      # an fp32 tensor from the dtype's dots
    x64, x32 = as_oracle(x), floats_as(x, torch.float32)
    do = None
    if backward:
        shape = (*x["q"].shape[:3], x["v"].shape[-1])
        do = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(x["q"])
    calls, launched, grads = run(x, scale, do)
    o_k, lse_k = calls["parallel_attn_fwd"][0][2]
    rows = [("gate cumsum", "chunk_global_cumsum", fp32, "fwd"),
            ("softmax statistics: lse", "parallel_attn_fwd_kernel", lse_prec, "fwd"),
            ("output o", "parallel_attn_fwd_kernel", wide, "fwd")]
    if backward:
        rows += [("bwd: delta = rowsum(O dO)", "parallel_attn_bwd_preprocess", wide, "bwd"),
                 ("bwd: dq kernel (dq, dg_q)", "parallel_attn_bwd_kernel_dq", wide, "bwd"),
                 ("bwd: dk/dv kernel (dk, dv, dg_k)", "parallel_attn_bwd_kernel_dkv", wide, "bwd"),
                 ("bwd: gradients", "ParallelAttentionFunction.backward", wide, "bwd")]
        delta_k = calls["parallel_attn_bwd_preprocess"][0][2][0]
        dq_k, dkv_k = launched["parallel_attn_bwd_kernel_dq"], launched["parallel_attn_bwd_kernel_dkv"]
    S = {n: Stage(n, src, p, pass_) for n, src, p, pass_ in rows}
    B, T, HQ, _ = x["q"].shape
    G = HQ // x["k"].shape[2]
    for b in range(B):
        for s0, e0 in P.segments(T, x["cu_seqlens"]):
            for hq in range(HQ):
                hd = [{n: None if d[n] is None else d[n][b, s0:e0, hq if n in ("q", "g") else hq // G]
                       for n in FLOATS} for d in (x64, x32)]
                ref = [_head(*(h[n] for n in FLOATS), scale, mm, store)
                       for h, mm, store in ((hd[0], torch.matmul, lambda t: t), (hd[1], wide.mm, wide.store))]
                at = (b, slice(s0, e0), hq)
                if x["g"] is not None:
                    S["gate cumsum"].piece("G").add(calls["parallel_attn_fwd"][0][1]["g_cumsum"][at].double() * LN2,
                                                    ref[0]["G"], ref[1]["G"])
                S["softmax statistics: lse"].piece("lse").add(lse_k[at].double() * LN2, ref[0]["lse"], ref[1]["lse"])
                S["output o"].piece("o").add(o_k[at], ref[0]["O"], ref[1]["O"])
                if not backward:
                    continue
                do_h = [do[at].to(t) for t in (torch.float64, torch.float32)]
                gr = [_head_grads(r, h["q"], h["k"], h["v"], d, scale, mm)
                      for r, h, d, mm in zip(ref, hd, do_h, (torch.matmul, wide.mm))]
                pick = lambda name: (gr[0][name], gr[1][name])
                S["bwd: delta = rowsum(O dO)"].piece("delta").add(delta_k[at], *pick("delta"))
                st = S["bwd: dq kernel (dq, dg_q)"]
                st.piece("dq").add(dq_k["dq"][at], *pick("dq"))
                if x["g"] is not None:
                    st.piece("dg_q").add(dq_k["dg_cumsum"][at], *pick("dg_q"))
                st = S["bwd: dk/dv kernel (dk, dv, dg_k)"]
                st.piece("dk").add(dkv_k["dk"][at], *pick("dk"))
                st.piece("dv").add(dkv_k["dv"][at], *pick("dv"))
                if x["g"] is not None:
                    st.piece("dg_k").add(dkv_k["dg_cumsum"][at], *pick("dg_k"))
    if backward:
        judge_gradients(S["bwd: gradients"], op, x, grads, [do], wide)
    return [st for st in S.values() if st.tensors]

