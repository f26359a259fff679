"""fla PaTH, stage by stage (fla/ops/path_attn/parallel.py, ParallelPATHAttentionFunction).

The forward (and, for a backward check, the backward) runs unchanged; the stage functions it calls are
captured (stages.capturing) and each result is compared, block by block (BS tokens, the block the kernels
use), with references/path_oracle.py:

  gate cumsum      chunk_global_cumsum            G = cumsum g (per sequence)
  A = beta W W^T   chunk_scaled_dot_kkt_fwd       strictLower(diag(beta) W W^T)
  U (UT solve)     solve_tril, times diag(beta)   U = (I + A)^{-1} diag(beta)       block_transform["U"]
  Qbar, Kbar       intra_chunk_preprocess_fwd_fn  q_new, k_new                      block_transform["Qbar"/"Kbar"]
  F (transition)   intra_chunk_preprocess_fwd_fn  I - W^T w2 with w2 = U W, is F^T  block_transform["F"]
  in-block attn    intra_chunk_preprocess_fwd_fn  o/L and (M + log2 L) ln 2: softmax and lse over the block's
                                                  own logits block_transform["A_local"]
  scan lse, o      parallel_path_fwd_fn           (L_new ln 2, o_new): the right-to-left scan over the key
                                                  blocks, against the blockwise logits of every block
Backward (one upstream gradient dO drawn from a fixed seed):
  delta            parallel_attn_bwd_preprocess   rowsum(O * dO), O the exact output
  recomputed       intra_chunk_preprocess_bwd_    Qbar, Kbar, F again (q_new, k_new, h)
  in-block grads   prepare_fn                     dA = scale P .* (dO V^T - delta), dv = P^T dO and (gate)
                                                  dg = rowsum dA - colsum dA over the block's own entries,
                                                  P = exp(scores - lse) with the full row's lse
  gradients        (the cross-block kernels)      dq, dk, dv, dw, dbeta, dg: autograd of the oracle
The scan's per-block logits, and the cross-block backward kernels' partial gradients, stay inside their
kernels: a bug there shows first in the output (forward) or the gradients (backward).
Precision: the W-only stages run in fp32 whatever q's dtype (fla keeps w, beta, A, U in fp32); the
others in the check's dtype.  scale * (logit + gate) is fla's declared convention (gate_scaled=True).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify import same_dtype
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import scale_of
from pathmdn_verify.stages import Stage, capturing
from pathmdn_verify.core.errors import KernelUnavailable

FORWARD = ("chunk_global_cumsum", "chunk_scaled_dot_kkt_fwd", "solve_tril", "intra_chunk_preprocess_fwd_fn",
           "parallel_path_fwd_fn")
BACKWARD = ("parallel_attn_bwd_preprocess", "intra_chunk_preprocess_bwd_prepare_fn")
FLOATS = ("q", "k", "v", "w", "beta", "g")
LN2 = math.log(2.0)


def run(x: dict, scale: float, do: torch.Tensor | None) -> tuple[dict, dict]:
    """fla's parallel_path_attn on x, forward (and backward with upstream do), every stage call captured.
    Returns ({function: (args, kwargs, outputs)}, {input name: gradient} or {})."""
    from pathmdn_verify.core.engine import grads_of
    mod = fla_ops._import("fla.ops.path_attn.parallel")
    names = FORWARD + (BACKWARD if do is not None else ())
    entry = getattr(mod, "parallel_path_attn", None) or mod.parallel_path_attention    # the name before fla 0.3.2
    kernel = lambda **a: entry(a["q"], a["k"], a["v"], a["w"], a["beta"], a["g"], scale,
                                                a["cu_seqlens"])[0]
    with capturing(mod, names) as calls:
        if do is None:
            with torch.no_grad():
                kernel(**x)
            grads = {}
        else:
            leaves = {n: x[n] for n in FLOATS if x[n] is not None}
            grads = grads_of(lambda **kw: kernel(**{**x, **kw}), leaves, lambda outs: [do])
    missing = [n for n in names[1:] if len(calls[n]) != 1]
    if missing:
        raise KernelUnavailable(f"{mod.__file__}: does not call {', '.join(missing)} once each; "
                                        "localize knows fla-core 0.6.0's PaTH")
    return {n: c[0] for n, c in calls.items() if c}, grads


def _attention(logits, v, g, scale, mm):
    """(softmax(scores) V, logsumexp(scores)) of one head, scores = scale * (logits + gate)."""
    s = P.scores(logits, None if g is None else P.gate_matrix(g), scale, gate_scaled=True)
    return P.attend(logits, v, g, scale, True, mm), torch.logsumexp(s, dim=-1)


def _block_grads(A_local, g, v, do, lse, delta, scale, mm) -> dict:
    """The backward's in-block quantities of one block: P = exp(scores - lse) on the block's own causal
    entries, dA = scale P .* (dO V^T - delta), dv = P^T dO, dg = rowsum dA - colsum dA."""
    s = P.scores(P.causal_mask(A_local), None if g is None else P.gate_matrix(g), scale, gate_scaled=True)
    p = torch.exp(s - lse[:, None])
    dA = scale * p * (mm(do, v.T) - delta[:, None])
    return {"dA": dA, "dv": mm(p.T, do), "dg": dA.sum(1) - dA.sum(0)}


def _stage_table(wide: Precision, fp32: Precision, backward: bool) -> dict[str, Stage]:
    rows = [("gate cumsum", "chunk_global_cumsum", fp32, "fwd"),
            ("A = beta W W^T", "chunk_scaled_dot_kkt_fwd", fp32, "fwd"),
            ("U (UT solve)", "solve_tril", fp32, "fwd"),
            ("Qbar", "intra_chunk_preprocess_fwd_fn", wide, "fwd"),
            ("Kbar", "intra_chunk_preprocess_fwd_fn", wide, "fwd"),
            ("F (block transition)", "intra_chunk_preprocess_fwd_fn", fp32, "fwd"),
            ("in-block attention", "intra_chunk_preprocess_fwd_fn", wide, "fwd"),
            ("cross-block scan: lse", "parallel_path_fwd_fn", wide, "fwd"),
            ("output o", "parallel_path_fwd_fn", wide, "fwd")]
    if backward:
        rows += [("bwd: delta = rowsum(O dO)", "parallel_attn_bwd_preprocess", wide, "bwd"),
                 ("bwd: Qbar, Kbar, F recomputed", "intra_chunk_preprocess_bwd_prepare_fn", wide, "bwd"),
                 ("bwd: in-block dA, dv, dg", "intra_chunk_preprocess_bwd_prepare_fn", wide, "bwd"),
                 ("bwd: gradients", "backward (cross-block kernels)", wide, "bwd")]
    return {n: Stage(n, src, p, pass_) for n, src, p, pass_ in rows}


@dataclass(frozen=True)
class _Walk:
    """What every head and block of one `stages` call reads: the stages it fills, the kernel's captured tensors
    (`_captured`), the scale, the precisions and the backward's upstream gradient (None: forward only)."""
    S: dict[str, Stage]
    k: dict
    scale: float
    wide: Precision
    fp32: Precision
    do: torch.Tensor | None
    eye: torch.Tensor


def stages(op, x: dict, dtype: str, fp32_dot: str, backward: bool = False) -> list[Stage]:
    """Run the kernel on x (its inputs) and return its stages, in the order it computes them."""
    assert fla_ops.PATH_CONVENTIONS.gate_scaled, "the stage definitions follow fla's declared gate_scaled=True"
    scale = scale_of(x)
    wide, fp32 = Precision.of_op(op, dtype, fp32_dot), Precision.of_op(op, "fp32", fp32_dot)
    x64, x32 = as_oracle(x), floats_as(x, torch.float32)
    do = None
    if backward:
        shape = (*x["q"].shape[:3], x["v"].shape[-1])
        do = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(x["q"])
    calls, grads = run(x, scale, do)
    eye = torch.eye(x["q"].shape[-1], dtype=torch.float64, device=x["q"].device)
    walk = _Walk(_stage_table(wide, fp32, backward), _captured(calls, backward), scale, wide, fp32, do, eye)
    B, T, HQ, _ = x["q"].shape
    G = HQ // x["k"].shape[2]
    for b in range(B):
        for s0, e0 in P.segments(T, x["cu_seqlens"]):
            for hq in range(HQ):
                hd = [{n: None if d[n] is None else d[n][b, s0:e0, (hq if n in ("q", "g") else hq // G)]
                       for n in FLOATS} for d in (x64, x32)]
                _head(walk, hd, b, s0, hq, hq // G, hq % G == 0)
    if backward:
        _gradients(walk.S["bwd: gradients"], x64, x32, grads, do, wide, scale)
    return [st for st in walk.S.values() if st.tensors]


def _captured(calls: dict, backward: bool) -> dict:
    """The kernel's tensors the stages read, by name, from `run`'s captured calls."""
    k = {"BS": calls["intra_chunk_preprocess_fwd_fn"][1]["BT"], "A": calls["chunk_scaled_dot_kkt_fwd"][2][0],
         "Tinv": calls["solve_tril"][2][0]}
    if "chunk_global_cumsum" in calls:        # called with a gate only
        k["G"] = calls["chunk_global_cumsum"][2][0]
    k |= dict(zip(("q_new", "k_new", "w2", "o_loc", "L_loc", "M_loc"), calls["intra_chunk_preprocess_fwd_fn"][2],
                  strict=True))
    k |= dict(zip(("o", "L"), calls["parallel_path_fwd_fn"][2], strict=True))
    if backward:
        k["delta"] = calls["parallel_attn_bwd_preprocess"][2][0]
        k |= dict(zip(("bq_new", "bk_new", "h", "dA", "dv", "dg"), calls["intra_chunk_preprocess_bwd_prepare_fn"][2],
                      strict=True))
    return k


def _head(w: _Walk, hd: list[dict], b: int, s0: int, hq: int, kh: int, first: bool) -> None:
    """One query head hq of the sequence starting at s0 (hd: its float64 and fp32 inputs): the gate cumsum, the
    scan's lse and the output (and the backward's delta) against the blockwise logits of every block, then each
    block (the key head kh's own stages where first, the head of its group that reads them)."""
    S, k, e0 = w.S, w.k, s0 + hd[0]["q"].shape[0]
    if hd[0]["g"] is not None:
        S["gate cumsum"].piece("G").add(k["G"][b, s0:e0, hq], torch.cumsum(hd[0]["g"], 0), torch.cumsum(hd[1]["g"], 0))
    full = [_attention(P.blockwise_logits(h["q"], h["k"], h["w"], h["beta"], k["BS"], mm)[2], h["v"], h["g"], w.scale,
                       mm) for h, mm in ((hd[0], torch.matmul), (hd[1], w.wide.mm))]
    S["cross-block scan: lse"].piece("lse").add(k["L"][b, s0:e0, hq].double() * LN2, full[0][1], full[1][1])
    S["output o"].piece("o").add(k["o"][b, s0:e0, hq], full[0][0], w.wide.store(full[1][0]))
    upstream = None
    if w.do is not None:
        do_h = [w.do[b, s0:e0, hq].to(t) for t in (torch.float64, torch.float32)]
        delta = [(full[0][0] * do_h[0]).sum(-1), (w.wide.store(full[1][0]) * do_h[1]).sum(-1)]
        S["bwd: delta = rowsum(O dO)"].piece("delta").add(k["delta"][b, s0:e0, hq], *delta)
        upstream = (do_h, full, delta)
    for s in range(0, e0 - s0, k["BS"]):
        e = min(s + k["BS"], e0 - s0)
        o64, o32 = ({n: None if t is None else t[s:e] for n, t in h.items()} for h in hd)
        tr = P.block_transform(o64["q"], o64["k"], o64["w"], o64["beta"])
        tr32 = P.block_transform(o32["q"], o32["k"], o32["w"], o32["beta"], w.wide.mm)
        at = (b, slice(s0 + s, s0 + e))
        if first:
            _block_keys(w, (o64, o32), tr, tr32, at, kh)
        _block_queries(w, (o64, o32), tr, tr32, at, hq, upstream and (s, e, *upstream))


def _block_keys(w: _Walk, blk: tuple[dict, dict], tr: dict, tr32: dict, at: tuple, kh: int) -> None:
    """One block's stages of key head kh (rows `at`): A, U and F (W-only: in fp32), Kbar, and their backward
    recomputation."""
    S, k, (o64, o32) = w.S, w.k, blk
    n = o64["w"].shape[0]
    rows = (*at, kh)
    tr_w = P.block_transform(o32["q"], o32["k"], o32["w"], o32["beta"], w.fp32.mm)  # W-only stages
    w64, w32 = o64["w"], o32["w"]
    S["A = beta W W^T"].piece("A").add(   # the UT system of ut_factor, less its I
        k["A"][(*rows, slice(None, n))], torch.tril(o64["beta"][:, None] * (w64 @ w64.T), -1),
        torch.tril(o32["beta"][:, None] * w.fp32.mm(w32, w32.T), -1))
    S["U (UT solve)"].piece("U").add(k["Tinv"][(*rows, slice(None, n))].double() * o64["beta"][None, :], tr["U"],
                                     tr_w["U"])
    S["Kbar"].piece("Kbar").add(k["k_new"][rows], tr["Kbar"], tr32["Kbar"])
    S["F (block transition)"].piece("F").add((w.eye - w64.T @ k["w2"][rows].double()).T, tr["F"], tr_w["F"])
    if w.do is not None:
        st = S["bwd: Qbar, Kbar, F recomputed"]
        st.piece("Kbar").add(k["bk_new"][rows], tr["Kbar"], tr32["Kbar"])
        st.piece("F").add((w.eye - w64.T @ k["h"][rows].double()).T, tr["F"], tr_w["F"])


def _block_queries(w: _Walk, blk: tuple[dict, dict], tr: dict, tr32: dict, at: tuple, hq: int, upstream) -> None:
    """One block's stages of query head hq (rows `at`): Qbar, the in-block attention, and in the backward (upstream:
    the block's first and end row in its sequence, the head's do, full attention and delta) their recomputation
    and the in-block dA, dv, dg."""
    S, k, (o64, o32) = w.S, w.k, blk
    rows = (*at, hq)
    S["Qbar"].piece("Qbar").add(k["q_new"][rows], tr["Qbar"], tr32["Qbar"])
    local = [_attention(P.causal_mask(t["A_local"]), h["v"], h["g"], w.scale, mm)
             for t, h, mm in ((tr, o64, torch.matmul), (tr32, o32, w.wide.mm))]
    st = S["in-block attention"]
    l_k = k["L_loc"][rows].double()
    st.piece("o_local").add(k["o_loc"][rows].double() / l_k[:, None], local[0][0], local[1][0])
    st.piece("lse_local").add((k["M_loc"][rows].double() + torch.log2(l_k)) * LN2, local[0][1], local[1][1])
    if upstream is None:
        return
    s, e, do_h, full, delta = upstream
    S["bwd: Qbar, Kbar, F recomputed"].piece("Qbar").add(k["bq_new"][rows], tr["Qbar"], tr32["Qbar"])
    both = [_block_grads(t["A_local"], h["g"], h["v"], d[s:e], f[1][s:e], dl[s:e], w.scale, mm)
            for t, h, d, f, dl, mm in ((tr, o64, do_h[0], full[0], delta[0], torch.matmul),
                                       (tr32, o32, do_h[1], full[1], delta[1], w.wide.mm))]
    st = S["bwd: in-block dA, dv, dg"]
    st.piece("dA_local").add(k["dA"][(*rows, slice(None, e - s))], both[0]["dA"], both[1]["dA"])
    st.piece("dv_local").add(k["dv"][rows], both[0]["dv"], both[1]["dv"])
    if o64["g"] is not None:
        st.piece("dg_local").add(k["dg"][rows], both[0]["dg"], both[1]["dg"])


def _gradients(stage: Stage, x64: dict, x32: dict, grads: dict, do, prec: Precision, scale: float) -> None:
    """The kernel's input gradients against autograd of the oracle and of the same-dtype implementation."""
    from pathmdn_verify.core.engine import grads_of
    leaves = list(grads)
    oracle = grads_of(lambda **kw: P.path_attn(**{**x64, **kw}, scale=scale, gate_scaled=True),
                      {n: x64[n] for n in leaves}, lambda outs: [do])
    same = grads_of(lambda **kw: same_dtype.path_attn(**{**x32, **kw}, prec=prec, scale=scale, gate_scaled=True),
                    {n: x32[n] for n in leaves}, lambda outs: [do])
    stage.scale = max(float(g.abs().max()) for g in oracle.values())
    for n in leaves:
        stage.piece("d" + n).add(grads[n], oracle[n], same[n])
