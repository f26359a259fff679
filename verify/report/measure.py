"""Measure one point: the kernel against the float64 oracle and the same-dtype implementation, by the checks' own
functions (pathmdn_verify.core.engine.measure, the budget rule of pathmdn_verify.core.budget, the ops of pathmdn_verify.commands.compare), plus
the a-priori bounds; and measure a list of points in a run's workers (pathmdn_verify.run.session.Session.map: a
point whose worker crashes or hangs costs only that point).

A point's measurement is plain data (floats may be non-finite; pathmdn_verify.report.document writes them as strict
JSON).
"""
from __future__ import annotations

import math
import random
import sys
import time

import torch

from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.ops import state_tracking as ST
from pathmdn_verify.core import engine
from pathmdn_verify.core.errors import UsageError, VariantUnsupported, is_interpreter_gap
from pathmdn_verify.core.inputs import as_oracle
from pathmdn_verify.core.metrics import max_abs, rel_err
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.registry import Context
from pathmdn_verify.report import bounds
from pathmdn_verify.report.sweeps import Point, axis_value, inputs, measured
from pathmdn_verify.platform import setup
from pathmdn_verify.run.runner import Lost
from pathmdn_verify.run.session import RunOptions, Session


def measure(point: Point, device: str, fp32_dot: str) -> dict:
    """One point's measurement: {id, plot, op, pass, dtype, x, status, kind, tensors, bound, seconds, ...}."""
    setup.prepare(Context(device=device, fp32_dot=fp32_dot))
    t0 = time.perf_counter()
    out = described(point)
    try:
        out.update(_state(point, device, fp32_dot) if point.plot == "state" else _errors(point, device, fp32_dot))
    except UsageError:
        raise
    except VariantUnsupported as exc:
        out.update(status="skip", kind="unsupported", message=str(exc))
    except Exception as exc:     # a kernel that raises on valid input is a measured outcome, not a crash
        kind = "interpreter_gap" if is_interpreter_gap(exc) else "exception"
        out.update(status="skip" if kind == "interpreter_gap" else "fail", kind=kind,
                   message=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
    out.setdefault("x", point.x)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def described(point: Point) -> dict:
    """What a measurement says of its point before measuring: id, plot, op, pass, dtype, nominal x, case."""
    knob = f" {point.knob[0]}={point.knob[1]:g}" if point.knob else ""
    return {"id": point.id, "plot": point.plot, "op": point.op, "pass": point.pass_, "dtype": point.dtype,
            "nominal": point.x, "case": point.case.label() + knob}


def lost(point: Point, what: Lost) -> dict:
    """The measurement of a point whose worker was lost (kind crashed or timeout): a failure, no numbers."""
    return {**described(point), "status": "fail", "kind": what.kind, "message": what.message, "x": point.x,
            "seconds": round(what.seconds, 3)}


def _errors(point: Point, device: str, fp32_dot: str) -> dict:
    op = measured()[point.op]
    prec = op.precision(point.dtype, fp32_dot)
    x = inputs(point, prec.torch_dtype, device)
    if op.family != "form":      # the op record's own inputs (FoX takes no w, beta)
        x = {n: t for n, t in x.items() if n in op.record.required + op.record.optional}
    x64 = as_oracle(x)
    gate_scaled = op.record.conventions.gate_scaled if op.family in ("path", "fox") else None
    b = bounds.point_bounds(op.family, x64, prec, op.chunk, gate_scaled)
    out = {"bound": {k: b[k] for k in ("deterministic", "probabilistic", "vacuous")}, "magnitudes": b["magnitudes"]}
    if op.family == "form":
        with torch.no_grad():
            oracle = MDN.recurrence(**x64)
            got = MDN.chunk_forward(**x, chunk=op.chunk, form=op.name)
        out["tensors"] = [{"name": n, "err_rel": rel_err(g, o), "err_abs": max_abs(g, o)}
                          for n, g, o in zip(("o", "S_T", "M_T"), got, oracle)]
        out["status"] = "measured"     # a reference form is not judged; its non-finite output is named
        out["kind"] = None if all(math.isfinite(t["err_rel"]) for t in out["tensors"]) else "non_finite"
    else:
        verdicts = engine.measure(op.record, point.pass_, x, prec, point.case.seed)
        out["tensors"] = [{"name": v.name, "err_rel": v.err_rel, "err_abs": v.err_abs,
                           "same_dtype_rel": v.same_dtype_rel, "budget_rel": v.budget_rel, "ratio": v.ratio,
                           "decided_by": v.decided_by} for v in verdicts]
        worst = max(v.ratio for v in verdicts)
        out["status"] = "pass" if worst <= 1 else "fail"
        out["kind"] = None if worst <= 1 else ("non_finite" if math.isinf(worst) else "over_budget")
    out["x"] = out["magnitudes"]["condition"] if point.plot == "align" else axis_value(point, x)
    if point.plot == "align":
        out["magnitudes"]["alignment"] = bounds.alignment(x["w"])
    return out


def _state(point: Point, device: str, fp32_dot: str) -> dict:
    """Theorem 2.1's construction (verify/checks/state_tracking.py): the fraction of sequences that the kernel,
    the same-dtype implementation and the float64 oracle decide correctly at n = point.x (the point's op: a
    PaTH-family record; the construction has no gate, so its gate convention does not enter)."""
    op = measured()[point.op].record
    n = int(point.x)
    prec = Precision.of(point.dtype, fp32_dot)
    rng = random.Random(point.case.seed * 7919 + n)
    sequences = int(point.knob[1])
    correct = {"kernel": 0, "same_dtype": 0, "oracle": 0}
    for s in range(sequences):
        identity = s % 2 == 0
        x = ST.construction(ST.swap_sequence(n, identity, rng), prec.torch_dtype, device)
        x = op.adapt_inputs(x) if op.adapt_inputs else x
        x64 = {name: t.double() for name, t in x.items()}
        outs = {"oracle": op.oracle(**x64, scale=1.0),
                "same_dtype": op.same_dtype(**{k: t.float() for k, t in x.items()}, g=None, cu_seqlens=None,
                                            prec=prec, scale=1.0),
                "kernel": engine.call_kernel(op.kernel, **x, scale=1.0)}
        for who, o in outs.items():
            a0 = float(o[0, -1, 0, 0])
            correct[who] += math.isfinite(a0) and ST.decides_identity(a0, n) == identity
    frac = {who: c / sequences for who, c in correct.items()}
    return {"status": "pass" if frac["kernel"] == 1 else "fail", "kind": None if frac["kernel"] == 1 else "over_budget",
            "sequences": sequences, "fraction": frac, "x": float(n)}


def autotune_configs() -> dict:
    """The config each autotuned fla kernel loaded in this process chose (Autotuner.best_config), by name."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return {}
    out = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("fla.ops.") or mod is None:
            continue
        for attr, obj in vars(mod).items():
            fn = obj
            while fn is not None and not isinstance(fn, Autotuner):
                fn = getattr(fn, "fn", None)
            if fn is not None and getattr(fn, "best_config", None) is not None:
                out[f"{name}.{attr}"] = str(fn.best_config)
    return out


def process_facts() -> dict:
    """What the measuring process ran under: the interpreter fidelity parts (None natively) and the autotune
    configs chosen."""
    from pathmdn_verify.platform import fidelity
    return {"interpreter_fidelity": fidelity.active_parts(), "autotune_configs": autotune_configs()}


def measure_in_worker(point: Point, device: str, fp32_dot: str) -> tuple[dict, dict]:
    """A worker's task: the point's measurement and the worker's process facts."""
    return measure(point, device, fp32_dot), process_facts()


def run_points(points: list[Point], device: str, fp32_dot: str, workers: int, progress,
               profile: str = "ci") -> tuple[list[dict], dict]:
    """Every point's measurement (in the order of `points`) in `workers` worker processes of the runner, and
    the facts of those processes (the kernel package they loaded, fidelity parts, autotune configs).  A point
    whose worker dies or runs past the profile's check timeout (runner.CHECK_TIMEOUT) is a failure of kind
    crashed or timeout, and the other points go on in a fresh worker.  progress(point, finished) is called as
    a point starts and as it finishes."""
    facts = {"kernel_package": None, "interpreter_fidelity": None, "autotune_configs": {}}

    def done(i: int, value) -> None:
        if not isinstance(value, Lost):
            seen = value[1]
            facts["interpreter_fidelity"] = seen["interpreter_fidelity"] or facts["interpreter_fidelity"]
            facts["autotune_configs"].update(seen["autotune_configs"])
        progress(points[i], True)
    session = Session(RunOptions(prefixes=(), device=device, profile=profile, fp32_dot=fp32_dot, workers=str(workers)))
    values = session.map([(measure_in_worker, (pt, device, fp32_dot)) for pt in points],
                         lambda i: progress(points[i], False), done, facts)
    return [lost(pt, v) if isinstance(v, Lost) else v[0] for pt, v in zip(points, values)], facts
