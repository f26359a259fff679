"""Exact sympy proofs of the PaTH and MDN identities (docs/design.md, "Symbolic proofs").

The fast forms under proof are the code that runs: references/path_forms.py and references/mdn_forms.py,
called here with an exact binding of their operations context (:class:`Ring`, numpy object arrays of
QQ[gens] elements; :data:`EXPR`, sympy expressions, for the log-domain forms).  The other side of each
identity is an independent truth built here: explicit ordered Householder products, or the token
recurrence run step by step.

Every proof is a plain function (in :mod:`pathmdn_verify.references.symbolic.path_proofs` and :mod:`pathmdn_verify.references.symbolic.mdn_proofs`)
that builds both sides of an identity with symbols at a small size and returns a :class:`Proof`:

* ``difference``: lhs - rhs, reduced exactly (polynomial arithmetic over QQ, or ``cancel`` of rational
  functions).  It is the zero matrix when the identity holds.  For a *negative control* (a wrong form
  printed in a paper) it is a nonzero expression, and ``witness`` holds a rational point where it is
  nonzero together with the exact nonzero value there.
* ``statement`` and ``hypothesis``: what was proved, in words, and the weakest hypothesis used.
* ``exprs``: proved expressions over the symbols ``gens``, so that a caller can evaluate them exactly at
  a rational point (:meth:`Proof.evaluate`) and compare float64 code that is *not* the proved code (the
  literal walk, the spectra) with them.

No floating point is used in any proof.  This package depends on sympy, numpy and references/ only.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import sympy as sp

from pathmdn_verify.references.ops import ArrayOps

__all__ = ["Proof", "Ring", "EXPR", "column", "find_witness", "to_sympy", "is_zero", "first_nonzero"]


# ----------------------------------------------------------------------------------------------------
# The exact bindings of references/ops.py: numpy object arrays of QQ[gens] elements, or of sympy expressions


class Ring(ArrayOps):
    """The operations context over the polynomial ring QQ[gens]: the fast forms of references/path_forms.py
    and references/mdn_forms.py run on it unchanged, with no rounding and no division (their triangular
    systems are unit lower triangular: forward substitution stays in the ring)."""

    def __init__(self, gens, point: dict | None = None):
        """point=None: the ring QQ[gens] (the proof).  point={symbol: rational}: the same construction
        specialised to QQ at that point (substitution is a ring homomorphism, so running the construction
        on the substituted inputs gives exactly the proved expression's value there, much faster than
        evaluating polynomials with thousands of terms)."""
        self.gens = tuple(gens)
        self.point = None if point is None else {g: sp.Rational(point[g]) for g in self.gens if g in point}
        self.R = sp.QQ[self.gens] if point is None else sp.QQ
        super().__init__(self.R.one, self.R.zero)

    def scalar(self, e):
        e = sp.sympify(e)
        if self.point is not None:
            e = e.xreplace(self.point)
        return self.R.from_sympy(e)

    def arr(self, M) -> np.ndarray:
        """sympy Matrix (-> 2-D) or sequence of expressions (-> 1-D), entries polynomial in gens."""
        if isinstance(M, sp.MatrixBase):
            return self.array([[self.scalar(e) for e in M.row(i)] for i in range(M.rows)])
        return self.array([self.scalar(e) for e in M])


EXPR = ArrayOps(sp.Integer(1), sp.Integer(0), sp.exp, sp.log, -sp.oo)
"""sympy expressions as scalars (rational functions, logs and exps of the gates): the log-domain forms."""


def column(*Ms) -> np.ndarray:
    """every entry of every array, stacked into one column (to collect differences of any shapes)."""
    return np.concatenate([np.asarray(M, dtype=object).reshape(-1) for M in Ms]).reshape(-1, 1)


def _expr(e):
    if hasattr(e, "as_expr"):
        return e.as_expr()
    return sp.QQ.to_sympy(e) if not isinstance(e, (sp.Basic, int)) else sp.sympify(e)


def to_sympy(M) -> sp.Matrix:
    """object array (ring elements or expressions) / sympy Matrix / list -> sympy Matrix."""
    if isinstance(M, np.ndarray):
        M = M.reshape(M.shape[0], -1) if M.ndim else M.reshape(1, 1)
        return sp.Matrix(M.shape[0], M.shape[1], [_expr(e) for e in M.reshape(-1)])
    return sp.Matrix(M)


def is_zero(M) -> bool:
    if isinstance(M, np.ndarray):
        return all(e == 0 for e in M.reshape(-1))
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
    return to_sympy(M).xreplace({g: sp.Rational(point[g]) for g in gens if g in point})


# ----------------------------------------------------------------------------------------------------
# The record every proof returns


@dataclass
class Proof:
    name: str
    statement: str
    hypothesis: str
    difference: object                 # object array or sympy Matrix: exactly zero when the identity holds
    gens: tuple = ()
    exprs: dict = field(default_factory=dict)   # proved expressions (object arrays or sympy Matrices) over gens
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
