"""PaTH's fast forms, written once against an operations context (references/ops.py).

float64 torch (references/path_oracle.py), the same-dtype implementation (verify/same_dtype.py, through a
rounding ``mm``) and the sympy proofs (references/symbolic/path_proofs.py, exactly over QQ[w, q, k, beta]) all run
these functions.  They are not oracles: the literal walk and the explicit Householder products are.

W, Q, K are L x d (rows w_t^T, q_t^T, k_t^T), beta has length L, D = diag(beta), H_t = I - beta_t w_t w_t^T.
"""
from __future__ import annotations


def ut_factor(ops, W, beta):
    """U = (I + strictLower(D W W^T))^{-1} D."""
    L = ops.eye(W.shape[0], W) + ops.tril(beta[:, None] * ops.mm(W, W.T), -1)
    return ops.solve_lower(L, ops.diag(beta))


def ut_product(ops, W, beta, order="forward"):
    """H_1 ... H_L = I - W^T U^T W (forward);  H_L ... H_1 = I - W^T U W (reverse).  (The paper prints
    the reverse form for the forward product: a negative control.)"""
    if order not in ("forward", "reverse"):
        raise ValueError(f"order must be 'forward' or 'reverse', not {order!r}")
    U = ut_factor(ops, W, beta)
    return ops.eye(W.shape[1], W) - ops.mm(ops.mm(W.T, U.T if order == "forward" else U), W)


def block_transform(ops, Q, K, W, beta) -> dict:
    """Per-block quantities for rows first..last of one block:

    U    = (I + strictLower(D W W^T))^{-1} D
    Qbar = Q - lower(Q W^T) U W                  row i: H_first ... H_i q_i
    Kbar = K - (U strictLower(W K^T))^T W        row j: H_last ... H_{j+1} k_j
    F    = I - W^T U^T W                         H_first ... H_last (the paper drops the "I -")
    A_local = lower(Q K^T) - lower(Q W^T) U strictLower(W K^T)   (the block's own causal logits, 0 above)
    """
    mm = ops.mm
    U = ut_factor(ops, W, beta)
    U_wk = mm(U, ops.tril(mm(W, K.T), -1))
    return {
        "U": U,
        "Qbar": Q - mm(mm(ops.tril(mm(Q, W.T)), U), W),
        "Kbar": K - mm(U_wk.T, W),
        "F": ops.eye(W.shape[1], W) - mm(mm(W.T, U.T), W),
        "A_local": ops.tril(mm(Q, K.T)) - mm(ops.tril(mm(Q, W.T)), U_wk),
    }


def scan(ops, blocks) -> dict:
    """The logit tiles {(b, c): block b's queries x block c's keys} for c <= b: A_local on the diagonal;
    for query block b, Q_work = Qbar_b and for c = b-1 down to 0: read Q_work Kbar_c^T, then cross block
    c's transition, Q_work <- Q_work F_c^T.

    Walked by distance d = b - c, every query block at once: step d reads tile (b, b - d) of each b >= d and
    crosses F_(b-d), each as one `mm` over the blocks stacked (a [n - d, block, D] stack; rows of a shorter
    last block padded with zeros, which add nothing and are cut off).  The products are the per-block walk's,
    slice by slice; n - 1 steps instead of n (n - 1) / 2 (a kernel-launch count the same-dtype implementation
    pays on a GPU: 2 x 2016 products for one head at T = 4096, 2 x 63 stacked)."""
    n = len(blocks)
    tiles = {(b, b): blk["A_local"] for b, blk in enumerate(blocks)}
    if n < 2:
        return tiles
    rows = blocks[0]["Qbar"].shape[0]
    last = blocks[-1]["Qbar"]
    pad = ops.zeros((rows - last.shape[0], last.shape[1]), last)
    q_work = ops.stack([blk["Qbar"] for blk in blocks[1:-1]] + [ops.cat([last, pad])])   # query blocks 1..n-1
    kbar_t = ops.stack([blk["Kbar"].T for blk in blocks[:-1]])     # key blocks 0..n-2 (the last is read by none)
    f_t = ops.stack([blk["F"].T for blk in blocks[:-1]])
    for d in range(1, n):
        read = ops.mm(q_work, kbar_t[:n - d])                           # tiles (d + i, i)
        for i in range(n - d):
            tiles[d + i, i] = read[i][:blocks[d + i]["Qbar"].shape[0]]
        if d < n - 1:        # cross F_(b-d); query block d is done (it read block 0)
            q_work = ops.mm(q_work, f_t[:n - d])[1:]
    return tiles


def decode_keys(ops, K, W, beta):
    """The decode-time key cache: after token t, k_j <- k_j - beta_t w_t (w_t^T k_j) for every j < t.
    Yields the cache after each token t = 0, 1, ... (one array, updated in place): its row j <= t is
    H_t ... H_{j+1} k_j, so its product with q_t is the path logit of query t."""
    keys = K + ops.zeros(K.shape, K)
    for t in range(K.shape[0]):
        if t:
            keys[:t] = keys[:t] - ops.scale(beta[t], ops.outer(ops.mm(keys[:t], W[t]), W[t]))
        yield keys
