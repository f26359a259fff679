"""Stage-by-stage comparison: the data structures shared by the stage definitions (path_stages, fox_stages,
mdn_stages, gdn_stages), the call captures that read a kernel's intermediates, and the one stage of a kernel
that has no intermediate to read (`one_stage`).

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

from pathmdn_verify.core import engine
from pathmdn_verify.core.budget import Verdict, verdict
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import scale_of


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
    # pathmdn_verify.core.budget.verdict's scale for a tensor that is exactly zero in the oracle; 0: the largest
    # magnitude among the stage's oracle tensors (the tensors compared together)
    scale: float = 0.0
    judged: list[Verdict] | None = None     # verdicts made whole elsewhere (one_stage), instead of the tensors

    def __post_init__(self):
        if not self.name or not self.source or not isinstance(self.prec, Precision) or \
                self.pass_ not in ("fwd", "bwd", "decode"):
            raise ValueError(f"stage {self.name!r}: a name, the source that computes it, a Precision and the pass "
                             f"(fwd, bwd or decode) whose budget factor judges it; got {self.source!r}, {self.prec!r}, "
                             f"{self.pass_!r}")

    def piece(self, tensor: str) -> Piece:
        return self.tensors.setdefault(tensor, Piece())

    def verdicts(self, budget_factor: dict) -> list[Verdict]:
        """Each tensor within c = budget_factor[pass_] (the op's, pathmdn_verify.ops) times the same-dtype error."""
        if self.judged is not None:
            return self.judged
        joined = {n: [torch.cat(t) for t in (p.kernel, p.oracle, p.same_dtype)] for n, p in self.tensors.items()
                  if p.kernel}
        scale = self.scale or max((float(o.abs().max()) for _, o, _ in joined.values() if o.numel()), default=0.0)
        return [verdict(n, k, o, s, self.prec, budget_factor[self.pass_], scale) for n, (k, o, s) in joined.items()]


@contextlib.contextmanager
def capturing(module, names: tuple[str, ...]):
    """Replace module.<name> for each name by a wrapper that captures (args, kwargs, outputs) of every call, so
    that the kernel's own forward runs unchanged and its stage results can be read afterwards.
    Yields {name: [(args, kwargs, outputs), ...]}; the outputs are cloned (later stages may write in place)."""
    calls: dict[str, list] = {n: [] for n in names}
    saved = {n: getattr(module, n) for n in names}

    def wrap(name, fn):
        def captured(*args, **kwargs):
            out = fn(*args, **kwargs)
            outs = out if isinstance(out, tuple) else (out,)
            calls[name].append((args, kwargs, tuple(o.detach().clone() if isinstance(o, torch.Tensor) else o
                                                    for o in outs)))
            return out
        return captured
    for n, fn in saved.items():
        setattr(module, n, wrap(n, fn))
    try:
        yield calls
    finally:
        for n, fn in saved.items():
            setattr(module, n, fn)


@contextlib.contextmanager
def launches(module, kernels: dict[str, tuple[str, ...]]):
    """Replace each Triton kernel module.<name> by a stand-in whose launches (kernel[grid](**kwargs)) run the
    kernel and then capture clones of the named tensor arguments (what the kernel wrote): for the results of
    kernels that a Python function launches one after another and never returns.
    Yields {name: [{argument: tensor}, ...]}, one dict per launch."""
    calls: dict[str, list] = {n: [] for n in kernels}
    saved = {n: getattr(module, n) for n in kernels}

    class Launcher:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            launch = self.kernel[grid]

            def captured(*args, **kwargs):
                out = launch(*args, **kwargs)
                calls[self.name].append({a: kwargs[a].detach().clone() for a in kernels[self.name]
                                         if isinstance(kwargs.get(a), torch.Tensor)})
                return out
            return captured

        def __getattr__(self, attr):
            return getattr(self.kernel, attr)
    for n, kernel in saved.items():
        setattr(module, n, Launcher(n, kernel))
    try:
        yield calls
    finally:
        for n, kernel in saved.items():
            setattr(module, n, kernel)


def one_stage(name: str, source: str, pass_: str):
    """The stages of an op pass that is one stage: a single fused kernel, or a PyTorch function whose gradients
    autograd forms, with no intermediate of its own to read.  Its outputs (fwd, decode) or input gradients (bwd,
    for one upstream gradient drawn from seed 0) are judged as its kernel check judges them
    (pathmdn_verify.core.engine), so the table has one stage and says which."""
    def stages(op, x: dict, dtype: str, fp32_dot: str) -> list[Stage]:
        prec = Precision.of_op(op, dtype, fp32_dot)
        judged = engine.measure_decode(op, x, prec) if pass_ == "decode" else engine.measure(op, pass_, x, prec, 0)
        return [Stage(name, source, prec, pass_, judged=judged)]
    return stages


def judge_gradients(stage: Stage, op, x: dict, grads: dict, upstream: list, prec: Precision) -> None:
    """Add to stage the kernel's input gradients `grads` (for the upstream gradients of op's outputs) against
    autograd of op's float64 oracle and of its same-dtype implementation on the same inputs."""
    s = scale_of(x)
    x64, x32 = as_oracle(x), floats_as(x, torch.float32)
    oracle = engine.grads_of(lambda **kw: op.oracle(**{**x64, **kw}, scale=s), {n: x64[n] for n in grads},
                             lambda outs: upstream)
    same = engine.grads_of(lambda **kw: op.same_dtype(**{**x32, **kw}, prec=prec, scale=s),
                           {n: x32[n] for n in grads}, lambda outs: upstream)
    stage.scale = max(float(g.abs().max()) for g in oracle.values())
    for n in grads:
        stage.piece("d" + n).add(grads[n], oracle[n], same[n])
