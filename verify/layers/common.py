"""What every layer comparison needs: import the layer, build it with seeded parameters, take its parameters in
float64 for the literal, run it so that its own exceptions are findings, and judge tensors under the kernel
budget rule (verify.core.budget: error against the float64 literal <= c x the same-dtype literal's error, or the
rounding floor where that is larger)."""
from __future__ import annotations

import importlib

import torch

from verify.core.budget import Verdict, verdict, worst
from verify.core.errors import is_interpreter_gap
from verify.core.precision import Precision
from verify.core.registry import Result
from verify.layers import INSTALL, LayerCase


class LayerRaised(Exception):
    """The layer under test raised: a finding (a failing check of kind exception), never a check error."""


class LayerMissing(Exception):
    """The kernel package offers no such layer (flash-linear-attention not installed, or an older tree)."""


def layer_class(case: LayerCase):
    rec = case.record
    try:
        module = importlib.import_module(rec.module)
    except ModuleNotFoundError as exc:
        raise LayerMissing(f"{rec.module} cannot be imported ({exc}); {INSTALL}") from exc
    if not hasattr(module, rec.cls):
        raise LayerMissing(f"{rec.module} has no {rec.cls}")
    return getattr(module, rec.cls)


def precision(case: LayerCase) -> Precision:
    return Precision.of(case.dtype, case.ctx.fp32_dot)


def build(case: LayerCase, seed: int, **sizes) -> torch.nn.Module:
    """The layer with the variant's arguments and `sizes`, its parameters drawn from `seed` (the same on every
    machine: torch's CPU generator), in the case's dtype on the run's device, in eval mode."""
    cls = layer_class(case)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = cls(**sizes, **case.kwargs)
    return layer.to(device=case.ctx.device, dtype=precision(case).torch_dtype).eval()


def params64(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The layer's parameters (state_dict names) as float64 CPU tensors: what the literal is built from."""
    return {n: p.detach().to("cpu", torch.float64) for n, p in layer.state_dict().items()}


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs) where fn is the layer under test: its exception becomes LayerRaised, except the CPU
    interpreter's own gap (verify.core.errors.is_interpreter_gap), which the runner makes a skip."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        if is_interpreter_gap(exc):
            raise
        raise LayerRaised(f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc


def judge(case: LayerCase, tensors: list[tuple], c: float, what: str = "", details: dict | None = None) -> Result:
    """One Result over (name, layer's tensor, float64 literal, same-dtype literal) tuples: the worst verdict
    decides; every tensor's verdict goes in details["tensors"]."""
    prec = precision(case)
    scale = max(float(t[2].abs().max()) for t in tensors if t[2].numel())
    vs: list[Verdict] = [verdict(n, out.detach().to("cpu", torch.float64), truth, same.detach().to("cpu", torch.float64),
                                 prec, c, scale) for n, out, truth, same in tensors]
    w = worst(vs)
    ok = w.ratio <= 1
    return Result("pass" if ok else "fail", w.measured, w.budget, (what + ": " if what else "") + w.summary(),
                  details={**(details or {}), "tensors": [v.record() for v in vs]},
                  kind=None if ok else w.kind, measure=w.decided_by)
