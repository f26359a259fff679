"""mpmath oracle for PaTH / PaTH-FoX / FoX attention at tiny sizes, for certifying the float64 oracle.

The most literal form: form every Householder matrix H_t = I - beta_t w_t w_t^T, multiply
H_{j+1} ... H_i explicitly, and take softmax_j(scale * logit_ij + gate_ij) with mp.exp, all at
`dps` decimal digits.  One head; inputs are sequences of rows (anything mp.mpf accepts: floats are
taken exactly).
"""
from __future__ import annotations

import mpmath as mp


def _mat(rows):
    return mp.matrix([[mp.mpf(x) for x in r] for r in rows])


def path_attn_head_mp(q, k, v, w=None, beta=None, g=None, scale=1.0, gate_scaled=False, dps=40):
    """One head: returns (o [T][Dv] as mpf lists, logits [T][T] with None above the diagonal).
    w=None or beta=None gives FoX / softmax attention (every H_t = I)."""
    with mp.workdps(dps):
        Q, K, V = _mat(q), _mat(k), _mat(v)
        T, d = Q.rows, Q.cols
        eye = mp.eye(d)
        Hs = []
        for t in range(T):
            if w is None or beta is None:
                Hs.append(eye)
            else:
                wt = _mat([w[t]]).T
                Hs.append(eye - mp.mpf(beta[t]) * (wt * wt.T))
        G = [mp.mpf(0)] * T
        if g is not None:
            acc = mp.mpf(0)
            for t in range(T):
                acc += mp.mpf(g[t])
                G[t] = acc
        scale = mp.mpf(scale)
        logits, out = [], []
        for i in range(T):
            P = eye
            row_logits, row_scores = [None] * T, []
            for j in range(i, -1, -1):          # P = H_{j+1} ... H_i, built right to left
                if j < i:
                    P = Hs[j + 1] * P
                lij = (K[j, :] * P * Q[i, :].T)[0, 0]
                row_logits[j] = lij
                gate = G[i] - G[j]
                s = scale * (lij + gate) if gate_scaled else scale * lij + gate
                row_scores.append((j, s))
            m = max(s for _, s in row_scores)
            weights = {j: mp.exp(s - m) for j, s in row_scores}
            z = mp.fsum(weights.values())
            out.append([mp.fsum(weights[j] * V[j, c] for j in weights) / z for c in range(V.cols)])
            logits.append(row_logits)
        return out, logits
