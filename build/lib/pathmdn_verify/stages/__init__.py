"""Stage-by-stage comparison: the data structures shared by the PaTH and MDN stage definitions.

A stage is one step of a kernel's algorithm whose result the kernel materialises (a tensor written by one
Triton kernel, or a local of a PyTorch function).  It is judged like a kernel output (pathmdn_verify.core.budget.verdict,
with the op's budget factor c of its pass, pathmdn_verify.ops):
against the float64 intermediate of the same definition in references/, within c times the error of the
same computation in the working precision (the same-dtype computation runs in float32 with the dtype's
rounded matmuls, pathmdn_verify.core.precision), with the unit-roundoff floor.  Several pieces (blocks, chunks, heads) of one
stage are concatenated and judged as one tensor.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from pathmdn_verify.core.budget import Verdict, verdict
from pathmdn_verify.core.precision import Precision


@dataclass
class Piece:
    """One tensor of a stage: the kernel's value, the float64 oracle's, the same-dtype computation's."""
    kernel: list = field(default_factory=list)
    oracle: list = field(default_factory=list)
    same_dtype: list = field(default_factory=list)

    def add(self, kernel: torch.Tensor, oracle: torch.Tensor, same_dtype: torch.Tensor) -> None:
        self.kernel.append(kernel.double().flatten())
        self.oracle.append(oracle.double().flatten())
        self.same_dtype.append(same_dtype.double().flatten())


@dataclass
class Stage:
    """A named stage, the kernel function that produced it, its precision and its tensors by name."""
    name: str
    source: str
    prec: Precision
    pass_: str = "fwd"          # which c of the op's budget_factor applies
    tensors: dict[str, Piece] = field(default_factory=dict)
    scale: float = 0.0          # pathmdn_verify.core.budget.verdict's scale for a tensor that is exactly zero in the oracle

    def piece(self, tensor: str) -> Piece:
        return self.tensors.setdefault(tensor, Piece())

    def verdicts(self, budget_factor: dict) -> list[Verdict]:
        """Each tensor within c = budget_factor[pass_] (the op's, pathmdn_verify.ops) times the same-dtype error."""
        return [verdict(n, torch.cat(p.kernel), torch.cat(p.oracle), torch.cat(p.same_dtype), self.prec,
                      budget_factor[self.pass_], self.scale) for n, p in self.tensors.items() if p.kernel]


@contextlib.contextmanager
def recording(module, names: tuple[str, ...]):
    """Replace module.<name> for each name by a wrapper that records (kwargs, outputs) of every call, so
    that the kernel's own forward runs unchanged and its stage results can be read afterwards.
    Yields {name: [(args, kwargs, outputs), ...]}; the outputs are cloned (later stages may write in place)."""
    calls: dict[str, list] = {n: [] for n in names}
    saved = {n: getattr(module, n) for n in names}

    def wrap(name, fn):
        def recorded(*args, **kwargs):
            out = fn(*args, **kwargs)
            outs = out if isinstance(out, tuple) else (out,)
            calls[name].append((args, kwargs, tuple(o.detach().clone() if isinstance(o, torch.Tensor) else o
                                                    for o in outs)))
            return out
        return recorded
    for n, fn in saved.items():
        setattr(module, n, wrap(n, fn))
    try:
        yield calls
    finally:
        for n, fn in saved.items():
            setattr(module, n, fn)
