"""fla Gated DeltaNet chunk, stage by stage (fla/ops/gated_delta_rule/chunk.py with fla/ops/common/*).

The forward (and, for a backward check, the backward) runs unchanged; the functions chunk.py calls are recorded
(stages.recording) and each result is compared, chunk by chunk, sequence by sequence and value head by value
head, with the intermediate of the same definition in references/mdn_oracle.py: GDN is MDN with mu = 0,
p = alpha k and eta = 1 (docs/design.md section 5), so chunk_forward_head's stable chunk form with those gates
gives, per chunk of L tokens (abar the chunk's cumulative alpha, D = diag(beta), Gamma_ij = beta_j abar_i / abar_j):

  gate cumsum   chunk_local_cumsum               log abar = cumsum of g within the chunk (fla: / ln 2), as the
                                                 next stages receive it
  kkt + solve   ..._fwd_kkt_solve_kernel         fla's A = (I + strictLower(D K K^T .* abar_i / abar_j))^-1; the
                                                 MDN system is I + (P K^T) .* Gamma^- = I + N D where fla's is
                                                 I + D N, so A D = D T (T = system^-1): judged as A D
  WY: w, u      recompute_w_u_fwd                w = D Y (Y = T Diag(abar) K), u = D U (U = T V)
  states        chunk_gated_delta_rule_fwd_h     h: the state entering each chunk (S0 of the step), v_new = D V~
                                                 (the residuals times beta), S_T
  output o      chunk_fwd_o                      O
fla's A, w, u, h, v_new and o are stored in the input dtype.  The kkt (beta K K^T, gated) is never written: at
chunk 64 fla fuses it with the solve in one kernel, so a bug in either shows first in A.
Backward (upstream gradients dO and dS_T drawn from a fixed seed), by autograd of the same float64 chunk form
with its intermediates kept (h's and V~'s and Y's gradients), and from its equations:
  w, u; h, v_new recomputed   as in the forward
  dv local      chunk_bwd_dv_local               D dv = scale ((Q K^T) .* Gamma)^T dO (the output's in-chunk term)
  state bwd     chunk_gated_delta_rule_bwd_dhu   dh[n] = dL/dS after chunk n, dh0 = dL/dS_0, D dv = dL/dV~
  o, S terms    chunk_bwd_dqkwg                  dq = dL/dq (q enters only o), D dw = dL/dY, and the terms of dk and
                                                 dg through the chunk's o and S with v_new and h held (autograd
                                                 with V~ and the incoming state held)
  WY terms      prepare_wy_repr_bwd              the terms of dk and dg through A, w, u (autograd through V~ alone),
                                                 dv = dL/dv, dbeta = dL/dbeta (v and beta enter only A, w, u)
  gradients     chunk_gated_delta_rule_bwd       dq, dk, dv, dg, dbeta, dS0 (dk, dg completed, dg's reverse
                                                 cumsum): autograd of the op's oracle (the token recurrence)
fla's dg terms are gradients with respect to the chunk's gate cumsum G; each is judged after the in-chunk
reverse cumsum that turns it into one with respect to g (float64, on the kernel's values).
The same-dtype values come from the same chunk form in fp32 with the dtype's rounded products in fixed order
(as pathmdn_verify.same_dtype.mdn runs it, p = alpha k rounded to the dtype).
"""
from __future__ import annotations

import math

import torch

from pathmdn_verify.core.errors import KernelUnavailable
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.core.precision import Precision, fixed_order
from pathmdn_verify.core.records import scale_of
from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.stages import Stage, judge_gradients, recording

MODULE = "fla.ops.gated_delta_rule.chunk"
FORWARD = ("chunk_gated_delta_rule_fwd_intra", "chunk_gated_delta_rule_fwd_h", "chunk_fwd_o")
BACKWARD = ("recompute_w_u_fwd", "chunk_bwd_dv_local", "chunk_gated_delta_rule_bwd_dhu", "chunk_bwd_dqkwg",
            "prepare_wy_repr_bwd")
FLOATS = ("q", "k", "v", "g", "beta", "S0")
LN2 = math.log(2.0)


def run(x: dict, scale: float, upstream: list | None) -> tuple[dict, dict]:
    """fla's chunk_gated_delta_rule on x, forward (and backward with upstream [dO, dS_T]), every stage call
    recorded.  Returns ({function: [(args, kwargs, outputs), ...]}, {input name: gradient} or {})."""
    from pathmdn_verify.core.engine import grads_of
    mod = fla_ops._import(MODULE)
    kernel = lambda **a: fla_ops.gated_delta_rule(**a, scale=scale, chunk=True)
    names = FORWARD + (BACKWARD if upstream else ())
    with recording(mod, names) as calls:
        if upstream is None:
            with torch.no_grad():
                kernel(**x)
            grads = {}
        else:
            grads = grads_of(lambda **kw: kernel(**{**x, **kw}), {n: x[n] for n in FLOATS if x[n] is not None},
                             lambda outs: upstream)
    expected = {n: 2 if upstream and n == "chunk_gated_delta_rule_fwd_h" else 1 for n in names}   # h recomputed
    found = {n: len(c) for n, c in calls.items()}
    if found != expected:
        raise KernelUnavailable(f"{mod.__file__}: calls {found}, not {expected}; localize knows fla-core 0.6.0's "
                                "chunk_gated_delta_rule")
    return calls, grads


def _chunk_form(h: dict, scale: float, chunk: int, prec: Precision | None) -> list[dict]:
    """The MDN chunk form with mu = 0, eta = 1 on one head h (tensors [T, .] and S0): float64 (prec None,
    p = alpha k exactly) or the same-dtype fp32 form (p = alpha k rounded, products by prec.mm in fixed order).
    Returns chunk_forward_head's step dicts."""
    g = h["g"]
    args = (h["q"], h["k"], h["v"], g, torch.full_like(g, -math.inf), h["beta"], torch.ones_like(g))
    if prec is None:
        return MDN.chunk_forward_head(*args, None, scale, h["S0"], None, chunk=chunk)[3]
    p = prec.store(torch.exp(g)[:, None] * h["k"])
    with fixed_order():
        return MDN.chunk_forward_head(*args, p, scale, h["S0"], None, chunk=chunk, mm=prec.mm)[3]


def _backward(steps: list[dict], leaves: dict, q, do, dST, scale, mm) -> dict:
    """Autograd of <O, dO> + <S_T, dS_T> through the chunk form's steps, with the gradients of each chunk's
    outgoing state S, of V~ and of Y kept; per chunk, the gradients of k and g split as fla splits them: through
    the chunk's O and S with V~ (and the incoming state) held ("direct"), and through V~ ("via V~"); and the
    output's in-chunk adjoint scale ((Q K^T) .* Gamma)^T dO.  Per-chunk values are lists, one entry a chunk."""
    for st in steps:
        for n in ("S", "V_tilde", "Y"):
            st[n].retain_grad()
    O = torch.cat([st["O"] for st in steps])
    do = do.to(O.dtype)
    torch.autograd.backward([O, steps[-1]["S"]], [do, dST.to(O.dtype)], retain_graph=True)
    # read now: the kept gradients accumulate the later autograd.grad calls too
    kept = {"d" + n: [st[n].grad.clone() for st in steps] for n in ("S", "V_tilde", "Y")}
    parts = {n: [] for n in ("dv_local", "dk direct", "dg direct", "dk via V~", "dg via V~")}
    s = 0
    for c, st in enumerate(steps):
        rows = slice(s, s + st["O"].shape[0])
        on, dV = (leaves["k"], leaves["g"]), kept["dV_tilde"][c]
        # the chunk's own tokens reach S0 of no chunk up to this one: their entries are this chunk's terms alone
        via = torch.autograd.grad([st["V_tilde"]], on, [dV], retain_graph=True)
        direct = torch.autograd.grad([st["O"], st["S"], st["V_tilde"]], on, [do[rows], kept["dS"][c], -dV],
                                     retain_graph=True)
        for name, (dk, dg) in (("direct", direct), ("via V~", via)):
            parts["dk " + name].append(dk[rows])
            parts["dg " + name].append(dg[rows])
        with torch.no_grad():
            parts["dv_local"].append(scale * mm((mm(q[rows], st["k_hat"].T) * st["Gamma"]).T, do[rows]))
        s = rows.stop
    return {**kept, **parts, **{"d" + n: t.grad for n, t in leaves.items()}}


def _sequences(x: dict) -> list[tuple[int, int, int, int]]:
    """(batch, sequence index n, first, end) of every non-empty sequence, n indexing S0 and S_T."""
    B, T = x["q"].shape[:2]
    if x["cu_seqlens"] is None:
        return [(b, b, 0, T) for b in range(B)]
    c = [int(t) for t in x["cu_seqlens"]]
    return [(0, n, s, e) for n, (s, e) in enumerate(zip(c, c[1:])) if e > s]


def _reverse_cumsum(t: torch.Tensor) -> torch.Tensor:
    """sum_{s >= t} along dim 0, in float64: a gradient with respect to the gate's cumulative sum G (what fla's
    kernels write) as the gradient with respect to the gate g itself."""
    return t.double().flip(0).cumsum(0).flip(0)


def stages(op, x: dict, dtype: str, fp32_dot: str, backward: bool = False) -> list[Stage]:
    """Run the kernel on x and return its stages, in the order it computes them."""
    scale = scale_of(x)
    wide, fp32 = Precision.of_op(op, dtype, fp32_dot), Precision.of_op(op, "fp32", fp32_dot)
    x64, x32 = as_oracle(x), floats_as(x, torch.float32)
    upstream = None
    if backward:
        gen = torch.Generator().manual_seed(0)
        B, T, HV, V = x["v"].shape
        N = B if x["cu_seqlens"] is None else x["cu_seqlens"].numel() - 1
        dST = torch.randn(N, HV, x["k"].shape[-1], V, generator=gen, dtype=torch.float64)
        upstream = [torch.randn(B, T, HV, V, generator=gen, dtype=torch.float64).to(x["q"]),
                    dST.to(torch.float32).to(x["q"].device)]        # S_T is fp32 whatever the dtype
    calls, grads = run(x, scale, upstream)
    out = lambda name, i=0: calls[name][i][2]
    chunk = calls["chunk_gated_delta_rule_fwd_h"][0][1]["chunk_size"]
    g_k = calls["chunk_gated_delta_rule_fwd_intra"][0][1]["g"]      # the gate cumsum as the next stages get it
    w_k, u_k, A_k = out("chunk_gated_delta_rule_fwd_intra")
    h_k, vnew_k, ST_k = out("chunk_gated_delta_rule_fwd_h")
    o_k = out("chunk_fwd_o")[0]
    rows = [("gate cumsum", "chunk_local_cumsum", fp32, "fwd"),
            ("kkt + solve: A diag(beta)", "chunk_gated_delta_rule_fwd_kkt_solve_kernel", wide, "fwd"),
            ("WY: w, u", "recompute_w_u_fwd", wide, "fwd"),
            ("states: h, v_new, S_T", "chunk_gated_delta_rule_fwd_h", wide, "fwd"),
            ("output o", "chunk_fwd_o", wide, "fwd")]
    DQKWG, WY = "bwd: dq, dk, dw, dg (o and S terms)", "bwd: dk, dv, dbeta, dg (WY terms)"
    if backward:
        rows += [("bwd: w, u recomputed", "recompute_w_u_fwd", wide, "bwd"),
                 ("bwd: h, v_new recomputed", "chunk_gated_delta_rule_fwd_h", wide, "bwd"),
                 ("bwd: dv local", "chunk_bwd_dv_local", wide, "bwd"),
                 ("bwd: dh, dh0, dv", "chunk_gated_delta_rule_bwd_dhu", wide, "bwd"),
                 (DQKWG, "chunk_bwd_dqkwg", wide, "bwd"),
                 (WY, "prepare_wy_repr_bwd", wide, "bwd"),
                 ("bwd: gradients", "chunk_gated_delta_rule_bwd", wide, "bwd")]
        bw_k, bu_k = out("recompute_w_u_fwd")
        bh_k, bvnew_k, _ = out("chunk_gated_delta_rule_fwd_h", 1)
        dvl_k = out("chunk_bwd_dv_local")[0]
        dh_k, dh0_k, dv2_k = out("chunk_gated_delta_rule_bwd_dhu")
        dq_k, dk1_k, dw_k, dg1_k = out("chunk_bwd_dqkwg")
        dk2_k, dv_k, db_k, dg2_k = out("prepare_wy_repr_bwd")
    S = {n: Stage(n, src, p, pass_) for n, src, p, pass_ in rows}
    H, HV = x["q"].shape[2], x["v"].shape[2]
    G = HV // H
    # q and k belong to key heads: their references sum the value heads of a group, as fla's results do
    summed = {n: [torch.zeros_like(x64["q"]), torch.zeros_like(x32["q"])] for n in ("dq", "dk direct", "dk via V~")}
    first_chunk = 0         # varlen: h and dh hold the chunks of every sequence, one after another
    for b, n, s0, e0 in _sequences(x):
        for j in range(HV):
            kh = j // G
            hd = [{name: None if d[name] is None else d[name][n, j] if name == "S0" else
                   d[name][b, s0:e0, j if name in ("v", "g", "beta") else kh] for name in FLOATS} for d in (x64, x32)]
            if backward:
                leaves = [{name: t.detach().clone().requires_grad_() for name, t in h.items() if t is not None}
                          for h in hd]
                hd = [{name: leaf.get(name) for name in FLOATS} for leaf in leaves]
            seq = (b, slice(s0, e0), j)
            with torch.set_grad_enabled(backward):
                steps = [_chunk_form(hd[0], scale, chunk, None), _chunk_form(hd[1], scale, chunk, wide)]
            if backward:
                gr = [_backward(st, leaf, h["q"].detach(), upstream[0][seq], upstream[1][n, j], scale, mm)
                      for st, leaf, h, mm in zip(steps, leaves, hd, (torch.matmul, wide.mm))]
            for c, (s64, s32) in enumerate(zip(*steps)):
                L = s64["O"].shape[0]
                rws, ci = slice(s0 + c * chunk, s0 + c * chunk + L), first_chunk + c
                at = (b, rws, j)
                beta = [h["beta"].detach()[c * chunk:c * chunk + L, None] for h in hd]
                both = lambda key, f=lambda t, i: t: [f(s[key].detach(), i) for i, s in enumerate((s64, s32))]
                times_beta = lambda t, i: beta[i].double() * t.double()
                S["gate cumsum"].piece("log abar").add(
                    g_k[at].double() * LN2, *[torch.cumsum(h["g"].detach()[c * chunk:c * chunk + L], 0) for h in hd])
                S["kkt + solve: A diag(beta)"].piece("A D").add(A_k[b, rws, j, :L].double() * beta[0].T.double(),
                                                                *both("T", times_beta))
                S["WY: w, u"].piece("w").add(w_k[at], *both("Y", times_beta))
                S["WY: w, u"].piece("u").add(u_k[at], *both("U", times_beta))
                st = S["states: h, v_new, S_T"]
                st.piece("h").add(h_k[b, ci, j], *both("S0"))
                st.piece("v_new").add(vnew_k[at], *both("V_tilde", times_beta))
                S["output o"].piece("o").add(o_k[at], *both("O"))
                if not backward:
                    continue
                S["bwd: w, u recomputed"].piece("w").add(bw_k[at], *both("Y", times_beta))
                S["bwd: w, u recomputed"].piece("u").add(bu_k[at], *both("U", times_beta))
                st = S["bwd: h, v_new recomputed"]
                st.piece("h").add(bh_k[b, ci, j], *both("S0"))
                st.piece("v_new").add(bvnew_k[at], *both("V_tilde", times_beta))
                of_chunk = lambda key: [gr[i][key][c].detach().double() for i in range(2)]
                beta_row = lambda t: beta[0].double() * t[at].double()
                S["bwd: dv local"].piece("D dv_local").add(beta_row(dvl_k), *of_chunk("dv_local"))
                st = S["bwd: dh, dh0, dv"]
                st.piece("dh").add(dh_k[b, ci, j], *of_chunk("dS"))
                st.piece("D dv").add(beta_row(dv2_k), *of_chunk("dV_tilde"))
                S[DQKWG].piece("D dw").add(beta_row(dw_k), *of_chunk("dY"))
                S[DQKWG].piece("dg (o, S terms)").add(_reverse_cumsum(dg1_k[at]), *of_chunk("dg direct"))
                S[WY].piece("dg (WY terms)").add(_reverse_cumsum(dg2_k[at]), *of_chunk("dg via V~"))
                for name in ("dk direct", "dk via V~"):
                    for i in range(2):
                        summed[name][i][b, rws, kh] += gr[i][name][c].detach()
            if backward:
                if dh0_k is not None:
                    S["bwd: dh, dh0, dv"].piece("dh0").add(dh0_k[n, j], gr[0]["dS0"], gr[1]["dS0"])
                for i in range(2):
                    summed["dq"][i][b, s0:e0, kh] += gr[i]["dq"].detach()
                S[WY].piece("dv").add(dv_k[seq], gr[0]["dv"], gr[1]["dv"])
                S[WY].piece("dbeta").add(db_k[seq], gr[0]["dbeta"], gr[1]["dbeta"])
            S["states: h, v_new, S_T"].piece("S_T").add(ST_k[n, j], steps[0][-1]["S"].detach(),
                                                        steps[1][-1]["S"].detach())
        first_chunk += -(-(e0 - s0) // chunk) if x["cu_seqlens"] is not None else 0
    if backward:
        S[DQKWG].piece("dq").add(dq_k, *summed["dq"])
        S[DQKWG].piece("dk (o, S terms)").add(dk1_k, *summed["dk direct"])
        S[WY].piece("dk (WY terms)").add(dk2_k, *summed["dk via V~"])
        judge_gradients(S["bwd: gradients"], op, x, grads, upstream, wide)
    return [st for st in S.values() if st.tensors]
