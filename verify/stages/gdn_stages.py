"""fla Gated DeltaNet chunk, stage by stage (fla/ops/gated_delta_rule/chunk.py with fla/ops/common/*).

The forward (and, for a backward check, the backward) runs unchanged; the functions chunk.py calls are captured
(stages.capturing) and each result is compared, chunk by chunk, sequence by sequence and value head by value
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
from dataclasses import dataclass

import torch

from pathmdn_verify.core.errors import KernelUnavailable
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.core.precision import Precision, fixed_order
from pathmdn_verify.core.records import scale_of
from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.stages import Stage, capturing, judge_gradients

MODULE = "fla.ops.gated_delta_rule.chunk"
FORWARD = ("chunk_gated_delta_rule_fwd_intra", "chunk_gated_delta_rule_fwd_h", "chunk_fwd_o")
BACKWARD = ("recompute_w_u_fwd", "chunk_bwd_dv_local", "chunk_gated_delta_rule_bwd_dhu", "chunk_bwd_dqkwg",
            "prepare_wy_repr_bwd")
FLOATS = ("q", "k", "v", "g", "beta", "S0")
LN2 = math.log(2.0)


def run(x: dict, scale: float, upstream: list | None) -> tuple[dict, dict]:
    """fla's chunk_gated_delta_rule on x, forward (and backward with upstream [dO, dS_T]), every stage call
    captured.  Returns ({function: [(args, kwargs, outputs), ...]}, {input name: gradient} or {})."""
    from pathmdn_verify.core.engine import grads_of
    mod = fla_ops._import(MODULE)
    kernel = lambda **a: fla_ops.gated_delta_rule(**a, scale=scale, chunk=True)
    names = FORWARD + (BACKWARD if upstream else ())
    with capturing(mod, names) as calls:
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


@dataclass(frozen=True)
class _Walk:
    """What every head and chunk of one `stages` call reads: the stages it fills, the kernel's captured tensors
    (`_captured`), the scale, the chunk size, the check's precision, the backward's upstream gradients [dO, dS_T]
    (None: forward only) and the references of the key heads' gradients, summed over their value heads."""
    S: dict[str, Stage]
    k: dict
    scale: float
    chunk: int
    wide: Precision
    upstream: list | None
    summed: dict


DQKWG, WY = "bwd: dq, dk, dw, dg (o and S terms)", "bwd: dk, dv, dbeta, dg (WY terms)"


def stages(op, x: dict, dtype: str, fp32_dot: str, backward: bool = False) -> list[Stage]:
    """Run the kernel on x and return its stages, in the order it computes them."""
    scale = scale_of(x)
    wide, fp32 = Precision.of_op(op, dtype, fp32_dot), Precision.of_op(op, "fp32", fp32_dot)
    x64, x32 = as_oracle(x), floats_as(x, torch.float32)
    upstream = _upstream(x) if backward else None
    calls, grads = run(x, scale, upstream)
    # q and k belong to key heads: their references sum the value heads of a group, as fla's results do
    summed = {n: [torch.zeros_like(x64["q"]), torch.zeros_like(x32["q"])] for n in ("dq", "dk direct", "dk via V~")}
    walk = _Walk(_stage_table(wide, fp32, backward), _captured(calls, backward), scale,
                 calls["chunk_gated_delta_rule_fwd_h"][0][1]["chunk_size"], wide, upstream, summed)
    G = x["v"].shape[2] // x["q"].shape[2]
    first_chunk = 0         # varlen: h and dh hold the chunks of every sequence, one after another
    for b, n, s0, e0 in _sequences(x):
        for j in range(x["v"].shape[2]):
            hd = [{name: None if d[name] is None else d[name][n, j] if name == "S0" else
                   d[name][b, s0:e0, j if name in ("v", "g", "beta") else j // G] for name in FLOATS}
                  for d in (x64, x32)]
            _head(walk, hd, b, n, s0, j, j // G, first_chunk)
        first_chunk += -(-(e0 - s0) // walk.chunk) if x["cu_seqlens"] is not None else 0
    if backward:
        S, k = walk.S, walk.k
        S[DQKWG].piece("dq").add(k["dq"], *summed["dq"])
        S[DQKWG].piece("dk (o, S terms)").add(k["dk1"], *summed["dk direct"])
        S[WY].piece("dk (WY terms)").add(k["dk2"], *summed["dk via V~"])
        judge_gradients(S["bwd: gradients"], op, x, grads, upstream, wide)
    return [st for st in walk.S.values() if st.tensors]


def _upstream(x: dict) -> list[torch.Tensor]:
    """The backward's upstream gradients [dO, dS_T], drawn from seed 0 (S_T is fp32 whatever the dtype)."""
    gen = torch.Generator().manual_seed(0)
    B, T, HV, V = x["v"].shape
    N = B if x["cu_seqlens"] is None else x["cu_seqlens"].numel() - 1
    dST = torch.randn(N, HV, x["k"].shape[-1], V, generator=gen, dtype=torch.float64)
    return [torch.randn(B, T, HV, V, generator=gen, dtype=torch.float64).to(x["q"]),
            dST.to(torch.float32).to(x["q"].device)]


def _stage_table(wide: Precision, fp32: Precision, backward: bool) -> dict[str, Stage]:
    rows = [("gate cumsum", "chunk_local_cumsum", fp32, "fwd"),
            ("kkt + solve: A diag(beta)", "chunk_gated_delta_rule_fwd_kkt_solve_kernel", wide, "fwd"),
            ("WY: w, u", "recompute_w_u_fwd", wide, "fwd"),
            ("states: h, v_new, S_T", "chunk_gated_delta_rule_fwd_h", wide, "fwd"),
            ("output o", "chunk_fwd_o", wide, "fwd")]
    if backward:
        rows += [("bwd: w, u recomputed", "recompute_w_u_fwd", wide, "bwd"),
                 ("bwd: h, v_new recomputed", "chunk_gated_delta_rule_fwd_h", wide, "bwd"),
                 ("bwd: dv local", "chunk_bwd_dv_local", wide, "bwd"),
                 ("bwd: dh, dh0, dv", "chunk_gated_delta_rule_bwd_dhu", wide, "bwd"),
                 (DQKWG, "chunk_bwd_dqkwg", wide, "bwd"),
                 (WY, "prepare_wy_repr_bwd", wide, "bwd"),
                 ("bwd: gradients", "chunk_gated_delta_rule_bwd", wide, "bwd")]
    return {n: Stage(n, src, p, pass_) for n, src, p, pass_ in rows}


def _captured(calls: dict, backward: bool) -> dict:
    """The kernel's tensors the stages read, by name, from `run`'s captured calls."""
    out = lambda name, i=0: calls[name][i][2]        # noqa: E731
    k = {"g": calls["chunk_gated_delta_rule_fwd_intra"][0][1]["g"],      # the gate cumsum as the next stages get it
         "o": out("chunk_fwd_o")[0]}
    k |= dict(zip(("w", "u", "A"), out("chunk_gated_delta_rule_fwd_intra"), strict=True))
    k |= dict(zip(("h", "vnew", "ST"), out("chunk_gated_delta_rule_fwd_h"), strict=True))
    if backward:
        k |= dict(zip(("bw", "bu"), out("recompute_w_u_fwd"), strict=True))
        k |= dict(zip(("bh", "bvnew", "bST"), out("chunk_gated_delta_rule_fwd_h", 1), strict=True))
        k["dvl"] = out("chunk_bwd_dv_local")[0]
        k |= dict(zip(("dh", "dh0", "dv2"), out("chunk_gated_delta_rule_bwd_dhu"), strict=True))
        k |= dict(zip(("dq", "dk1", "dw", "dg1"), out("chunk_bwd_dqkwg"), strict=True))
        k |= dict(zip(("dk2", "dv", "db", "dg2"), out("prepare_wy_repr_bwd"), strict=True))
    return k


def _head(w: _Walk, hd: list[dict], b: int, n: int, s0: int, j: int, kh: int, first_chunk: int) -> None:
    """Value head j of sequence n (batch row b, first token s0; hd: its float64 and fp32 inputs, key head kh): the
    chunk form's steps (and their gradients) against the kernel's, chunk by chunk (the sequence's first chunk is
    first_chunk of h and dh), then the sequence's own tensors."""
    S, k, backward = w.S, w.k, w.upstream is not None
    if backward:
        leaves = [{name: t.detach().clone().requires_grad_() for name, t in h.items() if t is not None} for h in hd]
        hd = [{name: leaf.get(name) for name in FLOATS} for leaf in leaves]
    seq = (b, slice(s0, s0 + hd[0]["q"].shape[0]), j)
    with torch.set_grad_enabled(backward):
        steps = [_chunk_form(hd[0], w.scale, w.chunk, None), _chunk_form(hd[1], w.scale, w.chunk, w.wide)]
    gr = None
    if backward:
        gr = [_backward(st, leaf, h["q"].detach(), w.upstream[0][seq], w.upstream[1][n, j], w.scale, mm)
              for st, leaf, h, mm in zip(steps, leaves, hd, (torch.matmul, w.wide.mm))]
    for c, pair in enumerate(zip(*steps)):
        L = pair[0]["O"].shape[0]
        rows = slice(c * w.chunk, c * w.chunk + L)        # within the sequence
        at = (b, slice(s0 + rows.start, s0 + rows.stop), j)
        beta = [h["beta"].detach()[rows, None] for h in hd]
        _chunk(w, pair, [h["g"].detach()[rows] for h in hd], beta, at, first_chunk + c)
        if backward:
            _chunk_gradients(w, [{name: t[c] for name, t in g.items() if isinstance(t, list)} for g in gr], beta, at,
                             first_chunk + c, kh)
    if backward:
        if k["dh0"] is not None:
            S["bwd: dh, dh0, dv"].piece("dh0").add(k["dh0"][n, j], gr[0]["dS0"], gr[1]["dS0"])
        for i in range(2):
            w.summed["dq"][i][seq[0], seq[1], kh] += gr[i]["dq"].detach()
        S[WY].piece("dv").add(k["dv"][seq], gr[0]["dv"], gr[1]["dv"])
        S[WY].piece("dbeta").add(k["db"][seq], gr[0]["dbeta"], gr[1]["dbeta"])
    S["states: h, v_new, S_T"].piece("S_T").add(k["ST"][n, j], steps[0][-1]["S"].detach(), steps[1][-1]["S"].detach())


def _chunk(w: _Walk, pair: tuple[dict, dict], g: list, beta: list, at: tuple, ci: int) -> None:
    """One chunk's forward stages (rows `at`, chunk ci of h): the float64 and same-dtype steps `pair` of the chunk
    form, whose gate g and beta are given, against the kernel's tensors."""
    S, k = w.S, w.k
    both = lambda key, f=lambda t, i: t: [f(s[key].detach(), i) for i, s in enumerate(pair)]     # noqa: E731
    times_beta = lambda t, i: beta[i].double() * t.double()      # noqa: E731
    L = pair[0]["O"].shape[0]
    S["gate cumsum"].piece("log abar").add(k["g"][at].double() * LN2, *[torch.cumsum(t, 0) for t in g])
    S["kkt + solve: A diag(beta)"].piece("A D").add(k["A"][(*at, slice(None, L))].double() * beta[0].T.double(),
                                                    *both("T", times_beta))
    S["WY: w, u"].piece("w").add(k["w"][at], *both("Y", times_beta))
    S["WY: w, u"].piece("u").add(k["u"][at], *both("U", times_beta))
    st = S["states: h, v_new, S_T"]
    st.piece("h").add(k["h"][at[0], ci, at[2]], *both("S0"))
    st.piece("v_new").add(k["vnew"][at], *both("V_tilde", times_beta))
    S["output o"].piece("o").add(k["o"][at], *both("O"))
    if w.upstream is None:
        return
    S["bwd: w, u recomputed"].piece("w").add(k["bw"][at], *both("Y", times_beta))
    S["bwd: w, u recomputed"].piece("u").add(k["bu"][at], *both("U", times_beta))
    st = S["bwd: h, v_new recomputed"]
    st.piece("h").add(k["bh"][at[0], ci, at[2]], *both("S0"))
    st.piece("v_new").add(k["bvnew"][at], *both("V_tilde", times_beta))


def _chunk_gradients(w: _Walk, gr: list[dict], beta: list, at: tuple, ci: int, kh: int) -> None:
    """One chunk's backward stages (rows `at`, chunk ci of dh): gr, the float64 and same-dtype chunk's kept
    gradients (`_backward`'s per-chunk values), against the kernel's; its dk terms added to key head kh's sums."""
    S, k = w.S, w.k
    of_chunk = lambda key: [gr[i][key].detach().double() for i in range(2)]       # noqa: E731
    beta_row = lambda t: beta[0].double() * t[at].double()      # noqa: E731
    S["bwd: dv local"].piece("D dv_local").add(beta_row(k["dvl"]), *of_chunk("dv_local"))
    st = S["bwd: dh, dh0, dv"]
    st.piece("dh").add(k["dh"][at[0], ci, at[2]], *of_chunk("dS"))
    st.piece("D dv").add(beta_row(k["dv2"]), *of_chunk("dV_tilde"))
    S[DQKWG].piece("D dw").add(beta_row(k["dw"]), *of_chunk("dY"))
    S[DQKWG].piece("dg (o, S terms)").add(_reverse_cumsum(k["dg1"][at]), *of_chunk("dg direct"))
    S[WY].piece("dg (WY terms)").add(_reverse_cumsum(k["dg2"][at]), *of_chunk("dg via V~"))
    for name in ("dk direct", "dk via V~"):
        for i in range(2):
            w.summed[name][i][at[0], at[1], kh] += gr[i][name].detach()
