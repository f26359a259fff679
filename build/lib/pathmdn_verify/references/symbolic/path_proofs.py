"""Exact proofs of the PaTH identities (docs/design.md, "PaTH"), with sympy.

Conventions: rows are 0-based in code, t = 0 .. L-1; the statements use the papers' 1-based words.
H_t = I - beta_t w_t w_t^T.  The literal truths are explicit ordered products of these matrices, built
here; the closed forms (UT transform, boundary-adjusted blocks, scan) are the code that runs,
references/path_forms.py, called with the exact binding :class:`pathmdn_verify.references.symbolic.Ring`.  Both live in
the polynomial ring QQ[w, q, k, beta] (the UT factor is the inverse of a unit lower-triangular matrix,
computed by forward substitution without division), so "difference == 0" is an exact polynomial identity.

Hypotheses: the UT, block, scan and decode identities hold for ANY vectors w_t and ANY scalars beta_t (no
unit norm, no range on beta); only the eigenvector statement H w = (1 - beta) w needs ||w|| = 1, and the
swap needs beta = 2 with w = (e_a - e_b)/sqrt(2).
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from pathmdn_verify.references import path_forms as forms
from pathmdn_verify.references.symbolic import Proof, Ring, column, find_witness

# ----------------------------------------------------------------------------------------------------
# Symbols and the literal products


class PathSymbols:
    """W, Q, K (L x d, rows w_t^T, q_t^T, k_t^T) and beta_t, as arrays over QQ[all symbols] (ops: the Ring)."""

    def __init__(self, L: int, d: int, point: dict | None = None):
        self.L, self.d = L, d
        self.W = sp.Matrix(L, d, lambda i, j: sp.Symbol(f"w{i}_{j}"))
        self.Q = sp.Matrix(L, d, lambda i, j: sp.Symbol(f"q{i}_{j}"))
        self.K = sp.Matrix(L, d, lambda i, j: sp.Symbol(f"k{i}_{j}"))
        self.beta = [sp.Symbol(f"beta{t}") for t in range(L)]
        self.gens = tuple(self.W) + tuple(self.Q) + tuple(self.K) + tuple(self.beta)
        ops = self.ops = Ring(self.gens, point)
        self.Wm, self.Qm, self.Km, self.b = ops.arr(self.W), ops.arr(self.Q), ops.arr(self.K), ops.arr(self.beta)
        self.I = ops.eye(d)
        self.H = [self.I - ops.scale(self.b[t], ops.outer(self.Wm[t], self.Wm[t])) for t in range(L)]
        self._prod = {}

    def prod(self, first: int, last: int):
        """H_first H_{first+1} ... H_last (identity when first > last)."""
        key = (first, last)
        if key not in self._prod:
            self._prod[key] = self.I if first > last else self.prod(first, last - 1) @ self.H[last]
        return self._prod[key]

    def rprod(self, first: int, last: int):
        """H_last ... H_first, the reverse order (identity when first > last)."""
        P = self.I
        for t in range(first, last + 1):
            P = self.H[t] @ P
        return P

    def literal_logits(self, rows=None):
        """A~_ij = k_j^T H_{j+1} ... H_i q_i for j <= i, 0 above the diagonal (rows: the row range)."""
        rows = range(self.L) if rows is None else rows
        return self.ops.array([[self.Km[j] @ self.prod(j + 1, i) @ self.Qm[i] if j <= i else self.ops.zero
                                for j in range(self.L)] for i in rows])

    def block(self, lo: int, hi: int) -> dict:
        """path_forms.block_transform of rows lo..hi-1 (the code under proof)."""
        return forms.block_transform(self.ops, self.Qm[lo:hi], self.Km[lo:hi], self.Wm[lo:hi], self.b[lo:hi])


@lru_cache(maxsize=None)
def symbols(L: int, d: int) -> PathSymbols:
    return PathSymbols(L, d)


def _proof(parts, L, d, name, statement, hypothesis, sizes, exprs, negative=False) -> Proof:
    """Run parts(S) symbolically; `at` reruns it with the symbols specialised to a rational point."""
    S = symbols(L, d)
    got = parts(S)
    at = lambda pt: parts(PathSymbols(L, d, pt))          # noqa: E731
    return Proof(name, statement, hypothesis, got["difference"], S.gens, {n: got[n] for n in exprs},
                 negative=negative, sizes=sizes, at=at,
                 witness=find_witness(got["difference"], S.gens, at=at) if negative else None)


def _block_literals(S: PathSymbols, lo: int, hi: int) -> dict:
    """The block quantities as explicit ordered Householder products."""
    return {"Qbar": S.ops.array([S.prod(lo, i) @ S.Qm[i] for i in range(lo, hi)]),
            "Kbar": S.ops.array([S.rprod(j + 1, hi - 1) @ S.Km[j] for j in range(lo, hi)]),
            "F": S.prod(lo, hi - 1), "A_local": S.literal_logits(range(lo, hi))[:, lo:hi]}


# ----------------------------------------------------------------------------------------------------
# 1. UT orientation


def _ut_parts(S):
    fwd, rev = S.prod(0, S.L - 1), S.rprod(0, S.L - 1)
    return {"difference": column(rev - forms.ut_product(S.ops, S.Wm, S.b, "reverse"),
                                 fwd - forms.ut_product(S.ops, S.Wm, S.b, "forward")),
            "forward": fwd, "reverse": rev, "printed": fwd - forms.ut_product(S.ops, S.Wm, S.b, "reverse")}


def ut_orientation(L: int = 4, d: int = 3) -> Proof:
    return _proof(_ut_parts, L, d, "path.ut_orientation",
                  f"path_forms.ut_product: with U = (I + strictLower(D W W^T))^-1 D, H_L...H_1 = I - W^T U W and "
                  f"H_1...H_L = I - W^T U^T W hold as exact polynomial identities in the entries of W ({L}x{d}) "
                  f"and beta_1..beta_{L}", "none: any w_t (unit norm not needed), any beta_t", {"L": L, "d": d},
                  ("forward", "reverse"))


def ut_orientation_negative(L: int = 4, d: int = 3) -> Proof:
    return _proof(lambda S: {"difference": _ut_parts(S)["printed"]}, L, d, "path.ut_orientation.negative",
                  "the printed orientation 'H_1...H_L = I - W^T U W' (forward product with the non-transposed U) "
                  "is not an identity", "none", {"L": L, "d": d}, (), negative=True)


# ----------------------------------------------------------------------------------------------------
# 2. All causal logits


def _logits_parts(S):
    lit = S.literal_logits()
    return {"difference": S.block(0, S.L)["A_local"] - lit, "logits": lit}


def causal_logits(L: int = 4, d: int = 3) -> Proof:
    return _proof(_logits_parts, L, d, "path.causal_logits",
                  f"path_forms.block_transform's A_local = lower(Q K^T) - lower(Q W^T) U strictLower(W K^T) of the "
                  f"whole sequence equals k_j^T H_(j+1)...H_i q_i for every j <= i and is 0 above the diagonal "
                  f"(L={L}, d={d}, all entries symbolic)", "none: any w_t, any beta_t", {"L": L, "d": d}, ("logits",))


# ----------------------------------------------------------------------------------------------------
# 3. Boundary-adjusted blocks


def _block_parts(S):
    f, lit = S.block(0, S.L), _block_literals(S, 0, S.L)
    return {"difference": column(*(f[n] - lit[n] for n in ("Qbar", "Kbar", "F", "A_local"))),
            "printed": S.Wm.T @ f["U"].T @ S.Wm - lit["F"]}


def block_transform(L: int = 3, d: int = 2) -> Proof:
    return _proof(_block_parts, L, d, "path.block_transform",
                  f"path_forms.block_transform for a block of {L} rows: Qbar = Q - lower(Q W^T) U W has row i = "
                  f"H_first...H_i q_i; Kbar = K - (U strictLower(W K^T))^T W has row j = H_last...H_(j+1) k_j; "
                  f"F = I - W^T U^T W = H_first...H_last; and the block's local causal logits are the UT form "
                  f"(d={d})", "none: any w_t, any beta_t", {"L": L, "d": d}, ())


def block_transform_negative(L: int = 3, d: int = 2) -> Proof:
    return _proof(lambda S: {"difference": _block_parts(S)["printed"]}, L, d, "path.block_transform.negative",
                  "the paper's block product without 'I -' (F = W^T U^T W) is not H_first...H_last",
                  "none", {"L": L, "d": d}, (), negative=True)


# ----------------------------------------------------------------------------------------------------
# 4. Cross-block factorization and the scan


def _assemble(S: PathSymbols, block: int, tiles: dict):
    """T x T array from {(b, c): tile}, zero where no tile is given."""
    out = S.ops.zeros((S.L, S.L))
    for (b, c), tile in tiles.items():
        out[b * block:(b + 1) * block, c * block:(c + 1) * block] = tile
    return out


def _blocks(S: PathSymbols, block: int) -> list:
    return [S.block(s, min(s + block, S.L)) for s in range(0, S.L, block)]


def _cross_parts(S, block, negative=False):
    lit = S.literal_logits()
    blk = _blocks(S, block)
    if negative:      # crossing block c's transition before reading it = reading Kbar_c F_c with the right scan
        wrong = [{**b, "Kbar": b["Kbar"] @ b["F"]} for b in blk]
        return {"difference": _assemble(S, block, forms.scan(S.ops, wrong)) - lit}
    scan = _assemble(S, block, forms.scan(S.ops, blk))
    # the factorization Kbar_j^T F_(c+1) ... F_(b-1) Qbar_i, claimed for cross-block pairs only
    fact = {}
    for b in range(len(blk)):
        for c in range(b):
            Fp = S.I
            for m in range(c + 1, b):
                Fp = Fp @ blk[m]["F"]
            fact[b, c] = (blk[c]["Kbar"] @ Fp @ blk[b]["Qbar"].T).T
    lit_cross = _assemble(S, block, {bc: lit[bc[0] * block:(bc[0] + 1) * block, bc[1] * block:(bc[1] + 1) * block]
                                     for bc in fact})
    return {"difference": column(scan - lit, _assemble(S, block, fact) - lit_cross), "logits": lit}


def cross_block(block: int = 3, nblocks: int = 3, d: int = 2) -> Proof:
    T = block * nblocks
    return _proof(lambda S: _cross_parts(S, block), T, d, "path.cross_block",
                  f"for {nblocks} blocks of {block} (T={T}, d={d}): for i in block b and j in block c < b, "
                  f"k_j^T H_(j+1)...H_i q_i = Kbar_j^T F_(c+1)...F_(b-1) Qbar_i, and path_forms.scan (Q_work = "
                  f"Qbar_b; for c = b-1..0 read Q_work Kbar_c^T, then Q_work <- Q_work F_c^T) with local UT logits "
                  f"on the diagonal blocks reproduces all {T * (T + 1) // 2} causal logits",
                  "none: any w_t, any beta_t", {"block": block, "nblocks": nblocks, "d": d}, ())


def cross_block_negative(block: int = 3, nblocks: int = 3, d: int = 2) -> Proof:
    return _proof(lambda S: _cross_parts(S, block, negative=True), block * nblocks, d,
                  "path.cross_block.negative",
                  "a scan that crosses block c's transition before reading it (Q_work <- Q_work F_c^T, then "
                  "Q_work Kbar_c^T) does not give the path logits", "none",
                  {"block": block, "nblocks": nblocks, "d": d}, (), negative=True)


# ----------------------------------------------------------------------------------------------------
# 5. Decoding: the in-place key update


def _decode_parts(S):
    lit = S.literal_logits()
    diff = S.ops.zeros((S.L, S.L))
    for t, keys in enumerate(forms.decode_keys(S.ops, S.Km, S.Wm, S.b)):
        diff[t, :t + 1] = keys[:t + 1] @ S.Qm[t] - lit[t, :t + 1]
    return {"difference": diff}


def decode_keys(T: int = 4, d: int = 2) -> Proof:
    return _proof(_decode_parts, T, d, "path.decode_keys",
                  f"path_forms.decode_keys: after token t's in-place update k_j <- k_j - beta_t w_t (w_t^T k_j) "
                  f"of every j < t, "
                  f"k_j^T q_t equals the path logit k_j^T H_(j+1)...H_t q_t, for every t <= {T} and j <= t "
                  f"(d={d}); the final key j is H_T...H_(j+1) k_j",
                  "none: any w_t, any beta_t", {"T": T, "d": d}, ())


# ----------------------------------------------------------------------------------------------------
# 6. Reflections, swaps and the eigenvectors of H


def reflection(d: int = 3) -> Proof:
    beta = sp.Symbol("beta")
    w = sp.Matrix(sp.symbols(f"w0:{d}"))
    u = sp.Matrix(sp.symbols(f"u0:{d}"))
    H = sp.eye(d) - beta * w * w.T
    nrm = (w.T * w)[0]
    # eigenvector w: H w - (1 - beta) w = beta (1 - ||w||^2) w exactly; zero modulo ||w||^2 = 1
    ev = (H * w - (1 - beta) * w).expand()
    factor_ok = (ev - beta * (1 - nrm) * w).expand()
    rem = sp.Matrix([sp.reduced(e, [nrm - 1], *w)[1] for e in ev])
    # any z orthogonal to w: z = ||w||^2 u - (w.u) w spans w's orthogonal complement (w != 0)
    z = nrm * u - (w.T * u)[0] * w
    fixed = (H * z - z).expand()
    orth = sp.expand((w.T * z)[0])
    # beta = 2, w = (e_a - e_b)/sqrt(2): the swap of coordinates a and b
    swaps, exprs = [], {}
    for a in range(d):
        for b in range(a + 1, d):
            ws = (sp.eye(d)[:, a] - sp.eye(d)[:, b]) / sp.sqrt(2)
            Hs = sp.eye(d) - 2 * ws * ws.T
            Pab = sp.eye(d)
            Pab[a, a] = Pab[b, b] = 0
            Pab[a, b] = Pab[b, a] = 1
            swaps.append(sp.simplify(Hs - Pab))
            exprs[f"swap_{a}_{b}"] = Pab
    diff = sp.Matrix.vstack(factor_ok, rem, fixed, sp.Matrix([orth]), *[s.reshape(d * d, 1) for s in swaps])
    return Proof(
        "path.reflection",
        f"(d={d}) beta = 2 with w = (e_a - e_b)/sqrt(2) gives exactly the permutation swapping coordinates "
        f"a and b (every pair a < b); H w - (1 - beta) w = beta (1 - ||w||^2) w identically, hence H w = "
        f"(1 - beta) w when ||w|| = 1; H z = z for every z orthogonal to w (z = ||w||^2 u - (w.u) w, any w)",
        "||w|| = 1 only for H w = (1 - beta) w (reduced modulo ||w||^2 - 1); the fixed-space statement "
        "needs no norm; the swap needs beta = 2 exactly",
        diff, tuple(w) + tuple(u) + (beta,), exprs, sizes={"d": d},
        extra={"eigen_residual_without_unit_norm": (beta * (1 - nrm) * w)})
