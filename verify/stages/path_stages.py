"""fla PaTH, stage by stage (fla/ops/path_attn/parallel.py, ParallelPATHAttentionFunction).

The forward (and, for a backward check, the backward) runs unchanged; the stage functions it calls are
recorded (stages.recording) and each result is compared, block by block (BS tokens, the block the kernels
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

import torch

from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify import same_dtype
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import scale_of
from pathmdn_verify.stages import Stage, recording
from pathmdn_verify.core.errors import KernelUnavailable

FORWARD = ("chunk_global_cumsum", "chunk_scaled_dot_kkt_fwd", "solve_tril", "intra_chunk_preprocess_fwd_fn",
           "parallel_path_fwd_fn")
BACKWARD = ("parallel_attn_bwd_preprocess", "intra_chunk_preprocess_bwd_prepare_fn")
FLOATS = ("q", "k", "v", "w", "beta", "g")
LN2 = math.log(2.0)


def run(x: dict, scale: float, do: torch.Tensor | None) -> tuple[dict, dict]:
    """fla's parallel_path_attn on x, forward (and backward with upstream do), every stage call recorded.
    Returns ({function: (args, kwargs, outputs)}, {input name: gradient} or {})."""
    from pathmdn_verify.core.engine import grads_of
    mod = fla_ops._import("fla.ops.path_attn.parallel")
    names = FORWARD + (BACKWARD if do is not None else ())
    entry = getattr(mod, "parallel_path_attn", None) or mod.parallel_path_attention    # the name before fla 0.3.2
    kernel = lambda **a: entry(a["q"], a["k"], a["v"], a["w"], a["beta"], a["g"], scale,
                                                a["cu_seqlens"])[0]
    with recording(mod, names) as calls:
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
    rec, grads = run(x, scale, do)
    BS = rec["intra_chunk_preprocess_fwd_fn"][1]["BT"]
    A_k, Tinv_k = rec["chunk_scaled_dot_kkt_fwd"][2][0], rec["solve_tril"][2][0]
    q_new, k_new, w2, o_loc, L_loc, M_loc = rec["intra_chunk_preprocess_fwd_fn"][2]
    o_k, L_k = rec["parallel_path_fwd_fn"][2]
    if backward:
        delta_k = rec["parallel_attn_bwd_preprocess"][2][0]
        bq_new, bk_new, h, dA_k, dv_k, dg_k = rec["intra_chunk_preprocess_bwd_prepare_fn"][2]
    S = _stage_table(wide, fp32, backward)
    B, T, HQ, _ = x["q"].shape
    G = HQ // x["k"].shape[2]
    eye = torch.eye(x["q"].shape[-1], dtype=torch.float64, device=x["q"].device)
    for b in range(B):
        for s0, e0 in P.segments(T, x["cu_seqlens"]):
            for hq in range(HQ):
                kh, first = hq // G, hq % G == 0
                hd = [{n: None if d[n] is None else d[n][b, s0:e0, (hq if n in ("q", "g") else kh)] for n in FLOATS}
                      for d in (x64, x32)]
                if x["g"] is not None:
                    S["gate cumsum"].piece("G").add(rec["chunk_global_cumsum"][2][0][b, s0:e0, hq],
                                                    torch.cumsum(hd[0]["g"], 0), torch.cumsum(hd[1]["g"], 0))
                full = [_attention(P.blockwise_logits(h["q"], h["k"], h["w"], h["beta"], BS, mm)[2], h["v"],
                                   h["g"], scale, mm) for h, mm in ((hd[0], torch.matmul), (hd[1], wide.mm))]
                S["cross-block scan: lse"].piece("lse").add(L_k[b, s0:e0, hq].double() * LN2, full[0][1], full[1][1])
                S["output o"].piece("o").add(o_k[b, s0:e0, hq], full[0][0], wide.store(full[1][0]))
                if backward:
                    do_h = [do[b, s0:e0, hq].to(t) for t in (torch.float64, torch.float32)]
                    delta = [(full[0][0] * do_h[0]).sum(-1), (wide.store(full[1][0]) * do_h[1]).sum(-1)]
                    S["bwd: delta = rowsum(O dO)"].piece("delta").add(delta_k[b, s0:e0, hq], *delta)
                for s in range(0, e0 - s0, BS):
                    e = min(s + BS, e0 - s0)
                    n, rows = e - s, slice(s0 + s, s0 + e)
                    o64, o32 = ({k_: None if t is None else t[s:e] for k_, t in h.items()} for h in hd)
                    tr = P.block_transform(o64["q"], o64["k"], o64["w"], o64["beta"])
                    tr_w = P.block_transform(o32["q"], o32["k"], o32["w"], o32["beta"], fp32.mm)  # W-only stages
                    tr32 = P.block_transform(o32["q"], o32["k"], o32["w"], o32["beta"], wide.mm)
                    if first:
                        w64, w32 = o64["w"], o32["w"]
                        S["A = beta W W^T"].piece("A").add(   # the UT system of ut_factor, less its I
                            A_k[b, rows, kh, :n], torch.tril(o64["beta"][:, None] * (w64 @ w64.T), -1),
                            torch.tril(o32["beta"][:, None] * fp32.mm(w32, w32.T), -1))
                        S["U (UT solve)"].piece("U").add(Tinv_k[b, rows, kh, :n].double() * o64["beta"][None, :],
                                                         tr["U"], tr_w["U"])
                        S["Kbar"].piece("Kbar").add(k_new[b, rows, kh], tr["Kbar"], tr32["Kbar"])
                        S["F (block transition)"].piece("F").add((eye - w64.T @ w2[b, rows, kh].double()).T,
                                                                 tr["F"], tr_w["F"])
                        if backward:
                            st = S["bwd: Qbar, Kbar, F recomputed"]
                            st.piece("Kbar").add(bk_new[b, rows, kh], tr["Kbar"], tr32["Kbar"])
                            st.piece("F").add((eye - w64.T @ h[b, rows, kh].double()).T, tr["F"], tr_w["F"])
                    S["Qbar"].piece("Qbar").add(q_new[b, rows, hq], tr["Qbar"], tr32["Qbar"])
                    local = [_attention(P.causal_mask(t["A_local"]), h["v"], h["g"], scale, mm)
                             for t, h, mm in ((tr, o64, torch.matmul), (tr32, o32, wide.mm))]
                    st = S["in-block attention"]
                    l_k = L_loc[b, rows, hq].double()
                    st.piece("o_local").add(o_loc[b, rows, hq].double() / l_k[:, None], local[0][0], local[1][0])
                    st.piece("lse_local").add((M_loc[b, rows, hq].double() + torch.log2(l_k)) * LN2,
                                              local[0][1], local[1][1])
                    if backward:
                        S["bwd: Qbar, Kbar, F recomputed"].piece("Qbar").add(bq_new[b, rows, hq], tr["Qbar"],
                                                                              tr32["Qbar"])
                        both = [_block_grads(t["A_local"], h["g"], h["v"], d[s:e], f[1][s:e], dl[s:e], scale, mm)
                               for t, h, d, f, dl, mm in ((tr, o64, do_h[0], full[0], delta[0], torch.matmul),
                                                          (tr32, o32, do_h[1], full[1], delta[1], wide.mm))]
                        st = S["bwd: in-block dA, dv, dg"]
                        st.piece("dA_local").add(dA_k[b, rows, hq, :n], both[0]["dA"], both[1]["dA"])
                        st.piece("dv_local").add(dv_k[b, rows, hq], both[0]["dv"], both[1]["dv"])
                        if x["g"] is not None:
                            st.piece("dg_local").add(dg_k[b, rows, hq], both[0]["dg"], both[1]["dg"])
    if backward:
        _gradients(S["bwd: gradients"], x64, x32, grads, do, wide, scale)
    return [st for st in S.values() if st.tensors]


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
