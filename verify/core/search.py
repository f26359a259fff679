"""Hypothesis-driven search for the worst error of a kernel under its budget.

`search` runs a property over a strategy of cases (first the check's explicit cases: the boundary cases of its
op record's structure and its regression cases, every one of them even after one fails, so that each boundary a
check is given is reached), tells hypothesis to climb the error/budget ratio (`hypothesis.target`), and turns
the outcome into a Result: the worst case seen when everything passed, the worst explicit case that failed, or
the minimal failing example hypothesis shrank to, with the measured error, the budget and the case (saved for
`verify compare` under --save-failing).  A variant the kernel package does not offer, and an operation the Triton interpreter
cannot run, end the search as a skip (kinds unsupported, interpreter_gap), never a kernel failure.
The seed comes from the CLI, the example database is off, so a run is reproducible from its repro line.
"""
from __future__ import annotations

import math
import shlex
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, example, given, seed, settings, target
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers as _providers

from pathmdn_verify.core.errors import VariantUnsupported
from pathmdn_verify.core import hooks
from pathmdn_verify.core.boundaries import cost
from pathmdn_verify.core.budget import OracleFailed, Verdict
from pathmdn_verify.core.errors import (
    UsageError,
    innermost_error,
    is_device_fatal,
    is_interpreter_gap,
)
from pathmdn_verify.core.registry import DEVICE_LOST, Context, Result

# Hypothesis (6.131 and later) also draws integers and floats from the literals of every loaded module outside
# site-packages and the standard library, its "local constants": this toolkit's modules, a --kernel-root tree's.
# A check's examples then depended on which modules its worker had loaded before it and on the literals of this
# code (measured on the CPU at ci: kernel.fla.path_attn.fwd.bf16.saturated drew a case with seed=2048 in one full
# run and seed=400 in another and alone, with the same --seed).  That pool is kept empty, so that the seed and the
# check id alone decide the examples; property_tests/unit/test_kernels.py plants a module of literals to show it.
HYPOTHESIS_LOCAL_CONSTANTS = getattr(_providers, "_get_local_constants", None)     # hypothesis's own, for that test
if HYPOTHESIS_LOCAL_CONSTANTS is not None:
    _providers._get_local_constants = lambda: _providers.Constants()
    _providers.CONSTANTS_CACHE.cache.clear()

MAX_EXAMPLES = {"quick": 2, "ci": 2, "full": 5}     # drawn examples, after the structural cases (explicit)
# Kernel evaluations hypothesis may spend shrinking a failure, after the first failing example, counted in
# cases of SHRINK_UNIT_T tokens (a case of T tokens counts max(1, (T / SHRINK_UNIT_T)^2): the kernels and
# references are about quadratic in T, boundaries.cost): a failing PaTH backward under the interpreter costs
# 3 s an example, and an unbounded shrink of a listed fault spent 11 of them (46 s) without making the case
# smaller; at quick and ci one try (the run's verdict does not depend on it, and --profile full shrinks
# further).  At full a failure drawn at T = 4096 gets one try (16 units): hypothesis shrinks T toward the
# profile's first size, 4096 there, so every try ran the references at T = 4096 (measured on the H200,
# 2026-12-03, reports/h200-2026-12-03c/full_warm.json.gz: kernel.fla.path_attn.fwd.fp32.beta_two, a listed
# OutOfResources, took 139.5 s, 13 of its 18 cases at T = 4096).  Past the limit a case already seen is
# answered from its first evaluation and a new one counts as passing, unevaluated (counted, so the run is
# deterministic: the charge depends on the case alone).
SHRINK_EVALUATIONS = {"quick": 1, "ci": 1, "full": 12}
SHRINK_UNIT_T = 1024


@dataclass
class Probe:
    """What one evaluation returns: the worst tensor verdict and the case's one-line description."""
    verdict: Verdict
    label: str
    details: dict


class _Exceeded(AssertionError):
    pass


def _exceeded(label: str):
    """Raise _Exceeded from this one line (hypothesis replays a failure and requires the same origin)."""
    raise _Exceeded(label)


class _DeviceLost(BaseException):
    """Stops hypothesis at once: after a fatal CUDA error every later example would fail the same way,
    so shrinking would only report a meaningless 'minimal' case."""


class _NotVerifiable(BaseException):
    """Stops hypothesis at once: the kernel package lacks the variant, or the interpreter cannot run it."""
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def shrink_charge(case) -> float:
    """What one shrink evaluation of case spends of SHRINK_EVALUATIONS: max(1, (T / SHRINK_UNIT_T)^2)."""
    return max(1.0, cost(case) / SHRINK_UNIT_T ** 2)


def draw_seed(run_seed: int, check_id: str) -> int:
    """Hypothesis' seed for one check of a run: the run's seed and the check's id together (crc32), so that
    the checks of an op, which share a strategy, draw different examples in one run (with the run's seed
    alone every regime of an op drew the same sizes), and a run is still reproduced by its seed."""
    return zlib.crc32(f"{check_id}:{run_seed}".encode())


def search(strategy: st.SearchStrategy, evaluate: Callable[[object], Probe], ctx: Context, what: str,
           max_examples: int | None = None, explicit=(), saved: Callable | None = None) -> Result:
    """max_examples: the check's own number of examples (--examples overrides it; default by profile);
    explicit: cases run first, whatever the seed; saved(case) -> (tensors, `verify compare` arguments)
    for --save-failing."""
    worst: list[Probe] = []
    failures: list[tuple[Probe, object]] = []
    n_examples = [0]
    cases: list[str] = []       # every case evaluated, in order (details["cases"]: what verify coverage counts)
    failed: dict[str, tuple[Probe, dict]] = {}   # repr(case) -> (its probe, the tile configs it ran), per failing case
    shrink = {"left": SHRINK_EVALUATIONS[ctx.profile], "skipped": 0, "tries": 0}
    unsupported: dict[str, int] = {}     # why -> cases not run: a variant the implementation does not offer
    t0 = time.perf_counter()

    structural = {repr(c) for c in explicit}

    def prop(case):
        if failures and (key := repr(case)) in failed:     # hypothesis replays its minimal example last
            failures.append((failed[key][0], case))
            _exceeded(failed[key][0].label)
        drawn = repr(case) not in structural          # every structural case runs, even after a failure
        if failures and drawn and shrink["left"] <= 0:
            shrink["skipped"] += 1
            return
        if failures and drawn:
            shrink["left"] -= shrink_charge(case)
            shrink["tries"] += 1
        n_examples[0] += 1
        cases.append(case.label() if hasattr(case, "label") else repr(case))
        try:
            probe = evaluate(case)
        except VariantUnsupported as exc:     # this case needs a variant the implementation lacks: not run
            unsupported[str(exc)] = unsupported.get(str(exc), 0) + 1
            n_examples[0] -= 1
            cases.pop()
            return
        except Exception as exc:    # a kernel that raises on valid input fails this example
            probe = Probe(Verdict.raised(exc), case.label() if hasattr(case, "label") else repr(case), {})
            if is_device_fatal(exc):    # also from the oracle: the kernel's fault surfaces at the next CUDA call
                failures.append((probe, case))
                raise _DeviceLost from exc
            if isinstance(exc, (UsageError, OracleFailed)):
                raise
            if is_interpreter_gap(exc):
                raise _NotVerifiable("interpreter_gap", "not verifiable on the CPU interpreter: "
                                     + innermost_error(exc)) from exc
        ratio = probe.verdict.ratio
        target(min(ratio, 1e6) if math.isfinite(ratio) else 1e6, label="error / budget")
        if not worst or ratio > worst[0].verdict.ratio:
            worst[:] = [probe]
        if not ratio <= 1:
            failures.append((probe, case))
            failed[repr(case)] = (probe, hooks.last_example())     # a replay from `failed` launches nothing
            _exceeded(probe.label)

    test = given(strategy)(prop)
    for case in explicit:
        test = example(case)(test)
    test = settings(max_examples=ctx.examples or max_examples or MAX_EXAMPLES[ctx.profile], database=None,
                    # report_multiple_bugs: hypothesis runs every explicit example when one fails (then stops,
                    # before drawing any); every failure raises from one line, so it still reports one bug
                    deadline=None, derandomize=False, report_multiple_bugs=True, print_blob=False,
                    suppress_health_check=list(HealthCheck),
                    phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink))(seed(draw_seed(ctx.seed, what))(test))
    try:
        test()
    except _Exceeded:
        pass
    except _NotVerifiable as exc:
        return Result("skip", message=str(exc), kind=exc.kind)     # the line that prints it names the check
    except _DeviceLost:
        p = failures[-1][0]
        return Result("fail", math.inf, None,
                      f"{what}: the kernel raised a fatal CUDA error on [{p.label}] (example {n_examples[0]}, not "
                      f"shrunk): {p.verdict.error}; rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel",
                      details={"failing_example": p.label, DEVICE_LOST: True}, kind="cuda_fatal")
    elapsed = time.perf_counter() - t0
    not_run = {"unsupported_cases": unsupported} if unsupported else {}
    skipped = (f"; {sum(unsupported.values())} case(s) not run: " + "; ".join(unsupported)) if unsupported else ""
    if not worst and not failures:      # every case needed a variant the implementation does not offer
        return Result("skip", message="; ".join(f"{why} ({n} case{'s' * (n > 1)})" for why, n in unsupported.items())
                      or f"{what}: no case ran", kind="unsupported", details=not_run)
    if failures:
        # a structural case failed: the worst that did, the first of equals (hypothesis then draws nothing), so
        # that a listed defect at one case cannot stand in for a worse failure at another; else hypothesis
        # replays the minimal (shrunk) example last
        explicit_failures = [f for f in failures if repr(f[1]) in structural]
        p, case = max(explicit_failures, key=lambda f: f[0].verdict.ratio) if explicit_failures else failures[-1]
        v = p.verdict
        repro = _save_failing(ctx, what, case, saved)
        capped = f", shrinking stopped after {shrink['tries']} tries" if shrink["skipped"] else ""
        return Result("fail", v.measured, v.budget,
                      f"{what}: minimal failing example [{p.label}]: {v.summary()} "
                      f"({n_examples[0]} examples{capped}, {elapsed:.0f}s){skipped}" + (f"; repro: {repro}" if repro else ""),
                      details={"minimal_example": p.label, "worst_ratio": _finite(worst[0].verdict.ratio), "cases": cases, **not_run,
                               **p.details, **({"compare_command": repro} if repro else {}),
                               **({"configs_failing_example": ran} if (ran := failed[repr(case)][1]) else {})},
                      kind=v.kind, measure=v.measure)
    p = worst[0]
    v = p.verdict
    return Result("pass", v.measured, v.budget,
                  f"{what}: worst of {n_examples[0]} examples [{p.label}]: {v.summary()}{skipped}",
                  details={"worst_example": p.label, "worst_ratio": v.ratio, "cases": cases, **not_run, **p.details},
                  measure=v.measure)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _save_failing(ctx: Context, what: str, case, saved: Callable | None) -> str | None:
    """With --save-failing DIR: DIR/<check id>.pt holds the minimal example's inputs; returns the
    `verify compare` command that replays it, on the same kernel package (--kernel-root), device and --fp32-dot
    (None without the option or for a check without inputs)."""
    if not ctx.save_failing or saved is None:
        return None
    import torch
    tensors, compare_args = saved(case)
    path = Path(ctx.save_failing) / f"{what}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tensors, path)
    # the run's kernel package, device and interpreter fidelity too: without --kernel-root the command would
    # replay the example on the installed fla, not on the tree that failed
    return shlex.join(["verify", "compare", *compare_args, "--inputs", str(path), "--device", ctx.device,
                       "--fp32-dot", ctx.fp32_dot, *(["--kernel-root", ctx.kernel_root] if ctx.kernel_root else [])])
