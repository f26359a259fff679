"""fla PaTH forward, stage by stage (fla/ops/path_attn/parallel.py, ParallelPATHAttentionFunction.forward).

The forward runs unchanged; the stage functions it calls are recorded (stages.recording) and each result
is compared, block by block (BS tokens, the block the kernels use), with references/path_attn.py:

  gate cumsum      chunk_global_cumsum            G = cumsum g (per sequence)
  A = beta W W^T   chunk_scaled_dot_kkt_fwd       strictLower(diag(beta) W W^T)
  U (UT solve)     solve_tril, times diag(beta)   U = (I + A)^{-1} diag(beta)       block_transform["U"]
  Qbar, Kbar       intra_chunk_preprocess_fwd_fn  q_new, k_new                      block_transform["Qbar"/"Kbar"]
  F (transition)   intra_chunk_preprocess_fwd_fn  I - W^T w2 with w2 = U W, is F^T  block_transform["F"]
  in-block attn    intra_chunk_preprocess_fwd_fn  o/L and (M + log2 L) ln 2: softmax and lse over the block's
                                                  own logits block_transform["A_local"]
  scan lse, o      parallel_path_fwd_fn           (L_new ln 2, o_new): the right-to-left scan over the key
                                                  blocks, against the blockwise logits of every block
The scan's per-block logits stay in registers; its result is judged through the lse and the output.
Precision: the W-only stages run in fp32 whatever q's dtype (fla keeps w, beta, A, U in fp32); the
others in the check's dtype.  scale * (logit + gate) is fla's declared convention (gate_scaled=True).
"""
from __future__ import annotations

import math

import torch

from kernels import fla_ops
from references import path_attn as P
from verify.inputs import as_oracle, floats_as
from verify.localize.stages import Stage, recording
from verify.precision import Precision

RECORDED = ("chunk_global_cumsum", "chunk_scaled_dot_kkt_fwd", "solve_tril", "intra_chunk_preprocess_fwd_fn",
            "parallel_path_fwd_fn")
LN2 = math.log(2.0)


def run_forward(x: dict, scale: float) -> dict:
    """fla's parallel_path_attn on x, with every stage call of its forward recorded."""
    from kernels.fla_ops import _import
    mod = _import("fla.ops.path_attn.parallel")
    with torch.no_grad(), recording(mod, RECORDED) as calls:
        mod.parallel_path_attn(x["q"], x["k"], x["v"], x["w"], x["beta"], x["g"], scale, x["cu_seqlens"])
    missing = [n for n in RECORDED[1:] if len(calls[n]) != 1]
    if missing:
        raise fla_ops.KernelUnavailable(f"{mod.__file__}: its forward does not call {', '.join(missing)} once "
                                        "each; localize knows fla-core 0.6.0's PaTH forward")
    return {n: c[0] for n, c in calls.items() if c}


def _attention(logits, v, g, scale, mm):
    """(softmax(scores) V, logsumexp(scores)) of one head, scores = scale * (logits + gate)."""
    s = P.scores(logits, None if g is None else P.gate_matrix(g), scale, gate_scaled=True)
    return P.attend(logits, v, g, scale, True, mm), torch.logsumexp(s, dim=-1)


def stages(x: dict, dtype: str, fp32_dot: str) -> list[Stage]:
    """Run the forward on x (the kernel's inputs) and return its stages, in the order the forward runs them."""
    gs = fla_ops.PATH_CONVENTIONS.gate_scaled
    assert gs, "the stage definitions follow fla's declared gate_scaled=True"
    scale = x["q"].shape[-1] ** -0.5
    rec = run_forward(x, scale)
    BS = rec["intra_chunk_preprocess_fwd_fn"][1]["BT"]
    A_k = rec["chunk_scaled_dot_kkt_fwd"][2][0]
    Tinv_k = rec["solve_tril"][2][0]
    q_new, k_new, w2, o_loc, L_loc, M_loc = rec["intra_chunk_preprocess_fwd_fn"][2]
    o_k, L_k = rec["parallel_path_fwd_fn"][2]
    wide, fp32 = Precision.of(dtype, fp32_dot), Precision.of("fp32", fp32_dot)
    S = {n: Stage(n, src, p) for n, src, p in [
        ("gate cumsum", "chunk_global_cumsum", fp32),
        ("A = beta W W^T", "chunk_scaled_dot_kkt_fwd", fp32),
        ("U (UT solve)", "solve_tril", fp32),
        ("Qbar", "intra_chunk_preprocess_fwd_fn", wide),
        ("Kbar", "intra_chunk_preprocess_fwd_fn", wide),
        ("F (block transition)", "intra_chunk_preprocess_fwd_fn", fp32),
        ("in-block attention", "intra_chunk_preprocess_fwd_fn", wide),
        ("cross-block scan: lse", "parallel_path_fwd_fn", wide),
        ("output o", "parallel_path_fwd_fn", wide)]}
    x64, x32 = as_oracle(x), floats_as(x, torch.float32)
    B, T, HQ, _ = x["q"].shape
    G = HQ // x["k"].shape[2]
    for b in range(B):
        for s0, e0 in P.segments(T, x["cu_seqlens"]):
            for hq in range(HQ):
                kh, first = hq // G, hq % G == 0
                hd = [{n: None if d[n] is None else d[n][b, s0:e0, (hq if n in ("q", "g") else kh)]
                       for n in ("q", "k", "v", "w", "beta", "g")} for d in (x64, x32)]
                if x["g"] is not None:
                    S["gate cumsum"].piece("G").add(rec["chunk_global_cumsum"][2][0][b, s0:e0, hq],
                                                    torch.cumsum(hd[0]["g"], 0), torch.cumsum(hd[1]["g"], 0))
                for s in range(0, e0 - s0, BS):
                    e = min(s + BS, e0 - s0)
                    n, rows = e - s, slice(s0 + s, s0 + e)
                    blk = [{k_: None if t is None else t[s:e] for k_, t in h.items()} for h in hd]
                    o64, o32 = blk
                    tr = P.block_transform(o64["q"], o64["k"], o64["w"], o64["beta"])
                    tr_w = P.block_transform(o32["q"], o32["k"], o32["w"], o32["beta"], fp32.mm)  # W-only stages
                    tr32 = P.block_transform(o32["q"], o32["k"], o32["w"], o32["beta"], wide.mm)
                    if first:
                        w64, w32 = o64["w"], o32["w"]
                        S["A = beta W W^T"].piece("A").add(
                            A_k[b, rows, kh, :n], P.strict_lower(o64["beta"][:, None] * (w64 @ w64.T)),
                            P.strict_lower(o32["beta"][:, None] * fp32.mm(w32, w32.T)))
                        S["U (UT solve)"].piece("U").add(Tinv_k[b, rows, kh, :n].double() * o64["beta"][None, :],
                                                         tr["U"], tr_w["U"])
                        S["Kbar"].piece("Kbar").add(k_new[b, rows, kh], tr["Kbar"], tr32["Kbar"])
                        F_k = torch.eye(w64.shape[1], dtype=torch.float64) - w64.T @ w2[b, rows, kh].double()
                        S["F (block transition)"].piece("F").add(F_k.T, tr["F"], tr_w["F"])
                    S["Qbar"].piece("Qbar").add(q_new[b, rows, hq], tr["Qbar"], tr32["Qbar"])
                    local = [_attention(P.causal_mask(t["A_local"]), h["v"], h["g"], scale, mm)
                             for t, h, mm in ((tr, o64, torch.matmul), (tr32, o32, wide.mm))]
                    st = S["in-block attention"]
                    l_k = L_loc[b, rows, hq].double()
                    st.piece("o_local").add(o_loc[b, rows, hq].double() / l_k[:, None], local[0][0], local[1][0])
                    st.piece("lse_local").add((M_loc[b, rows, hq].double() + torch.log2(l_k)) * LN2,
                                              local[0][1], local[1][1])
                full = [_attention(P.blockwise_logits(h["q"], h["k"], h["w"], h["beta"], BS, mm)[2], h["v"],
                                   h["g"], scale, mm) for h, mm in ((hd[0], torch.matmul), (hd[1], wide.mm))]
                S["cross-block scan: lse"].piece("lse").add(L_k[b, s0:e0, hq].double() * LN2, full[0][1], full[1][1])
                S["output o"].piece("o").add(o_k[b, s0:e0, hq], full[0][0], wide.store(full[1][0]))
    return [st for st in S.values() if st.tensors]
