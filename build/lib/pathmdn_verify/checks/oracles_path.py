"""oracle.path.* / oracle.fox.*: the float64 PaTH oracles against mpmath and against each other.

Every agreement check has negative controls (ids ending in .negative.<what>): a wrong variant of the
kind that appears in the papers or in kernels must be rejected by a wide margin.
"""
from __future__ import annotations

import torch

from pathmdn_verify.references import path_oracle as P
from pathmdn_verify.references.path_oracle_mp import path_attn_head_mp
from pathmdn_verify.core.inputs import as_oracle
from pathmdn_verify.core.metrics import rel_err
from pathmdn_verify.core.registry import Context, check, rejects, within
from pathmdn_verify.ops.attention_ops import PathCase, path_inputs

EXACT = 1e-12          # float64 oracles agree to this normwise relative error
WRONG = 1e-6           # a wrong variant must differ by more than this to count as rejected


def _inputs(case: PathCase, ctx: Context) -> dict:
    return as_oracle(path_inputs(case, torch.float64, ctx.device, torch.float64, torch.float64))


def _head(x: dict, h: int = 0) -> tuple:
    """q, k, v, w, beta, g of batch 0, head h (GQA-free cases)."""
    return tuple(None if x[n] is None else x[n][0, :, h] for n in ("q", "k", "v", "w", "beta", "g"))


# ---------------------------------------------------------------------------------------------------
# literal float64 walk vs mpmath

MP_CASES = {
    "uniform": PathCase(T=12, D=4, Dv=3, seed=1),
    "beta2": PathCase(T=12, D=4, Dv=3, beta="two", seed=2),
    "beta_tiny": PathCase(T=10, D=3, Dv=2, beta="tiny", seed=3),
    "parallel_w": PathCase(T=12, D=4, Dv=3, w="aligned", beta="near2_4", seed=4),
    "gated": PathCase(T=12, D=4, Dv=3, gate="mixed", seed=5),
    "gated_scaled": PathCase(T=11, D=4, Dv=3, gate="strong", seed=6),
}


def _mp_truth(q, k, v, w, beta, g, scale, gate_scaled):
    out, logits = path_attn_head_mp(q.tolist(), k.tolist(), v.tolist(), w.tolist(), beta.tolist(),
                                    None if g is None else g.tolist(), scale, gate_scaled)
    T = q.shape[0]
    o = torch.tensor([[float(x) for x in r] for r in out], dtype=torch.float64)
    A = torch.tensor([[float(logits[i][j]) if j <= i else float("-inf") for j in range(T)] for i in range(T)],
                     dtype=torch.float64)
    return o, A


def _mp_case_head(name: str, ctx: Context) -> tuple:
    """q, k, v, w, beta, g of an MP_CASES case, on the CPU (mpmath reads them there)."""
    return tuple(None if t is None else t.cpu() for t in _head(_inputs(MP_CASES[name], ctx)))


def _finite_rel(x, ref):
    mask = torch.isfinite(ref)
    return rel_err(x[mask], ref[mask])


def _literal_vs_mp(name: str, case: PathCase):
    gate_scaled = name == "gated_scaled"

    def run(ctx: Context):
        q, k, v, w, beta, g = _mp_case_head(name, ctx)
        scale = 0.7
        o_mp, A_mp = _mp_truth(q, k, v, w, beta, g, scale, gate_scaled)
        A = P.path_logits(q, k, w, beta)
        o = P.attend(A, v, g, scale, gate_scaled)
        err = max(rel_err(o, o_mp), _finite_rel(A, A_mp))
        return within(err, EXACT, f"float64 walk vs mpmath (40 digits), {case.label()}")
    return run


for _name, _case in MP_CASES.items():
    check(f"oracle.path.literal_vs_mpmath.{_name}",
          f"literal float64 PaTH walk equals the mpmath explicit-product oracle ({_name})")(_literal_vs_mp(_name, _case))


@check("oracle.path.literal_vs_mpmath.negative.reversed_order",
       "rejects the reversed Householder order H_i ... H_{j+1} against the mpmath oracle")
def _reversed(ctx: Context):
    q, k, v, w, beta, g = _mp_case_head("uniform", ctx)
    _, A_mp = _mp_truth(q, k, v, w, beta, None, 1.0, False)
    T = q.shape[0]
    A = torch.full((T, T), float("-inf"), dtype=torch.float64)
    for i in range(T):
        for j in range(i + 1):
            A[i, j] = k[j] @ P.householder_product(w[j + 1:i + 1], beta[j + 1:i + 1], "reverse") @ q[i]
    return rejects(_finite_rel(A, A_mp), WRONG, "reversed-order logits vs mpmath")


@check("oracle.path.literal_vs_mpmath.negative.zero_mask",
       "rejects a zero causal mask (instead of -inf) against the mpmath oracle")
def _zero_mask(ctx: Context):
    q, k, v, w, beta, g = _mp_case_head("uniform", ctx)
    o_mp, _ = _mp_truth(q, k, v, w, beta, None, 0.7, False)
    A = P.path_logits(q, k, w, beta)
    o = P.attend(A.nan_to_num(neginf=0.0), v, None, 0.7)
    return rejects(rel_err(o, o_mp), WRONG, "zero-masked output vs mpmath")


@check("oracle.path.literal_vs_mpmath.negative.gate_misshifted",
       "rejects the gate sum over s = j..i (one step too many) against the mpmath oracle")
def _gate_shift(ctx: Context):
    q, k, v, w, beta, g = _mp_case_head("gated", ctx)
    o_mp, _ = _mp_truth(q, k, v, w, beta, g, 0.7, False)
    G = torch.cumsum(g, 0)
    Gm = torch.cat([G.new_zeros(1), G[:-1]])      # sum_{s=j..i} g_s = G_i - G_{j-1}
    s = 0.7 * P.path_logits(q, k, w, beta) + (G[:, None] - Gm[None, :])
    o = torch.softmax(s, -1) @ v
    return rejects(rel_err(o, o_mp), WRONG, "mis-shifted gate output vs mpmath")


@check("oracle.path.literal_vs_mpmath.negative.gate_dropped",
       "rejects dropping the forget gate against the mpmath PaTH-FoX oracle")
def _gate_drop(ctx: Context):
    q, k, v, w, beta, g = _mp_case_head("gated", ctx)
    o_mp, _ = _mp_truth(q, k, v, w, beta, g, 0.7, False)
    o = P.attend(P.path_logits(q, k, w, beta), v, None, 0.7)
    return rejects(rel_err(o, o_mp), WRONG, "gate-free output vs mpmath PaTH-FoX")


# ---------------------------------------------------------------------------------------------------
# UT transform


@check("oracle.path.ut_product", "I - W^T U^T W equals H_1...H_L and I - W^T U W equals H_L...H_1 (float64)")
def _ut(ctx: Context):
    x = _inputs(PathCase(T=24, D=8, w="aligned", seed=7), ctx)
    _, _, _, w, beta, _ = _head(x)
    err = max(rel_err(P.ut_product(w, beta, o), P.householder_product(w, beta, o)) for o in ("forward", "reverse"))
    return within(err, EXACT, "UT products vs explicit products (nearly parallel w)")


@check("oracle.path.ut_product.negative.printed_orientation",
       "rejects the paper's printed orientation I - W^T U W for the forward product H_1...H_L")
def _ut_neg(ctx: Context):
    x = _inputs(PathCase(T=6, D=4, seed=8), ctx)
    _, _, _, w, beta, _ = _head(x)
    return rejects(rel_err(P.ut_product(w, beta, "reverse"), P.householder_product(w, beta, "forward")), WRONG,
                   "I - W^T U W vs H_1...H_L")


@check("oracle.path.ut_logits_vs_literal",
       "lower(QK^T) - lower(QW^T) U strictLower(WK^T) equals the literal walk's causal logits")
def _ut_logits(ctx: Context):
    q, k, v, w, beta, g = _head(_inputs(PathCase(T=40, D=8, seed=9), ctx))
    return within(_finite_rel(P.path_logits_ut(q, k, w, beta), P.path_logits(q, k, w, beta)), EXACT,
                  "closed-form logits vs walk, T=40")


# ---------------------------------------------------------------------------------------------------
# blockwise algorithm vs literal

BLOCK_CASES = {
    "T37_block8": (PathCase(T=37, D=8, Dv=5, seed=10), 8),
    "T37_block16_gated": (PathCase(T=37, D=8, Dv=5, gate="mixed", seed=11), 16),
    "T64_block64_beta2": (PathCase(T=64, D=16, Dv=16, beta="two", seed=12), 64),
    "T50_block4_gqa": (PathCase(T=50, D=8, Dv=8, HQ=4, H=2, gate="strong", seed=13), 4),
    "varlen_block8": (PathCase(T=45, D=8, Dv=4, gate="mixed", cu_seqlens=(0, 7, 30, 45), seed=14), 8),
    "T33_block16_aligned": (PathCase(T=33, D=8, Dv=8, w="antialigned", beta="near2_7", seed=15), 16),
}


def _blockwise(name, case, block):
    def run(ctx: Context):
        x = _inputs(case, ctx)
        ref = P.path_attn(**x, scale=0.5)
        out = P.path_attn_blockwise(**x, scale=0.5, block=block)
        return within(rel_err(out, ref), EXACT, f"blockwise (block {block}) vs literal, {case.label()}")
    return run


for _name, (_case, _block) in BLOCK_CASES.items():
    check(f"oracle.path.blockwise_vs_literal.{_name}",
          f"blockwise UT/scan PaTH algorithm equals the literal walk ({_name})")(_blockwise(_name, _case, _block))


@check("oracle.path.blockwise_vs_literal.negative.transition_without_identity",
       "rejects the block transition F_b printed without 'I -' (the paper's p. 5 form)")
def _f_neg(ctx: Context):
    q, k, v, w, beta, g = _head(_inputs(PathCase(T=24, D=8, Dv=4, seed=16), ctx))
    ref, _ = P.path_attn_blockwise_head(q, k, v, w, beta, scale=0.5, block=8)
    original = P.block_transform

    def broken(*a):
        out = original(*a)
        out["F"] = out["F"] - torch.eye(out["F"].shape[0], dtype=out["F"].dtype, device=out["F"].device)
        return out
    P.block_transform = broken
    try:
        o, _ = P.path_attn_blockwise_head(q, k, v, w, beta, scale=0.5, block=8)
    finally:
        P.block_transform = original
    return rejects(rel_err(o, ref), WRONG, "blockwise output with F = -W^T U^T W vs correct")


# ---------------------------------------------------------------------------------------------------
# decoding, FoX


@check("oracle.path.decode_vs_literal", "decode-time in-place key updates give the last query's path logits")
def _decode(ctx: Context):
    q, k, v, w, beta, g = _head(_inputs(PathCase(T=48, D=8, beta="near2_4", seed=17), ctx))
    keys = P.decode_keys(k, w, beta)
    return within(rel_err(keys @ q[-1], P.path_logits(q, k, w, beta)[-1]), EXACT, "k_cache . q_T vs walk logits")


@check("oracle.path.decode_vs_literal.negative.update_before_read",
       "rejects applying H_t to k_t itself (updating j <= t instead of j < t)")
def _decode_neg(ctx: Context):
    q, k, v, w, beta, g = _head(_inputs(PathCase(T=16, D=8, seed=18), ctx))
    keys = k.clone()
    for t in range(k.shape[0]):
        keys[:t + 1] = keys[:t + 1] - beta[t] * torch.outer(keys[:t + 1] @ w[t], w[t])
    return rejects(rel_err(keys @ q[-1], P.path_logits(q, k, w, beta)[-1]), WRONG, "off-by-one decode vs walk")


@check("oracle.fox.vs_path_beta0", "FoX oracle equals PaTH-FoX with beta = 0 (GQA, varlen, both gate conventions)")
def _fox(ctx: Context):
    case = PathCase(T=40, D=8, Dv=6, HQ=4, H=2, gate="mixed", cu_seqlens=(0, 13, 40), seed=19)
    x = _inputs(case, ctx)
    x["beta"] = torch.zeros_like(x["beta"])
    err = 0.0
    for gs in (False, True):
        fx = {n: x[n] for n in ("q", "k", "v", "g", "cu_seqlens")}
        err = max(err, rel_err(P.fox_attn(**fx, scale=0.3, gate_scaled=gs), P.path_attn(**x, scale=0.3, gate_scaled=gs)))
    return within(err, EXACT, "FoX vs PaTH-FoX(beta=0)")


@check("oracle.fox.vs_path_beta0.negative.gate_convention",
       "the two gate conventions (scale*(A+g) vs scale*A+g) differ measurably when scale != 1")
def _fox_neg(ctx: Context):
    x = _inputs(PathCase(T=20, D=8, gate="mixed", seed=20), ctx)
    fx = {n: x[n] for n in ("q", "k", "v", "g")}
    return rejects(rel_err(P.fox_attn(**fx, scale=0.3, gate_scaled=True), P.fox_attn(**fx, scale=0.3)), WRONG,
                   "gate-scaled vs paper convention")
