"""The PaTH paper's identity-permutation construction, for the state-tracking checks (pathmdn_verify.checks.
state_tracking) and the report's state sweep.

Backup slide "two heads distinguish the identity permutation" (seed 000, Appendix A of the paper):
token t = 1..n applies the swap of two of five coordinates as an exact reflection (beta = 2,
w = (e_a - e_b)/sqrt 2).  The start token's key k_0 = (1, 2, 3, 4, 5, -54.5, 0, ...) and the last query
q_n = n (1, 2, 3, 4, 5, 1, 0, ...) make the path logit

    s_0 = k_0^T H_1 ... H_n q_n = n (sum_r r pi(r) - 54.5),

n/2 for the identity and at most -n/2 otherwise.  All other keys are zero and only v_0 = e_1 is nonzero,
so the output's first coordinate is a_0 = e^{s_0} / (e^{s_0} + n), and the two-head decision is
sign(a_0 - 1/(n+1)).  The check reports the largest n at which the kernel decides every sampled
sequence correctly; the float64 oracle must decide correctly at every n tried.
"""
from __future__ import annotations

import random

import torch

D = 16          # the smallest head dim the kernels support; 6 coordinates are used


def swap_sequence(n: int, identity: bool, rng: random.Random) -> list[tuple[int, int]]:
    """n transpositions of {0..4}; identity=True makes them compose to the identity (a palindrome of
    swaps, length n even), otherwise a sequence whose composition is not the identity."""
    while True:
        half = [tuple(rng.sample(range(5), 2)) for _ in range(n // 2)]
        swaps = half + half[::-1] if identity else [tuple(rng.sample(range(5), 2)) for _ in range(n)]
        if composes_to_identity(swaps) == identity:
            return swaps


def composes_to_identity(swaps) -> bool:
    perm = list(range(5))
    for a, b in swaps:
        perm[a], perm[b] = perm[b], perm[a]
    return perm == list(range(5))


def construction(swaps, dtype, device) -> dict:
    n = len(swaps)
    T = n + 1
    q = torch.zeros(1, T, 1, D, dtype=torch.float64)
    k = torch.zeros_like(q)
    v = torch.zeros_like(q)
    w = torch.zeros_like(q)
    w[0, 0, 0, 0] = 1.0                   # token 0's transform never enters a logit; any unit vector
    for t, (a, b) in enumerate(swaps, start=1):
        w[0, t, 0, a], w[0, t, 0, b] = 2 ** -0.5, -(2 ** -0.5)
    k[0, 0, 0, :6] = torch.tensor([1, 2, 3, 4, 5, -54.5], dtype=torch.float64)
    q[0, n, 0, :6] = n * torch.tensor([1, 2, 3, 4, 5, 1], dtype=torch.float64)
    v[0, 0, 0, 0] = 1.0
    beta = torch.full((1, T, 1), 2.0, dtype=torch.float64)
    return {"q": q.to(dtype).to(device), "k": k.to(dtype).to(device), "v": v.to(dtype).to(device),
            "w": w.float().to(device), "beta": beta.float().to(device)}


def decides_identity(o_last0: float, n: int) -> bool:
    return o_last0 > 1.0 / (n + 1)
