"""`verify localize` as library code: run a multi-stage kernel once on one example and judge every intermediate
against the float64 reference intermediate of the same definition (each stage like a kernel output,
pathmdn_verify.core.budget, within c times the working-precision error of the same stage); the first that leaves
its budget is the first divergence.  `stages` runs in a worker of a Session (a kernel that crashes costs only the
task, a runner.Lost), so the command that asked survives it.
"""
from __future__ import annotations

import math

from pathmdn_verify.core.errors import KernelUnavailable, UsageError


def localize(op, pass_: str, dtype: str, x: dict, fp32_dot: str) -> list[dict]:
    """One row per judged tensor, in stage order: stage, source, tensor, measured, budget, ratio, verdict."""
    stages = op.stages[pass_](op, x, dtype, fp32_dot)
    return [{"stage": st.name, "source": st.source, "tensor": v.name, "measured": v.measured, "budget": v.budget,
             "ratio": v.ratio, "decided_by": v.decided_by, "verdict": "within" if v.ratio <= 1 else "DIVERGES"}
            for st in stages for v in st.verdicts(op.budget_factor)]


def first_divergence(rows: list[dict]) -> dict | None:
    return next((r for r in rows if r["verdict"] != "within"), None)


def stages(check_id: str, ctx, inputs: str | None, staged: bool, debug: bool, folder: str) -> dict:
    """A worker's task: the example (the saved `inputs`, else the one the check's own seeded search reports), and
    with `staged` every stage's row: {label, shape, example (saved in `folder`, for the sanitizer), rows, error, lost}.
    An interpreter gap is a UsageError (the check skips it)."""
    import os

    from pathmdn_verify import ops
    from pathmdn_verify.core import examples as example
    from pathmdn_verify.core.errors import innermost_error, is_device_fatal, is_interpreter_gap
    from pathmdn_verify.core.ids import CheckId
    from pathmdn_verify.core.registry import DEVICE_LOST, REGISTRY
    from pathmdn_verify.platform.setup import prepare
    cid = CheckId.parse(check_id)
    op = ops.record(cid)
    x = example.load(inputs, op, cid.dtype, "cpu") if inputs else None
    prepare(ctx)
    out = {"label": inputs, "lost": False, "rows": [], "error": None}
    if not inputs:       # the check's own search, seeded: the example it reports
        result = REGISTRY[check_id].run(ctx)
        out["label"] = example.reported(result)
        if out["label"] is None:
            raise UsageError(f"{check_id} at seed {ctx.seed} reported no example ({result.status}: {result.message})")
        x, out["lost"] = example.from_label(op, cid.dtype, out["label"]), bool(result.details.get(DEVICE_LOST))
    out["shape"] = example.shape(x)
    out["example"] = os.path.join(folder, "example.pt")
    example.save(x, out["example"])
    if staged and not out["lost"]:
        try:
            out["rows"] = localize(op, cid.pass_, cid.dtype, {n: None if t is None else t.to(ctx.device)
                                                              for n, t in x.items()}, ctx.fp32_dot)
        except (UsageError, KernelUnavailable):
            raise
        except Exception as exc:        # the kernel raised on valid input: a failure, localized to no stage
            if debug:
                raise
            if is_interpreter_gap(exc):     # the CPU interpreter's missing support, as the check skips it
                raise UsageError(f"{check_id}: not verifiable on the CPU interpreter: {innermost_error(exc)}") from exc
            out["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            out["fatal"] = is_device_fatal(exc)
    out["rows"] = [{k: _num(v) if isinstance(v, float) else v for k, v in r.items()} for r in out["rows"]]
    return out


def _num(x: float):
    return x if math.isfinite(x) else str(x)
