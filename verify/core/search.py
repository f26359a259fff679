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

from hypothesis import HealthCheck, Phase, given, seed, settings, target
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers as _providers

from pathmdn_verify.core import hooks
from pathmdn_verify.core.boundaries import cost
from pathmdn_verify.core.budget import OracleFailed, Verdict
from pathmdn_verify.core.errors import UsageError, VariantUnsupported, innermost, kernel_frame, verdict_of
from pathmdn_verify.core.ids import CheckId
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
# profile's first size, 4096 there, so every try ran the references at T = 4096 (a listed OutOfResources on
# the H200 spent 13 of its 18 cases, over two minutes, at T = 4096).  Past the limit a case already seen is
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
    alone every regime of an op drew the same sizes), and a run is still reproduced by its seed.  A check of
    another implementation draws what fla's check of the same op, pass, dtype and regime draws (its id with the
    implementation's word as fla's), so that implementations run side by side meet the same cases."""
    cid = CheckId.parse(check_id) if "." in check_id else None
    if cid is not None and cid.is_kernel and cid.impl != "fla":
        check_id = str(CheckId(cid.family, ("fla", *cid.parts[1:])))
    return zlib.crc32(f"{check_id}:{run_seed}".encode())


def search(strategy: st.SearchStrategy, evaluate: Callable[[object], Probe], ctx: Context, what: str,
           max_examples: int | None = None, explicit=(), saved: Callable | None = None) -> Result:
    """max_examples: the check's own number of examples (--examples overrides it; default by profile);
    explicit: cases run first, whatever the seed; saved(case) -> (tensors, `verify compare` arguments)
    for --save-failing."""
    s = _Search(evaluate, ctx, what, saved, explicit)
    n = ctx.examples or max_examples or MAX_EXAMPLES[ctx.profile]
    try:
        s.explore(strategy, n)
        for sig in [sig for sig, f in s.failures.items() if not f.explicit]:
            s.shrink(strategy, n, sig)
    except _NotVerifiable as exc:
        return Result("skip", message=str(exc), kind=exc.kind)     # the line that prints it names the check
    except _DeviceLost:
        p = s.lost
        return Result("fail", math.inf, None,
                      f"{what}: the kernel raised a fatal CUDA error on [{p.label}] (example {s.evaluated}, not "
                      f"shrunk): {p.verdict.error}; rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel",
                      details={"failing_example": p.label, DEVICE_LOST: True}, kind="cuda_fatal")
    return s.result()


@dataclass
class Failure:
    """One distinct failure of a check: its signature, its minimal example (an explicit case, or the drawn one
    hypothesis shrank to), and the worst example of the same signature where that is another."""
    signature: str
    probe: Probe
    case: object
    explicit: bool
    worst: Probe

    def as_json(self) -> dict:
        v = self.probe.verdict
        out = {"signature": self.signature, "kind": v.kind, "example": self.probe.label,
               "ratio": _finite(v.ratio), "measured": _finite(v.measured), "budget": _finite(v.budget),
               "measure": v.measure, "summary": v.summary()}
        if self.worst is not self.probe:
            out |= {"worst_example": self.worst.label, "worst_ratio": _finite(self.worst.verdict.ratio)}
        return out


class _Search:
    """One check's search: every explicit case, then hypothesis' drawn examples climbing error / budget, none of
    them stopped by a failure (`explore`); then, for each failure signature first met in a drawn example,
    hypothesis' shrinking of that signature alone, replaying the exploration from its memo (`shrink`)."""

    def __init__(self, evaluate, ctx: Context, what: str, saved, explicit):
        self.evaluate_case, self.ctx, self.what, self.saved = evaluate, ctx, what, saved
        self.explicit = list(explicit)
        self.structural = {repr(c) for c in explicit}
        self.memo: dict[str, tuple[Probe, str | None, dict]] = {}   # repr(case) -> (probe, signature, configs ran)
        self.cases: list[str] = []          # every case evaluated, in order (what verify coverage counts)
        self.unsupported: dict[str, int] = {}   # why -> cases not run: a variant the implementation does not offer
        self.failures: dict[str, Failure] = {}  # signature -> its failure, in the order first met
        self.worst: Probe | None = None
        self.evaluated = 0
        self.shrink_left = SHRINK_EVALUATIONS[ctx.profile]
        self.shrink_tries = self.shrink_skipped = 0
        self.lost: Probe | None = None
        self.t0 = time.perf_counter()

    def probe(self, case) -> tuple[Probe | None, str | None]:
        """(probe, failure signature or None) of case, evaluated once; (None, None) for a case the implementation
        does not take."""
        key = repr(case)
        if key in self.memo:
            return self.memo[key][:2]
        self.evaluated += 1
        label = case.label() if hasattr(case, "label") else key
        try:
            probe = self.evaluate_case(case)
        except VariantUnsupported as exc:     # this case needs a variant the implementation lacks: not run
            self.unsupported[str(exc)] = self.unsupported.get(str(exc), 0) + 1
            self.evaluated -= 1
            self.memo[key] = (None, None, {})
            return None, None
        except Exception as exc:    # a kernel that raises on valid input fails this example (verdict_of's error)
            probe = Probe(Verdict.raised(exc), label, {"exception": type(innermost(exc)).__name__,
                                                       "exception_at": kernel_frame(exc)})
            status, kind, message = verdict_of(exc)
            if kind == "cuda_fatal":    # also from the oracle: the kernel's fault surfaces at the next CUDA call
                self.lost = probe
                raise _DeviceLost from exc
            if isinstance(exc, (UsageError, OracleFailed)):
                raise
            if status == "skip":
                raise _NotVerifiable(kind, message) from exc
        self.cases.append(label)
        sig = None if probe.verdict.ratio <= 1 else signature(probe, case)
        self.memo[key] = (probe, sig, hooks.last_example() if sig else {})
        if self.worst is None or probe.verdict.ratio > self.worst.verdict.ratio:
            self.worst = probe
        if sig is not None:
            f = self.failures.get(sig)
            if f is None:
                self.failures[sig] = Failure(sig, probe, case, key in self.structural, probe)
            elif probe.verdict.ratio > f.worst.verdict.ratio:
                f.worst = probe
        return probe, sig

    def _settings(self, n: int, shrinking: bool):
        return settings(max_examples=n, database=None, deadline=None, derandomize=False, print_blob=False,
                        report_multiple_bugs=False, suppress_health_check=list(HealthCheck),
                        phases=(Phase.generate, Phase.target, *((Phase.shrink,) if shrinking else ())))

    def explore(self, strategy, n: int) -> None:
        """Every explicit case (the boundary and regression cases: each runs, whatever failed before it), then
        hypothesis' n drawn examples, climbing error / budget (hypothesis.target); nothing stops at a failure."""
        for case in self.explicit:
            self.probe(case)

        def prop(case):
            probe, _ = self.probe(case)
            if probe is not None:
                r = probe.verdict.ratio
                target(min(r, 1e6) if math.isfinite(r) else 1e6, label="error / budget")
        given(strategy)(self._settings(n, False)(seed(draw_seed(self.ctx.seed, self.what))(prop)))()

    def shrink(self, strategy, n: int, sig: str) -> None:
        """Hypothesis' minimal example of one signature first met in a drawn example: the same seed replays the
        exploration (answered from the memo) up to that failure, then shrinks it, each new case charged to the
        shrink budget (SHRINK_EVALUATIONS; past it a new case counts as passing, unevaluated, so that the outcome
        depends on the cases alone)."""
        found = []

        def prop(case):
            key = repr(case)
            if key not in self.memo and found:
                if self.shrink_left <= 0:
                    self.shrink_skipped += 1
                    return
                self.shrink_left -= shrink_charge(case)
                self.shrink_tries += 1
            probe, got = self.probe(case)
            if probe is not None:
                r = probe.verdict.ratio
                target(min(r, 1e6) if math.isfinite(r) else 1e6, label="error / budget")
            if got == sig:
                found.append((probe, case))
                _exceeded(sig)
        try:
            given(strategy)(self._settings(n, True)(seed(draw_seed(self.ctx.seed, self.what))(prop)))()
        except _Exceeded:
            probe, case = found[-1]          # hypothesis replays the minimal example last
            f = self.failures[sig]
            f.probe, f.case = probe, case

    def result(self) -> Result:
        elapsed = time.perf_counter() - self.t0
        not_run = {"unsupported_cases": self.unsupported} if self.unsupported else {}
        skipped = (f"; {sum(self.unsupported.values())} case(s) not run: " + "; ".join(self.unsupported)
                   if self.unsupported else "")
        if self.worst is None:      # every case needed a variant the implementation does not offer
            return Result("skip", message="; ".join(f"{why} ({n} case{'s' * (n > 1)})"
                                                    for why, n in self.unsupported.items()) or f"{self.what}: no case ran",
                          kind="unsupported", details=not_run)
        if not self.failures:
            p, v = self.worst, self.worst.verdict
            return Result("pass", v.measured, v.budget,
                          f"{self.what}: worst of {self.evaluated} examples [{p.label}]: {v.summary()}{skipped}",
                          details={"worst_example": p.label, "worst_ratio": v.ratio, "cases": self.cases, **not_run,
                                   **p.details}, measure=v.measure)
        failures = list(self.failures.values())
        primary = max(failures, key=lambda f: f.worst.verdict.ratio)    # the worst decides the check's numbers
        v = primary.probe.verdict
        repros = {f.signature: _save_failing(self.ctx, self.what, f.case, self.saved, i if len(failures) > 1 else None)
                  for i, f in enumerate(failures)}
        capped = f", shrinking stopped after {self.shrink_tries} tries" if self.shrink_skipped else ""
        described = "; ".join(_describe(f, repros[f.signature], len(failures) > 1) for f in failures)
        head = f"{len(failures)} distinct failures: " if len(failures) > 1 else ""
        configs_ran = self.memo[repr(primary.case)][2]
        return Result("fail", v.measured, v.budget,
                      f"{self.what}: {head}{described} ({self.evaluated} examples{capped}, {elapsed:.0f}s){skipped}",
                      details={"minimal_example": primary.probe.label, "worst_ratio": _finite(primary.worst.verdict.ratio),
                               "worst_example": primary.worst.label, "cases": self.cases, **not_run,
                               "failures": [{**f.as_json(), **({"compare_command": r} if (r := repros[f.signature]) else {})}
                                            for f in failures],
                               **primary.probe.details,
                               **({"compare_command": repros[primary.signature]} if repros[primary.signature] else {}),
                               **({"configs_failing_example": configs_ran} if configs_ran else {})},
                      kind=v.kind, measure=v.measure)


def _describe(f: Failure, repro: str | None, several: bool) -> str:
    """One failure in a check's message: its signature (when the check has several), its minimal example and
    verdict, and the example that gave its worst ratio where that is another one."""
    text = (f"[{f.signature}] " if several else "") + f"minimal failing example [{f.probe.label}]: {f.probe.verdict.summary()}"
    if f.worst is not f.probe:
        text += f"; its worst ratio {f.worst.verdict.ratio:.3g} at [{f.worst.label}]"
    return text + (f"; repro: {repro}" if repro else "")


def signature(probe: Probe, case) -> str:
    """What a failure is, so that two bugs in one check are told apart: for an exception its type and the kernel
    source line it came from; for an output over budget or non-finite, the tensor and the structural case (varlen,
    GQA, grouped value heads, an initial state; else dense)."""
    v = probe.verdict
    if v.kind == "exception":
        where = probe.details.get("exception_at")
        return f"exception:{probe.details.get('exception') or v.error.split(':', 1)[0]}" + (f"@{where}" if where else "")
    return f"{v.kind}:{v.name}[{','.join(structural(case)) or 'dense'}]"


def structural(case) -> list[str]:
    """The structural features of a case that change a kernel's code path."""
    feats = []
    if getattr(case, "cu_seqlens", None) is not None:
        feats.append("varlen")
    if getattr(case, "HQ", None) is not None and case.HQ != getattr(case, "H", case.HQ):
        feats.append("gqa")
    if getattr(case, "HV", None) not in (None, getattr(case, "H", None)):
        feats.append("grouped_values")
    if getattr(case, "initial_state", False):
        feats.append("initial_state")
    return feats


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _save_failing(ctx: Context, what: str, case, saved: Callable | None, index: int | None = None) -> str | None:
    """With --save-failing DIR: DIR/<check id>[.<index>].pt holds a failing example's inputs; returns the `verify
    compare` command that replays it, on the same kernel package (--kernel-root), device and --fp32-dot (None
    without the option or for a check without inputs)."""
    if not ctx.save_failing or saved is None:
        return None
    import torch
    tensors, compare_args = saved(case)
    path = Path(ctx.save_failing) / f"{what}{'' if index is None else f'.{index}'}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tensors, path)
    # the run's kernel package, device and interpreter fidelity too: without --kernel-root the command would
    # replay the example on the installed fla, not on the tree that failed
    return shlex.join(["verify", "compare", *compare_args, "--inputs", str(path), "--device", ctx.device,
                       "--fp32-dot", ctx.fp32_dot, *(["--kernel-root", ctx.kernel_root] if ctx.kernel_root else [])])
