"""The operations context that the fast forms are written against (mpmath's ``ctx`` pattern), and its bindings.

references/path_forms.py and references/mdn_forms.py take ``ops`` as their first argument and use, besides
``+``, ``-``, elementwise ``*`` (with ``x[:, None]`` broadcasting), ``.T`` on matrices and indexing/slicing,
only these operations of it:

    mm(A, B)              matrix product (a rounding binding rounds the operands here)
    scale(s, X)           scalar times array (a scalar of a binding need not know its arrays)
    eye(n, like)          identity of n x n          zeros(shape, like)   ones(shape, like)
    tril(A, k)            keep entries j <= i + k, zero elsewhere (k = 0 lower, k = -1 strictly lower)
    solve_lower(L, B, unit)   L^-1 B for lower-triangular L (unit: the diagonal is 1)
    outer(a, b), diag(d), cat(vectors), stack(rows), exp, log, cumsum, cumprod, logcumsumexp
    neg_inf               the value l_0 = -inf of the log-domain coefficients

Bindings:
* :class:`TorchOps`: torch tensors in their own dtype (float64 for the oracles).  ``TorchOps(mm)`` with an
  ``mm`` that rounds its operands to a dot format is the same-dtype implementation of verify/same_dtype.py:
  every matrix product of a form then rounds as a kernel's tensor-core dot does, everything else runs in
  the tensors' dtype (fp32).
* :class:`ArrayOps`: numpy object arrays of exact or arbitrary-precision scalars: elements of sympy's
  QQ[gens] (the proofs of references/symbolic), sympy expressions (for the log-domain forms) or mpmath
  numbers (``MPMATH``).  Nothing is rounded except by the scalars themselves.
"""
from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import torch


class TorchOps:
    """torch tensors; ``mm`` is the matrix product (torch.matmul unless a rounding one is given)."""

    neg_inf = -math.inf

    def __init__(self, mm=torch.matmul):
        self.mm = mm

    @staticmethod
    def eye(n, like):
        return torch.eye(n, dtype=like.dtype, device=like.device)

    @staticmethod
    def zeros(shape, like):
        return like.new_zeros(shape)

    @staticmethod
    def ones(shape, like):
        return like.new_ones(shape)

    @staticmethod
    def scale(s, X):
        return s * X

    @staticmethod
    def tril(A, k=0):
        return torch.tril(A, diagonal=k)

    @staticmethod
    def solve_lower(L, B, unit=False):
        return torch.linalg.solve_triangular(L, B, upper=False, unitriangular=unit)

    outer = staticmethod(torch.outer)
    diag = staticmethod(torch.diag)
    exp = staticmethod(torch.exp)
    log = staticmethod(torch.log)

    @staticmethod
    def cat(xs):
        return torch.cat(list(xs))

    @staticmethod
    def stack(rows):
        return torch.stack(list(rows))

    @staticmethod
    def cumsum(x):
        return torch.cumsum(x, 0)

    @staticmethod
    def cumprod(x):
        return torch.cumprod(x, 0)

    @staticmethod
    def logcumsumexp(x):
        return torch.logcumsumexp(x, 0)


TORCH = TorchOps()


class ArrayOps:
    """numpy object arrays whose entries are scalars with +, -, * (and / where the forms divide): ring
    elements, sympy expressions or mpmath numbers.  exp and log are the scalars' own (None: not available,
    as in a polynomial ring)."""

    def __init__(self, one, zero, exp=None, log=None, neg_inf=None):
        self.one, self.zero, self._exp, self._log, self.neg_inf = one, zero, exp, log, neg_inf

    def array(self, rows):
        return np.array(rows, dtype=object)

    @staticmethod
    def mm(A, B):
        return A @ B

    @staticmethod
    def scale(s, X):
        box = np.empty((), dtype=object)        # s as a 0-d array: numpy multiplies entry by entry
        box[()] = s
        return box * X

    def eye(self, n, like=None):
        return self.array([[self.one if i == j else self.zero for j in range(n)] for i in range(n)])

    def zeros(self, shape, like=None):
        out = np.empty(shape, dtype=object)
        out.fill(self.zero)
        return out

    def ones(self, shape, like=None):
        out = np.empty(shape, dtype=object)
        out.fill(self.one)
        return out

    def tril(self, A, k=0):
        n, m = A.shape
        return self.array([[A[i, j] if j <= i + k else self.zero for j in range(m)] for i in range(n)])

    def solve_lower(self, L, B, unit=False):
        """Forward substitution; no division where the diagonal is 1 (exact in a polynomial ring)."""
        X = []
        for i in range(L.shape[0]):
            r = B[i] - sum((self.scale(L[i, j], X[j]) for j in range(i)), self.scale(self.zero, B[i]))
            X.append(r if unit or L[i, i] == self.one else r / L[i, i])
        return self.array(X).reshape(B.shape)

    def outer(self, a, b):
        return np.multiply.outer(a, b)

    def diag(self, d):
        D = self.zeros((len(d), len(d)))
        for i, x in enumerate(d):
            D[i, i] = x
        return D

    @staticmethod
    def cat(xs):
        return np.concatenate(list(xs))

    @staticmethod
    def stack(rows):
        return np.stack(list(rows))

    def _map(self, f, x, name):
        if f is None:
            raise TypeError(f"{name} is not available for these scalars (a polynomial ring has no {name})")
        return np.vectorize(f, otypes=[object])(x)

    def exp(self, x):
        return self._map(self._exp, x, "exp")

    def log(self, x):
        return self._map(self._log, x, "log")

    @staticmethod
    def cumsum(x):
        return np.cumsum(x)

    @staticmethod
    def cumprod(x):
        return np.cumprod(x)

    def logcumsumexp(self, x):
        return self.log(self.cumsum(self.exp(x)))


MPMATH = ArrayOps(mp.mpf(1), mp.mpf(0), mp.exp, mp.log, mp.ninf)


def mp_array(rows) -> np.ndarray:
    """nested lists of numbers -> object array of mpf (floats taken exactly), for the MPMATH binding."""
    return np.vectorize(mp.mpf, otypes=[object])(np.array(rows, dtype=object))
