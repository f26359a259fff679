"""Float64 PaTH attention, PaTH-FoX and FoX (torch; CPU or CUDA): the oracles, and the fast forms in torch.

Oracles (literal, independent of the fast forms): householder, householder_product (each H_t formed and
multiplied in order) and path_logits (the running-query walk); path_attn and fox_attn are built on them.
Fast forms: ut_factor, ut_product, path_logits_ut, block_transform, blockwise_logits, decode_keys run
references/path_forms.py with the torch binding (docs/design.md section 2.1); ``mm`` is their matrix
product, which the same-dtype implementation (verify/same_dtype.py) replaces by one that rounds its operands.

Conventions (docs/design.md sections 3 and 4): q [B, T, HQ, D], k and w [B, T, H, D], v [B, T, H, Dv], beta [B, T, H],
g [B, T, HQ] (g_t = log f_t, the log forget gate).  GQA: query head h reads key/value head h // (HQ // H).
Varlen: B == 1 and cu_seqlens [N + 1] split the time axis into independent sequences.

    H_t = I - beta_t w_t w_t^T
    logit_ij = k_j^T H_{j+1} H_{j+2} ... H_i q_i          (j <= i; empty product when j == i)
    o_i = sum_{j <= i} softmax_j(scale * logit_ij + gate_ij) v_j,   gate_ij = sum_{s=j+1..i} g_s

``gate_scaled=True`` computes softmax(scale * (logit_ij + gate_ij)) instead (the convention of an
implementation that multiplies the gate by the attention scale); the paper's formula is the default.

Per-head functions take [T, d] tensors; the public batched functions loop over batch, sequences and heads.
"""
from __future__ import annotations

import math

import torch

from pathmdn_verify.references import path_forms as forms
from pathmdn_verify.references.ops import TORCH, TorchOps

# ----------------------------------------------------------------------------------------------------
# Householder factors and ordered products (independent: formed literally, no UT algebra)


def householder(w: torch.Tensor, beta) -> torch.Tensor:
    """H = I - beta w w^T for one vector w [d].

    >>> householder(torch.tensor([1.0, 0.0], dtype=torch.float64), 2.0)
    tensor([[-1.,  0.],
            [ 0.,  1.]], dtype=torch.float64)
    """
    return torch.eye(w.shape[-1], dtype=w.dtype, device=w.device) - beta * torch.outer(w, w)


def householder_product(W: torch.Tensor, beta: torch.Tensor, order: str = "forward") -> torch.Tensor:
    """forward: H_1 H_2 ... H_L;  reverse: H_L ... H_1 (rows of W are w_t^T)."""
    if order not in ("forward", "reverse"):
        raise ValueError(f"order must be 'forward' or 'reverse', not {order!r}")
    P = torch.eye(W.shape[-1], dtype=W.dtype, device=W.device)
    for t in range(W.shape[0]):
        H = householder(W[t], beta[t])
        P = P @ H if order == "forward" else H @ P
    return P


# ----------------------------------------------------------------------------------------------------
# Logits: the literal running-query walk (the oracle)


def path_logits(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """All causal logits [T, T] by the literal walk, -inf above the diagonal.

    Keep a running copy of every query; as j walks down from T-1 to 0, apply H_{j+1} to the queries
    i > j, then read logit_ij = k_j . (current q_i).  O(T^2 d); no d x d matrices.  Differentiable
    (out of place: the rows i <= j are masked out of the update rather than sliced).
    """
    T = q.shape[0]
    later = torch.arange(T, device=q.device)
    cur, cols = q, []
    for j in range(T - 1, -1, -1):
        if j + 1 < T:
            coef = (cur @ w[j + 1]) * (beta[j + 1] * (later > j))
            cur = cur - torch.outer(coef, w[j + 1])
        cols.append(cur @ k[j])
    return causal_mask(torch.stack(cols[::-1], dim=1))


def causal_mask(A: torch.Tensor) -> torch.Tensor:
    """-inf above the diagonal (never a zero mask: exp(0) would give future tokens weight)."""
    return A.masked_fill(torch.ones_like(A, dtype=torch.bool).triu(1), -math.inf)


def plain_logits(q, k, mm=torch.matmul, window=None) -> torch.Tensor:
    """FoX / softmax attention logits q_i . k_j for j <= i, -inf above the diagonal (and, with a sliding window,
    for j <= i - window: query i sees keys i - window + 1 .. i)."""
    A = causal_mask(mm(q, k.T))
    if window is None:
        return A
    i = torch.arange(A.shape[-2], device=A.device)[:, None]
    return A.masked_fill(torch.arange(A.shape[-1], device=A.device)[None, :] <= i - window, -math.inf)


def gate_matrix(g: torch.Tensor) -> torch.Tensor:
    """gate_ij = sum_{s=j+1..i} g_s = G_i - G_j with G the cumulative sum of g (meaningful for j <= i)."""
    G = torch.cumsum(g, 0)
    return G[:, None] - G[None, :]


def scores(logits, gate=None, scale=1.0, gate_scaled=False):
    """scale * logit + gate (the paper), or scale * (logit + gate) when gate_scaled."""
    if gate is None:
        return scale * logits
    return scale * (logits + gate) if gate_scaled else scale * logits + gate


def attend(logits, v, g=None, scale=1.0, gate_scaled=False, mm=torch.matmul) -> torch.Tensor:
    """softmax_j(scores_ij) @ v, rows normalised over j <= i (the -inf entries drop out)."""
    gate = None if g is None else gate_matrix(g)
    return mm(torch.softmax(scores(logits, gate, scale, gate_scaled), dim=-1), v)


# ----------------------------------------------------------------------------------------------------
# The fast forms (references/path_forms.py) in torch; mm is the matrix product (verify/same_dtype.py passes
# one that rounds its operands)


def ut_factor(W: torch.Tensor, beta: torch.Tensor, mm=torch.matmul) -> torch.Tensor:
    """U = (I + strictLower(D W W^T))^{-1} D with D = diag(beta)."""
    return forms.ut_factor(TorchOps(mm), W, beta)


def ut_product(W: torch.Tensor, beta: torch.Tensor, order: str = "forward") -> torch.Tensor:
    """H_1 ... H_L = I - W^T U^T W (forward);  H_L ... H_1 = I - W^T U W (reverse)."""
    return forms.ut_product(TORCH, W, beta, order)


def path_logits_ut(q, k, w, beta) -> torch.Tensor:
    """All causal logits in closed form (one block): lower(Q K^T) - lower(Q W^T) U strictLower(W K^T)."""
    return causal_mask(forms.block_transform(TORCH, q, k, w, beta)["A_local"])


def block_transform(q, k, w, beta, mm=torch.matmul) -> dict:
    """U, Qbar, Kbar, F and A_local of one block (path_forms.block_transform)."""
    return forms.block_transform(TorchOps(mm), q, k, w, beta)


def blockwise_logits(q, k, w, beta, block=64, mm=torch.matmul):
    """All causal logits of one head by blocks (path_forms.scan over block_transform of each block).
    Returns (block starts, per-block transforms, logits [T, T], -inf above)."""
    T = q.shape[0]
    starts = list(range(0, T, block))
    blocks = [block_transform(q[s:s + block], k[s:s + block], w[s:s + block], beta[s:s + block], mm)
              for s in starts]
    logits = q.new_full((T, T), -math.inf)
    for (b, c), tile in forms.scan(TorchOps(mm), blocks).items():
        sb, sc = starts[b], starts[c]
        logits[sb:sb + block, sc:sc + block] = causal_mask(tile) if b == c else tile
    return starts, blocks, logits


def path_attn_blockwise_head(q, k, v, w, beta, g=None, scale=1.0, gate_scaled=False, block=64, mm=torch.matmul):
    """One head by blocks: the blockwise logits, then for each query block an online softmax over its key
    blocks, right to left.  Returns (o [T, Dv], intermediates dict)."""
    T = q.shape[0]
    starts, blocks, logits = blockwise_logits(q, k, w, beta, block, mm)
    G = torch.cumsum(g, 0) if g is not None else None
    out = []
    for b, sb in enumerate(starts):
        eb = min(sb + block, T)
        m = l = acc = None
        for c in range(b, -1, -1):
            sc, ec = starts[c], min(starts[c] + block, T)
            gate = None if G is None else G[sb:eb, None] - G[None, sc:ec]
            s = scores(logits[sb:eb, sc:ec], gate, scale, gate_scaled)
            m_new = s.max(dim=1).values if m is None else torch.maximum(m, s.max(dim=1).values)
            p = torch.exp(s - m_new[:, None])
            corr = torch.ones_like(m_new) if m is None else torch.exp(m - m_new)
            l = p.sum(1) if l is None else l * corr + p.sum(1)
            pv = mm(p, v[sc:ec])
            acc = pv if acc is None else acc * corr[:, None] + pv
            m = m_new
        out.append(acc / l[:, None])
    return torch.cat(out), {"blocks": blocks, "logits": logits}


# ----------------------------------------------------------------------------------------------------
# Decoding: the in-place key update


def decode_keys(k, w, beta) -> torch.Tensor:
    """The keys after all T tokens' in-place updates (path_forms.decode_keys): row j is H_T ... H_{j+1} k_j,
    so k_j . q_T is the path logit of the last query."""
    keys = k
    for keys in forms.decode_keys(TORCH, k, w, beta):
        pass
    return keys


def decode_cache(k, w, beta, cu_seqlens=None) -> torch.Tensor:
    """decode_keys for every batch, head and sequence of cu_seqlens (a sequence's keys see only the updates
    of its own later tokens): [B, T, H, D] -> [B, T, H, D]."""
    return torch.cat([torch.stack([torch.stack([decode_keys(k[b, s:e, h], w[b, s:e, h], beta[b, s:e, h])
                                                for h in range(k.shape[2])], dim=1) for b in range(k.shape[0])])
                      for s, e in segments(k.shape[1], cu_seqlens)], dim=1)


# ----------------------------------------------------------------------------------------------------
# Batched public API


def _check_shapes(q, k, v, w=None, beta=None, g=None, cu_seqlens=None):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, T, H, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, T, HQ, D = q.shape
    if k.shape[:2] != (B, T) or v.shape[:3] != k.shape[:3] or k.shape[-1] != D:
        raise ValueError(f"k {tuple(k.shape)} / v {tuple(v.shape)} do not match q {tuple(q.shape)}")
    if HQ % k.shape[2]:
        raise ValueError(f"query heads {HQ} not a multiple of key heads {k.shape[2]}")
    if w is not None and w.shape != k.shape:
        raise ValueError(f"w {tuple(w.shape)} must have the shape of k {tuple(k.shape)}")
    if beta is not None and beta.shape != k.shape[:3]:
        raise ValueError(f"beta {tuple(beta.shape)} must be [B, T, H] = {tuple(k.shape[:3])}")
    if g is not None and g.shape != q.shape[:3]:
        raise ValueError(f"g {tuple(g.shape)} must be [B, T, HQ] = {tuple(q.shape[:3])}")
    if cu_seqlens is not None and B != 1:
        raise ValueError("cu_seqlens requires batch size 1")


def segments(T: int, cu_seqlens=None) -> list[tuple[int, int]]:
    if cu_seqlens is None:
        return [(0, T)]
    c = [int(x) for x in cu_seqlens]
    if c[0] != 0 or c[-1] != T or any(b < a for a, b in zip(c, c[1:])):
        raise ValueError(f"cu_seqlens {c} must rise from 0 to T={T}")
    return [(a, b) for a, b in zip(c, c[1:]) if b > a]


HEADS_ELEMENTS = 2 ** 25     # per_head: heads at once times L^2 (each head holds several [L, L] matrices)


def per_head(head_fn, q, k, v, w, beta, g, cu_seqlens):
    """o [B, T, HQ, Dv] from head_fn(q, k, v, w, beta, g) on each sequence (varlen segments) and query head
    (GQA: query head h reads key head h // (HQ / H)).  All heads of a segment at once (torch.vmap: one launch
    per operation whatever B x HQ is; every value as a head-by-head loop gives it)."""
    B, T, HQ, _ = q.shape
    group = HQ // k.shape[2]
    by_query_head = lambda x: None if x is None else x.repeat_interleave(group, dim=2)
    x = {"q": q, "k": by_query_head(k), "v": by_query_head(v), "w": by_query_head(w), "beta": by_query_head(beta),
         "g": g}

    def head(x):
        return head_fn(x["q"], x["k"], x["v"], x.get("w"), x.get("beta"), x.get("g"))

    rows = []
    for s, e in segments(T, cu_seqlens):
        seg = {n: t[:, s:e].movedim(2, 1).flatten(0, 1) for n, t in x.items() if t is not None}    # [B HQ, e - s, .]
        at_once = max(1, HEADS_ELEMENTS // (e - s) ** 2)       # heads whose [L, L] matrices fit at once
        rows.append(torch.vmap(head, chunk_size=at_once)(seg).unflatten(0, (B, HQ)).movedim(1, 2))
    return torch.cat(rows, dim=1) if rows else q.new_zeros(B, T, HQ, v.shape[-1])


def default_scale(q) -> float:
    return q.shape[-1] ** -0.5


def path_attn(q, k, v, w, beta, g=None, scale=None, gate_scaled=False, cu_seqlens=None):
    """PaTH (and PaTH-FoX when g is given) by the literal walk; float64 in, float64 out [B, T, HQ, Dv]."""
    _check_shapes(q, k, v, w, beta, g, cu_seqlens)
    scale = default_scale(q) if scale is None else scale
    return per_head(lambda q_, k_, v_, w_, b_, g_: attend(path_logits(q_, k_, w_, b_), v_, g_, scale, gate_scaled),
                     q, k, v, w, beta, g, cu_seqlens)


def path_attn_blockwise(q, k, v, w, beta, g=None, scale=None, gate_scaled=False, cu_seqlens=None, block=64,
                        mm=torch.matmul):
    """The blockwise algorithm, batched; output only (use path_attn_blockwise_head for intermediates)."""
    _check_shapes(q, k, v, w, beta, g, cu_seqlens)
    scale = default_scale(q) if scale is None else scale
    return per_head(lambda q_, k_, v_, w_, b_, g_: path_attn_blockwise_head(
        q_, k_, v_, w_, b_, g_, scale, gate_scaled, block, mm)[0], q, k, v, w, beta, g, cu_seqlens)


def fox_attn(q, k, v, g=None, scale=None, gate_scaled=False, cu_seqlens=None, mm=torch.matmul, window=None):
    """FoX: A_ij proportional to (prod_{s=j+1..i} f_s) exp(scale q_i . k_j); softmax attention if g is None; with
    a sliding window only the keys i - window + 1 .. i."""
    _check_shapes(q, k, v, g=g, cu_seqlens=cu_seqlens)
    scale = default_scale(q) if scale is None else scale
    return per_head(lambda q_, k_, v_, w_, b_, g_: attend(plain_logits(q_, k_, mm, window), v_, g_, scale,
                                                          gate_scaled, mm), q, k, v, None, None, g, cu_seqlens)
