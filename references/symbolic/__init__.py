"""Exact sympy proofs of the PaTH and MDN identities (DESIGN.md sections 3 and 4).

Every proof is a plain function (in :mod:`references.symbolic.path` and :mod:`references.symbolic.mdn`)
that builds both sides of an identity with symbols at a small size and returns a :class:`Proof`:

* ``difference``: lhs - rhs, reduced exactly (polynomial arithmetic over QQ, or ``cancel`` of rational
  functions).  It is the zero matrix when the identity holds.  For a *negative control* (a wrong form
  printed in a paper) it is a nonzero expression, and ``witness`` holds a rational point where it is
  nonzero together with the exact nonzero value there.
* ``statement`` and ``hypothesis``: what was proved, in words, and the weakest hypothesis used.
* ``exprs``: the proved expressions (e.g. the literal Householder products), over the symbols ``gens``,
  so that a caller can evaluate them exactly at a rational point (:meth:`Proof.evaluate`) and compare a
  float64 reference implementation with them.

No floating point is used in any proof.  This package depends on nothing else in the project (sympy only).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction

import sympy as sp
from sympy.polys.matrices import DomainMatrix

__all__ = ["Proof", "PolyAlgebra", "find_witness", "to_sympy", "is_zero", "first_nonzero"]


# ----------------------------------------------------------------------------------------------------
# Exact polynomial matrices: sympy's DomainMatrix over QQ[gens] (sparse PolyElement arithmetic, fast)


class PolyAlgebra:
    """Matrices over the polynomial ring QQ[gens], with the operations the proofs need."""

    def __init__(self, gens, point: dict | None = None):
        """point=None: the ring QQ[gens] (the proof).  point={symbol: rational}: the same construction
        specialised to QQ at that point (substitution is a ring homomorphism, so running the construction
        on the substituted inputs gives exactly the proved expression's value there, much faster than
        evaluating polynomials with thousands of terms)."""
        self.gens = tuple(gens)
        self.point = None if point is None else {g: sp.Rational(point[g]) for g in self.gens if g in point}
        self.R = sp.QQ[self.gens] if point is None else sp.QQ

    def _conv(self, e):
        e = sp.sympify(e)
        if self.point is not None:
            e = e.xreplace(self.point)
        return self.R.from_sympy(e)

    def mat(self, M) -> DomainMatrix:
        """sympy Matrix (entries polynomial in gens) -> DomainMatrix over QQ[gens] (or QQ at the point)."""
        M = sp.Matrix(M)
        return DomainMatrix([[self._conv(e) for e in M.row(i)] for i in range(M.rows)], M.shape, self.R)

    def scalar(self, e):
        return self._conv(e)

    def eye(self, n) -> DomainMatrix:
        return DomainMatrix.eye(n, self.R)

    def zeros(self, m, n) -> DomainMatrix:
        return DomainMatrix.zeros((m, n), self.R)

    def diag(self, entries) -> DomainMatrix:
        n = len(entries)
        rows = [[entries[i] if i == j else self.R.zero for j in range(n)] for i in range(n)]
        return DomainMatrix(rows, (n, n), self.R)

    def smul(self, s, M: DomainMatrix) -> DomainMatrix:
        """scalar (ring element) times matrix."""
        return DomainMatrix([[s * e for e in row] for row in M.to_list()], M.shape, self.R)

    def build(self, rows) -> DomainMatrix:
        rows = [list(r) for r in rows]
        return DomainMatrix(rows, (len(rows), len(rows[0]) if rows else 0), self.R)

    def tril(self, M: DomainMatrix, k: int = 0) -> DomainMatrix:
        """entries (i, j) with j <= i + k kept, others zero (k = 0: lower, k = -1: strictly lower)."""
        return self.build([[e if j <= i + k else self.R.zero for j, e in enumerate(row)]
                           for i, row in enumerate(M.to_list())])

    def hadamard(self, A: DomainMatrix, B: DomainMatrix) -> DomainMatrix:
        return self.build([[a * b for a, b in zip(ra, rb)] for ra, rb in zip(A.to_list(), B.to_list())])

    def unit_lower_inverse(self, N: DomainMatrix) -> DomainMatrix:
        """(I + S)^{-1} for S strictly lower triangular: the finite Neumann series sum_k (-S)^k,
        exact and polynomial (S is nilpotent)."""
        n = N.shape[0]
        S = N - self.eye(n)
        if any(e != self.R.zero for i, row in enumerate(S.to_list()) for j, e in enumerate(row) if j >= i):
            raise ValueError("unit_lower_inverse needs I + strictly lower triangular")
        term, total = self.eye(n), self.eye(n)
        for _ in range(n - 1):
            term = -(term * S)
            total = total + term
        return total

    def vstack(self, *Ms) -> DomainMatrix:
        return self.build([r for M in Ms for r in M.to_list()])

    def column(self, *Ms) -> DomainMatrix:
        """every entry of every matrix, stacked into one column (to collect differences of any shapes)."""
        return self.build([[e] for M in Ms for row in M.to_list() for e in row])

    def hstack(self, *Ms) -> DomainMatrix:
        return self.build([sum(rs, []) for rs in zip(*(M.to_list() for M in Ms))])


def to_sympy(M) -> sp.Matrix:
    """DomainMatrix / sympy Matrix / list -> sympy Matrix."""
    if isinstance(M, DomainMatrix):
        return M.to_Matrix()
    return sp.Matrix(M)


def is_zero(M) -> bool:
    if isinstance(M, DomainMatrix):
        z = M.domain.zero
        return all(e == z for row in M.to_list() for e in row)
    return all(sp.sympify(e) == 0 for e in sp.Matrix(M))


def first_nonzero(M):
    """(i, j, value) of the first nonzero entry, or None."""
    M = to_sympy(M)
    for i in range(M.rows):
        for j in range(M.cols):
            if M[i, j] != 0:
                return i, j, M[i, j]
    return None


# ----------------------------------------------------------------------------------------------------
# Witness points for negative controls

_WITNESS_VALUES = [Fraction(1, 2), Fraction(2, 3), Fraction(3, 4), Fraction(1, 3), Fraction(3, 5),
                   Fraction(2, 7), Fraction(5, 6), Fraction(4, 9), Fraction(1, 5), Fraction(7, 8),
                   Fraction(3, 7), Fraction(5, 11), Fraction(2, 5), Fraction(6, 7), Fraction(4, 5)]


def _point(gens, shift: int) -> dict:
    return {g: sp.Rational(_WITNESS_VALUES[(i + shift) % len(_WITNESS_VALUES)].numerator,
                           _WITNESS_VALUES[(i + shift) % len(_WITNESS_VALUES)].denominator)
            for i, g in enumerate(gens)}


def find_witness(difference, gens, tries: int = 15, at=None):
    """A rational point (every symbol in (0, 1), so gates and step sizes stay in range) where the
    difference is nonzero, and the exact nonzero entry there: (point, (i, j), value), or None.
    at: optional point -> {"difference": ...} that runs the same construction at the point."""
    gens = tuple(gens)
    for shift in range(tries):
        pt = _point(gens, shift)
        val = to_sympy(at(pt)["difference"]) if at is not None else _evaluate_exact(difference, gens, pt)
        nz = first_nonzero(val.applyfunc(lambda e: sp.nsimplify(sp.simplify(e)) if not e.is_Rational else e))
        if nz is not None:
            return pt, (nz[0], nz[1]), nz[2]
    return None


def _evaluate_exact(M, gens, point: dict) -> sp.Matrix:
    if isinstance(M, DomainMatrix):
        if M.domain.is_Field and not M.domain.is_FractionField:      # already numbers (QQ)
            return M.to_Matrix()
        K = M.domain.domain
        qvals = [K.from_sympy(sp.Rational(point[g])) for g in gens]
        return sp.Matrix([[K.to_sympy(e(*qvals)) for e in row] for row in M.to_list()])
    return sp.Matrix(M).xreplace({g: sp.Rational(v) for g, v in point.items()})


# ----------------------------------------------------------------------------------------------------
# The record every proof returns


@dataclass
class Proof:
    name: str
    statement: str
    hypothesis: str
    difference: object                 # DomainMatrix or sympy Matrix: exactly zero when the identity holds
    gens: tuple = ()
    exprs: dict = field(default_factory=dict)   # proved expressions (DomainMatrix or sympy Matrix) over gens
    negative: bool = False
    sizes: dict = field(default_factory=dict)
    witness: tuple | None = None       # negatives: (point, (i, j), exact nonzero value)
    extra: dict = field(default_factory=dict)   # further exact facts (e.g. a factored polynomial)
    at: object = None                  # optional point -> dict of the construction's matrices at that point

    @property
    def holds(self) -> bool:
        """True when the difference is exactly zero."""
        return is_zero(self.difference)

    @property
    def refuted(self) -> bool:
        """For a negative control: the wrong form differs from the truth at a concrete rational point."""
        return (not self.holds) and self.witness is not None and self.witness[2] != 0

    def difference_matrix(self) -> sp.Matrix:
        return to_sympy(self.difference)

    def evaluate(self, name: str, point: dict) -> sp.Matrix:
        """The proved expression `name` at a rational point {symbol: Rational}, exactly: by substitution,
        or (when the proof provides `at`) by running the same construction on the substituted inputs."""
        if self.at is not None:
            key = tuple(sorted((str(g), sp.Rational(v)) for g, v in point.items()))
            if getattr(self, "_memo_key", None) != key:
                self._memo_key, self._memo = key, self.at(point)
            return to_sympy(self._memo[name])
        return _evaluate_exact(self.exprs[name], self.gens, point)

    def witness_text(self) -> str:
        if self.witness is None:
            return "no witness"
        pt, (i, j), val = self.witness
        shown = ", ".join(f"{g}={v}" for g, v in itertools.islice(pt.items(), 6))
        more = "" if len(pt) <= 6 else f", ... ({len(pt)} symbols, each in (0, 1))"
        return f"entry ({i}, {j}) of the difference equals {val} (nonzero) at {shown}{more}"
