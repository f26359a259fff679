"""Exact proofs of the PaTH identities (DESIGN.md section 3, "PaTH"), with sympy.

Conventions: rows are 0-based in code, t = 0 .. L-1; the statements use the papers' 1-based words.
H_t = I - beta_t w_t w_t^T.  The literal truths are built as explicit ordered products of these matrices;
the closed forms (UT transform, boundary-adjusted blocks, scan) are built from their formulas; both live in
the polynomial ring QQ[w, q, k, beta] (every quantity here is polynomial: the UT factor is the inverse of a
unit lower-triangular matrix, a finite Neumann series), so "difference == 0" is an exact polynomial identity.

Hypotheses: the UT, block, scan and decode identities hold for ANY vectors w_t and ANY scalars beta_t (no
unit norm, no range on beta); only the eigenvector statement H w = (1 - beta) w needs ||w|| = 1, and the
swap needs beta = 2 with w = (e_a - e_b)/sqrt(2).
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from references.symbolic import PolyAlgebra, Proof, find_witness

# ----------------------------------------------------------------------------------------------------
# Symbols and the literal products


class PathSymbols:
    """W, Q, K (L x d, rows w_t^T, q_t^T, k_t^T) and beta_t, as matrices over QQ[all symbols]."""

    def __init__(self, L: int, d: int, point: dict | None = None):
        self.L, self.d = L, d
        self.W = sp.Matrix(L, d, lambda i, j: sp.Symbol(f"w{i}_{j}"))
        self.Q = sp.Matrix(L, d, lambda i, j: sp.Symbol(f"q{i}_{j}"))
        self.K = sp.Matrix(L, d, lambda i, j: sp.Symbol(f"k{i}_{j}"))
        self.beta = [sp.Symbol(f"beta{t}") for t in range(L)]
        self.gens = tuple(self.W) + tuple(self.Q) + tuple(self.K) + tuple(self.beta)
        A = self.alg = PolyAlgebra(self.gens, point)
        self.Wm, self.Qm, self.Km = A.mat(self.W), A.mat(self.Q), A.mat(self.K)
        self.b = [A.scalar(x) for x in self.beta]
        self.I = A.eye(d)
        self.H = []
        for t in range(L):
            w = A.mat(self.W.row(t).T)
            self.H.append(self.I - A.smul(self.b[t], w * w.transpose()))
        self._prod = {}

    def prod(self, first: int, last: int):
        """H_first H_{first+1} ... H_last (identity when first > last)."""
        key = (first, last)
        if key not in self._prod:
            if first > last:
                self._prod[key] = self.I
            else:
                self._prod[key] = self.prod(first, last - 1) * self.H[last]
        return self._prod[key]

    def rprod(self, first: int, last: int):
        """H_last ... H_first, the reverse order (identity when first > last)."""
        P = self.I
        for t in range(first, last + 1):
            P = self.H[t] * P
        return P

    def literal_logits(self, rows=None):
        """A~_ij = k_j^T H_{j+1} ... H_i q_i for j <= i, 0 above the diagonal (rows: the row range)."""
        A = self.alg
        rows = range(self.L) if rows is None else rows
        out = []
        for i in rows:
            q = A.mat(self.Q.row(i).T)
            r = []
            for j in range(self.L):
                if j > i:
                    r.append(A.R.zero)
                else:
                    k = A.mat(self.K.row(j))
                    r.append((k * self.prod(j + 1, i) * q).to_list()[0][0])
            out.append(r)
        return A.build(out)

    # closed forms -----------------------------------------------------------------------------------

    def ut_factor(self, lo: int = 0, hi: int | None = None):
        """U = (I + strictLower(D W W^T))^{-1} D for rows lo..hi-1."""
        A = self.alg
        hi = self.L if hi is None else hi
        W = self.rows(self.Wm, lo, hi)
        D = A.diag(self.b[lo:hi])
        N = A.eye(hi - lo) + A.tril(D * W * W.transpose(), -1)
        return A.unit_lower_inverse(N) * D

    def rows(self, M, lo, hi):
        return self.alg.build(M.to_list()[lo:hi])


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


def _block_formulas(S: PathSymbols, lo: int, hi: int) -> dict:
    """The DESIGN.md closed forms of one block (rows lo..hi-1)."""
    A = S.alg
    W, Q, K = S.rows(S.Wm, lo, hi), S.rows(S.Qm, lo, hi), S.rows(S.Km, lo, hi)
    U = S.ut_factor(lo, hi)
    return {
        "U": U,
        "Qbar": Q - A.tril(Q * W.transpose()) * U * W,
        "Kbar": K - (U * A.tril(W * K.transpose(), -1)).transpose() * W,
        "F": S.I - W.transpose() * U.transpose() * W,
        "A_local": A.tril(Q * K.transpose()) - A.tril(Q * W.transpose()) * U * A.tril(W * K.transpose(), -1),
    }


def _block_literals(S: PathSymbols, lo: int, hi: int) -> dict:
    """The same quantities as explicit ordered Householder products."""
    A = S.alg
    qbar = [((S.prod(lo, i) * A.mat(S.Q.row(i).T)).transpose()).to_list()[0] for i in range(lo, hi)]
    kbar = [((S.rprod(j + 1, hi - 1) * A.mat(S.K.row(j).T)).transpose()).to_list()[0] for j in range(lo, hi)]
    Aloc = S.literal_logits(range(lo, hi))
    return {"Qbar": A.build(qbar), "Kbar": A.build(kbar), "F": S.prod(lo, hi - 1),
            "A_local": A.build([row[lo:hi] for row in Aloc.to_list()])}


# ----------------------------------------------------------------------------------------------------
# 1. UT orientation


def _ut_parts(S):
    U = S.ut_factor()
    W = S.Wm
    fwd, rev = S.prod(0, S.L - 1), S.rprod(0, S.L - 1)
    d_rev = rev - (S.I - W.transpose() * U * W)
    d_fwd = fwd - (S.I - W.transpose() * U.transpose() * W)
    return {"difference": S.alg.column(d_rev, d_fwd), "U": U, "forward": fwd, "reverse": rev,
            "printed": fwd - (S.I - W.transpose() * U * W)}


def ut_orientation(L: int = 4, d: int = 3) -> Proof:
    return _proof(_ut_parts, L, d, "path.ut_orientation",
                  f"with U = (I + strictLower(D W W^T))^-1 D, H_L...H_1 = I - W^T U W and H_1...H_L = I - W^T U^T W "
                  f"hold as exact polynomial identities in the entries of W ({L}x{d}) and beta_1..beta_{L}",
                  "none: any w_t (unit norm not needed), any beta_t", {"L": L, "d": d}, ("U", "forward", "reverse"))


def ut_orientation_negative(L: int = 4, d: int = 3) -> Proof:
    return _proof(lambda S: {"difference": _ut_parts(S)["printed"]}, L, d, "path.ut_orientation.negative",
                  "the printed orientation 'H_1...H_L = I - W^T U W' (forward product with the non-transposed U) "
                  "is not an identity", "none", {"L": L, "d": d}, (), negative=True)


# ----------------------------------------------------------------------------------------------------
# 2. All causal logits


def _logits_parts(S):
    A = S.alg
    U = S.ut_factor()
    Q, K, W = S.Qm, S.Km, S.Wm
    ut = A.tril(Q * K.transpose()) - A.tril(Q * W.transpose()) * U * A.tril(W * K.transpose(), -1)
    lit = S.literal_logits()
    return {"difference": ut - lit, "logits": lit, "U": U}


def causal_logits(L: int = 4, d: int = 3) -> Proof:
    return _proof(_logits_parts, L, d, "path.causal_logits",
                  f"lower(Q K^T) - lower(Q W^T) U strictLower(W K^T) equals k_j^T H_(j+1)...H_i q_i for every "
                  f"j <= i and is 0 above the diagonal (L={L}, d={d}, all entries symbolic)",
                  "none: any w_t, any beta_t", {"L": L, "d": d}, ("logits", "U"))


# ----------------------------------------------------------------------------------------------------
# 3. Boundary-adjusted blocks


def _block_parts(S):
    f, lit = _block_formulas(S, 0, S.L), _block_literals(S, 0, S.L)
    diff = S.alg.column(*(f[n] - lit[n] for n in ("Qbar", "Kbar", "F", "A_local")))
    wrong = S.Wm.transpose() * f["U"].transpose() * S.Wm - lit["F"]
    return {"difference": diff, "U": f["U"], **lit, "printed": wrong}


def block_transform(L: int = 3, d: int = 2) -> Proof:
    return _proof(_block_parts, L, d, "path.block_transform",
                  f"for a block of {L} rows: Qbar = Q - lower(Q W^T) U W has row i = H_first...H_i q_i; "
                  f"Kbar = K - (U strictLower(W K^T))^T W has row j = H_last...H_(j+1) k_j; "
                  f"F = I - W^T U^T W = H_first...H_last; and the block's local causal logits are the UT form "
                  f"(d={d})", "none: any w_t, any beta_t", {"L": L, "d": d},
                  ("U", "Qbar", "Kbar", "F", "A_local"))


def block_transform_negative(L: int = 3, d: int = 2) -> Proof:
    return _proof(lambda S: {"difference": _block_parts(S)["printed"]}, L, d, "path.block_transform.negative",
                  "the paper's block product without 'I -' (F = W^T U^T W) is not H_first...H_last",
                  "none", {"L": L, "d": d}, (), negative=True)


# ----------------------------------------------------------------------------------------------------
# 4. Cross-block factorization and the scan


def _scan_logits(S: PathSymbols, block: int, read_first: bool = True):
    """All T x T logits by the blockwise algorithm: local UT logits on the diagonal blocks; for query
    block b, Q_work = Qbar_b and for c = b-1 .. 0: read Q_work Kbar_c^T, then Q_work <- Q_work F_c^T
    (read_first=False crosses the transition before reading: the wrong order)."""
    A = S.alg
    T = S.L
    starts = list(range(0, T, block))
    blk = [_block_formulas(S, s, min(s + block, T)) for s in starts]
    out = [[A.R.zero] * T for _ in range(T)]
    for b, sb in enumerate(starts):
        for ii, row in enumerate(blk[b]["A_local"].to_list()):
            for jj, e in enumerate(row):
                out[sb + ii][sb + jj] = e
        q_work = blk[b]["Qbar"]
        for c in range(b - 1, -1, -1):
            sc = starts[c]
            if not read_first:
                q_work = q_work * blk[c]["F"].transpose()
            tile = q_work * blk[c]["Kbar"].transpose()
            if read_first:
                q_work = q_work * blk[c]["F"].transpose()
            for ii, row in enumerate(tile.to_list()):
                for jj, e in enumerate(row):
                    out[sb + ii][sc + jj] = e
    return A.build(out), blk


def _factorized_logits(S: PathSymbols, block: int, blk):
    """Kbar_j^T F_(c+1) ... F_(b-1) Qbar_i for every i in block b, j in block c < b (0 elsewhere)."""
    A = S.alg
    T = S.L
    starts = list(range(0, T, block))
    out = [[A.R.zero] * T for _ in range(T)]
    for b, sb in enumerate(starts):
        for c in range(b):
            sc = starts[c]
            Fp = S.I
            for m in range(c + 1, b):
                Fp = Fp * blk[m]["F"]
            tile = blk[c]["Kbar"] * Fp * blk[b]["Qbar"].transpose()   # [j, i]
            for jj, row in enumerate(tile.to_list()):
                for ii, e in enumerate(row):
                    out[sb + ii][sc + jj] = e
    return A.build(out)


def _cross_parts(S, block, negative=False):
    A = S.alg
    T = S.L
    lit = S.literal_logits()
    if negative:
        wrong, _ = _scan_logits(S, block, read_first=False)
        return {"difference": wrong - lit}
    scan, blk = _scan_logits(S, block)
    fact = _factorized_logits(S, block, blk)
    # the factorization is claimed for cross-block pairs only: compare it there (zero elsewhere)
    mask = [[(j // block) < (i // block) for j in range(T)] for i in range(T)]
    lit_cross = A.build([[e if m else A.R.zero for e, m in zip(r, mr)] for r, mr in zip(lit.to_list(), mask)])
    return {"difference": A.column(scan - lit, fact - lit_cross), "logits": lit}


def cross_block(block: int = 3, nblocks: int = 3, d: int = 2) -> Proof:
    T = block * nblocks
    return _proof(lambda S: _cross_parts(S, block), T, d, "path.cross_block",
                  f"for {nblocks} blocks of {block} (T={T}, d={d}): for i in block b and j in block c < b, "
                  f"k_j^T H_(j+1)...H_i q_i = Kbar_j^T F_(c+1)...F_(b-1) Qbar_i, and the scan (Q_work = Qbar_b; "
                  f"for c = b-1..0 read Q_work Kbar_c^T, then Q_work <- Q_work F_c^T) with local UT logits on the "
                  f"diagonal blocks reproduces all {T * (T + 1) // 2} causal logits",
                  "none: any w_t, any beta_t", {"block": block, "nblocks": nblocks, "d": d}, ("logits",))


def cross_block_negative(block: int = 3, nblocks: int = 3, d: int = 2) -> Proof:
    return _proof(lambda S: _cross_parts(S, block, negative=True), block * nblocks, d,
                  "path.cross_block.negative",
                  "a scan that crosses block c's transition before reading it (Q_work <- Q_work F_c^T, then "
                  "Q_work Kbar_c^T) does not give the path logits", "none",
                  {"block": block, "nblocks": nblocks, "d": d}, (), negative=True)


# ----------------------------------------------------------------------------------------------------
# 5. Decoding: the in-place key update


def _decode_parts(S):
    A = S.alg
    T = S.L
    keys = [A.mat(S.K.row(j).T) for j in range(T)]
    lit = S.literal_logits()
    diff = [[A.R.zero] * T for _ in range(T)]
    for t in range(T):
        if t > 0:
            w = A.mat(S.W.row(t).T)
            for j in range(t):
                keys[j] = keys[j] - A.smul(S.b[t], w * (w.transpose() * keys[j]))
        q = A.mat(S.Q.row(t).T)
        for j in range(t + 1):
            diff[t][j] = (keys[j].transpose() * q).to_list()[0][0] - lit.to_list()[t][j]
    final = A.build([kk.transpose().to_list()[0] for kk in keys])
    return {"difference": A.build(diff), "keys": final, "logits": lit}


def decode_keys(T: int = 4, d: int = 2) -> Proof:
    return _proof(_decode_parts, T, d, "path.decode_keys",
                  f"after token t's in-place update k_j <- k_j - beta_t w_t (w_t^T k_j) of every j < t, "
                  f"k_j^T q_t equals the path logit k_j^T H_(j+1)...H_t q_t, for every t <= {T} and j <= t "
                  f"(d={d}); the final key j is H_T...H_(j+1) k_j",
                  "none: any w_t, any beta_t", {"T": T, "d": d}, ("keys", "logits"))


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
