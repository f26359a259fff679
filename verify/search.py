"""Hypothesis-driven search for the worst error of a kernel under its budget.

`search` runs a property over a strategy of cases (first the check's regression cases, verify.strategies), tells hypothesis to climb the error/budget ratio
(`hypothesis.target`), and turns the outcome into a Result: the worst case seen when everything passed,
or the minimal failing example hypothesis shrank to, with the measured error, the budget and the case.
The seed comes from the CLI, the example database is off, so a run is reproducible from its repro line.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from hypothesis import HealthCheck, Phase, example, given, seed, settings, target
from hypothesis import strategies as st

from verify.budget import Verdict
from verify.errors import UsageError, is_device_fatal
from verify.registry import DEVICE_LOST, Context, Result
from verify.strategies import REGRESSION_CASES

MAX_EXAMPLES = {"quick": 2, "ci": 3, "full": 5}


@dataclass
class Probe:
    """What one evaluation returns: the worst tensor verdict and the case's one-line description."""
    verdict: Verdict
    label: str
    details: dict


class _Exceeded(AssertionError):
    pass


class _DeviceLost(BaseException):
    """Stops hypothesis at once: after a fatal CUDA error every later example would fail the same way,
    so shrinking would only report a meaningless 'minimal' case."""


def search(strategy: st.SearchStrategy, evaluate: Callable[[object], Probe], ctx: Context, what: str,
           max_examples: int | None = None) -> Result:
    worst: list[Probe] = []
    failures: list[Probe] = []
    n_examples = [0]
    t0 = time.perf_counter()

    def prop(case):
        n_examples[0] += 1
        try:
            probe = evaluate(case)
        except UsageError:
            raise
        except Exception as exc:    # a kernel that raises on valid input fails this example
            probe = Probe(Verdict.raised(exc), case.label() if hasattr(case, "label") else repr(case), {})
            if is_device_fatal(exc):
                failures.append(probe)
                raise _DeviceLost from exc
        ratio = probe.verdict.ratio
        target(min(ratio, 1e6) if math.isfinite(ratio) else 1e6, label="error / budget")
        if not worst or ratio > worst[0].verdict.ratio:
            worst[:] = [probe]
        if not ratio <= 1:
            failures.append(probe)
            raise _Exceeded(probe.label)

    test = given(strategy)(prop)
    for case in REGRESSION_CASES.get(what, ()):
        test = example(case)(test)
    test = settings(max_examples=max_examples or ctx.examples or MAX_EXAMPLES[ctx.profile], database=None,
                    deadline=None, derandomize=False, report_multiple_bugs=False, print_blob=False,
                    suppress_health_check=list(HealthCheck),
                    phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink))(seed(ctx.seed)(test))
    try:
        test()
    except _Exceeded:
        pass
    except _DeviceLost:
        p = failures[-1]
        return Result("fail", math.inf, None,
                      f"{what}: the kernel raised a fatal CUDA error on [{p.label}] (example {n_examples[0]}, not "
                      f"shrunk): {p.verdict.error}; rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel",
                      details={"failing_example": p.label, DEVICE_LOST: True})
    elapsed = time.perf_counter() - t0
    if failures:
        p = failures[-1]   # hypothesis replays the minimal (shrunk) example last
        v = p.verdict
        return Result("fail", v.measured, v.budget,
                      f"{what}: minimal failing example [{p.label}]: {v.summary()} "
                      f"({n_examples[0]} examples, {elapsed:.0f}s)",
                      details={"minimal_example": p.label, "worst_ratio": worst[0].verdict.ratio, **p.details})
    p = worst[0]
    v = p.verdict
    return Result("pass", v.measured, v.budget,
                  f"{what}: worst of {n_examples[0]} examples [{p.label}]: {v.summary()}",
                  details={"worst_example": p.label, "worst_ratio": v.ratio, **p.details})
