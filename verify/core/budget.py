"""The kernel budget rule (docs/design.md section 7).

A kernel output passes when, against the float64 oracle, both
    normwise relative error <= c * max(same_dtype_rel, floor_rel, u_storage) + TINY_REL   and
    max absolute error      <= c * max(same_dtype_abs, floor_abs, u * scale) + TINY_ABS
where same_dtype_* is the error of the same-dtype implementation (plain PyTorch in the same precision, on the
same input: pathmdn_verify.same_dtype) and floor_* the error of merely rounding the oracle's output to the storage dtype.
u_storage, the storage dtype's unit roundoff, bounds that rounding error; the measured one can be far
smaller on a small tensor (a single number at T = 1), and a budget built on such a lucky sample made
fp32 checks flake at 1.6-3.4 u across seeds (measured with --repeat), so the bound is the floor.
u is the unit roundoff of the precision's dot format and `scale` the tensor's largest magnitude, or,
for a tensor that is exactly zero in the oracle, the largest magnitude among the tensors compared
together: one rounding of that quantity is the least absolute error any implementation in that
precision can promise (a gradient that is exactly zero in the oracle, e.g. dk
at T = 1, carries cancellation noise of that size in FlashAttention-style backward kernels).  A tensor whose oracle is exactly zero has no relative error; its max-abs error decides.
An output that is a cancelling sum (an MDN output o_t = scale S_t^T q_t at T = 1, say) is no more
accurate than its summands: where the caller gives `terms`, the elementwise magnitude of the summed
terms (scale |S_t|^T |q_t|), one rounding of each term, u * terms, is also a floor, normwise
(u ||terms|| / ||oracle||) and in max-abs (u max terms).  Without it, an fp32 check flaked at
8.2 u at T = 1, where o_1 is proportional to k.q and the summands |k|.|q| were 16x larger (seed 7 at the
quick profile, found by --repeat).
A gradient that is such a sum gets the same floor with one fp32 rounding of each summand (`terms_u`, the
accumulator's unit roundoff in every precision here): the same-dtype implementation sums each block of 16
products exactly in float64 and rounds once per block (pathmdn_verify.core.precision), so on a cancelling
reduction its error is a rounding of the exact result, where an fp32 accumulator, rounding as it adds, can
make one rounding of each summand.  MDN's dq_t = scale S_t do_t and deta_t = k_t . dk^_t (k^ = eta k) are such
sums (pathmdn_verify.ops.mdn_ops): on the fp32 recurrence cases that failed without this floor (--repeat at
the quick profile; deta at T = 37, dq at T = 1) the same-dtype implementation erred 0.006-0.05 u max|terms|,
fla's recurrence 0.4-1.2 and the oracle's own walk run in fp32 0.2-0.7.  In bf16 this floor lies far below the
budget, which the dot format's rounding sets.
Non-finite output where the oracle is finite always fails.  The result says which measure decided.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pathmdn_verify.core.metrics import max_abs, rel_err
from pathmdn_verify.core.precision import Precision


class OracleFailed(Exception):
    """The float64 oracle or the same-dtype implementation raised on an input: never the kernel's failure
    (`verify compare`: a usage error naming the input; a kernel check: an error of the check)."""


TINY_REL = 1e-12
TINY_ABS = 1e-12


@dataclass
class Verdict:
    """One tensor's comparison.  ratio = worst of measured/budget over the two measures (<= 1 passes)."""
    name: str
    err_rel: float
    err_abs: float
    budget_rel: float
    budget_abs: float
    same_dtype_rel: float        # the same-dtype implementation's errors (pathmdn_verify.same_dtype), floors included
    same_dtype_abs: float
    error: str | None = None     # the kernel raised instead of returning (always a failure)
    shape: list[int] | None = None
    dtype: str | None = None     # the kernel output's dtype

    @property
    def ratio(self) -> float:
        if self.error:
            return math.inf
        r = max(self.err_rel / self.budget_rel, self.err_abs / self.budget_abs)
        return r if math.isfinite(r) else math.inf

    @property
    def decided_by(self) -> str:
        return "normwise-relative" if self.err_rel / self.budget_rel >= self.err_abs / self.budget_abs else "max-abs"

    @property
    def measure(self) -> str:
        """What measured / budget are, in pathmdn_verify.core.registry.Result's words."""
        return "normwise_relative" if self.decided_by == "normwise-relative" else "max_abs"

    @property
    def kind(self) -> str:
        """Why a failing verdict failed: the kernel raised, gave non-finite values, or exceeded its budget."""
        return "exception" if self.error else "non_finite" if not math.isfinite(self.err_abs) else "over_budget"

    @property
    def measured(self) -> float:
        return self.err_rel if self.decided_by == "normwise-relative" else self.err_abs

    @property
    def budget(self) -> float:
        return self.budget_rel if self.decided_by == "normwise-relative" else self.budget_abs

    @classmethod
    def raised(cls, exc: Exception) -> "Verdict":
        return cls("kernel", math.inf, math.inf, 1.0, 1.0, 0.0, 0.0, f"{type(exc).__name__}: {exc}".splitlines()[0])

    def as_json(self) -> dict:
        """The structured per-tensor verdict of the JSON (details["tensors"]); non-finite numbers as None."""
        num = lambda x: float(x) if math.isfinite(x) else None
        return {"name": self.name, "err_rel": num(self.err_rel), "budget_rel": num(self.budget_rel),
                "err_abs": num(self.err_abs), "budget_abs": num(self.budget_abs),
                "same_dtype_rel": num(self.same_dtype_rel), "same_dtype_abs": num(self.same_dtype_abs),
                "ratio": num(self.ratio), "decided_by": self.decided_by, "shape": self.shape,
                "dtype": self.dtype, "error": self.error}

    def summary(self) -> str:
        if self.error:
            return f"{self.name} raised {self.error}"
        return (f"{self.name}: rel {self.err_rel:.2e} (budget {self.budget_rel:.2e}, same-dtype {self.same_dtype_rel:.2e}), "
                f"max-abs {self.err_abs:.2e} (budget {self.budget_abs:.2e}); decided by {self.decided_by}")


@dataclass(frozen=True)
class Budget:
    """The budget of one tensor, from the oracle and the same-dtype implementation alone (no kernel output):
    rel is None where the oracle is exactly zero (no relative error; max-abs decides)."""
    rel: float | None
    abs: float
    same_dtype_rel: float
    same_dtype_abs: float


def budget(oracle: torch.Tensor, same_dtype: torch.Tensor, prec: Precision, c: float, scale: float = 0.0,
           terms: torch.Tensor | None = None, terms_u: float | None = None) -> Budget:
    """rel = c * max(same_dtype_rel, floor_rel) + TINY_REL and abs = c * max(same_dtype_abs, floor_abs) + TINY_ABS
    (the rule of this module's docstring; same_dtype_*: the same-dtype implementation's errors, or the rounding
    of the oracle to the storage dtype where larger)."""
    rounded = oracle.to(prec.torch_dtype).double()
    nonzero = bool(oracle.ne(0).any())
    magnitude = float(oracle.abs().max()) if nonzero else scale
    floor_rel = prec.unit_roundoff_storage
    floor_abs = prec.u * magnitude
    if terms is not None:
        u_terms = prec.u if terms_u is None else terms_u
        floor_abs = max(floor_abs, u_terms * float(terms.abs().max()))
        if nonzero:
            floor_rel = max(floor_rel, u_terms * float(terms.norm() / oracle.norm()))
    lowp_abs = max(max_abs(same_dtype, oracle), max_abs(rounded, oracle))
    budget_abs = c * max(lowp_abs, floor_abs) + TINY_ABS
    if not nonzero:
        return Budget(None, budget_abs, 0.0, lowp_abs)
    lowp_rel = max(rel_err(same_dtype, oracle), rel_err(rounded, oracle), floor_rel)
    return Budget(c * lowp_rel + TINY_REL, budget_abs, lowp_rel, lowp_abs)


def judged(name: str, out: torch.Tensor, oracle: torch.Tensor, b: Budget) -> Verdict:
    """out against the oracle under the budget b."""
    err_abs = max_abs(out, oracle)
    meta = {"shape": list(out.shape), "dtype": str(out.dtype).removeprefix("torch.")}
    if b.rel is None:
        return Verdict(name, 0.0 if math.isfinite(err_abs) else math.inf, err_abs, 1.0, b.abs, 0.0, b.same_dtype_abs,
                       **meta)
    return Verdict(name, rel_err(out, oracle), err_abs, b.rel, b.abs, b.same_dtype_rel, b.same_dtype_abs, **meta)


def verdict(name: str, out: torch.Tensor, oracle: torch.Tensor, same_dtype: torch.Tensor, prec: Precision, c: float,
          scale: float = 0.0, terms: torch.Tensor | None = None, terms_u: float | None = None) -> Verdict:
    """Compare one kernel tensor with the oracle under the budget rule (same_dtype: the same-dtype
    implementation's output on the same input; terms: the magnitude of the summands of a cancelling sum, each
    rounded once with unit roundoff terms_u, by default prec.u)."""
    return judged(name, out, oracle, budget(oracle, same_dtype, prec, c, scale, terms, terms_u))


def worst(verdicts: list[Verdict]) -> Verdict:
    return max(verdicts, key=lambda v: v.ratio)
