"""mutant.<name>: each planted bug of an op record (pathmdn_verify.ops, field `mutants`) must turn at least one of its
killer checks red.  pathmdn_verify.checks.kernel_checks.declare declares an op's mutants with its other checks.

The check copies the kernel package with the mutant's patch into a temporary directory and runs the
mutant's killer checks against it as a kernel root, in fresh worker processes (pathmdn_verify.run.runner.run_ids),
at the run's profile, seed, device and options.  A killer must be green on the unmodified kernels (pass, or xfail: a listed check that only the
expected-failure ratchet turns red when it fails worse), or a red killer proves nothing: that is
measured once per run for all killers (shared by the run's workers through the run directory, $VERIFY_RUN_DIR),
and a killer that is not green makes the check an error.  A mutant's own killers run in one
worker, in the registry's order, and none starts after the first that kills it (as under --exitfirst): the
run's workers already keep the cores busy, and each extra worker costs an fla import.
`verify all` skips this family unless it is named (pathmdn_verify.commands.checks.OPT_IN); `verify mutants` runs it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from pathmdn_verify import layers, ops
from pathmdn_verify.platform.mutation import Mutant, materialize
from pathmdn_verify.core.registry import RUN_DIR_ENV, Context, Result, register
from pathmdn_verify.core.results import outcome_json
from pathmdn_verify.run import runner

_CLEAN: dict[tuple, dict[str, dict]] = {}   # run settings -> killer id -> its JSON record on the unmodified kernels


def every() -> dict:
    """name -> Mutant: the op records' and the layer records' planted bugs."""
    return {**ops.mutants(), **layers.mutants()}


def _run(ctx: Context, ids: tuple[str, ...], workers: int, exitfirst: bool = False) -> dict[str, dict]:
    """id -> JSON record of the checks ids on ctx's kernel package (as `verify all --json` writes them)."""
    return {r.id: outcome_json(r) for r in runner.run_ids(ids, ctx, workers, exitfirst)}


def _clean(ctx: Context) -> dict[str, dict]:
    """Every killer's record on the unmodified kernels (ctx.kernel_root, or the installed package)."""
    key = (ctx.kernel_root, ctx.profile, ctx.seed, ctx.device, ctx.fp32_dot, ctx.examples, ctx.configs,
           ctx.references)
    if key not in _CLEAN:
        ids = tuple(sorted({i for m in every().values() for i in m.killers}))
        workers = runner.worker_count("auto", ctx.device)
        _CLEAN[key] = _once_per_run(repr(key), lambda: _run(ctx, ids, workers))
    return _CLEAN[key]


def _once_per_run(key: str, compute) -> dict:
    """compute() once across the run's worker processes: the first to take the lock computes and writes the
    result into the run directory, the others wait for it and read it (no directory, outside a worker: compute
    here)."""
    where = os.environ.get(RUN_DIR_ENV)
    if not where:
        return compute()
    path = Path(where) / f"{hashlib.sha1(key.encode()).hexdigest()}.json"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            path.write_text(json.dumps(compute()))
        return json.loads(path.read_text())


def _num(x) -> float | None:
    return None if x is None else float(x)     # JSON writes non-finite numbers as strings


def _summary(c: dict) -> str:
    return f"{c['id']} {c['status']} ({_num(c['measured']):.3g} vs budget {_num(c['budget']):.3g})" \
        if c["measured"] is not None and c["budget"] is not None else f"{c['id']} {c['status']}"


def check_mutant(mutant: Mutant, ctx: Context) -> Result:
    clean = _clean(ctx)
    if all(clean[i]["status"] == "skip" for i in mutant.killers):     # none of them can run here
        c = clean[mutant.killers[0]]
        kind = c.get("kind") or ("interpreter_gap" if "interpreter" in c["message"] else "unsupported")
        return Result("skip", message="no killer runs here: " + "; ".join(
            f"{clean[i]['id']}: {clean[i]['message']}" for i in mutant.killers), kind=kind)
    not_green = [clean[i] for i in mutant.killers if clean[i]["status"] not in ("pass", "xfail")]  # xfail: ratchet
    if not_green:
        return Result("error", message="killer not green on the unmodified kernels, so it proves nothing: "
                      + "; ".join(_summary(c) for c in not_green))
    with tempfile.TemporaryDirectory(prefix=f"mutant_{mutant.name}_") as tmp:
        # one worker, the killers in the registry's order, none started after the first that kills (or errs)
        tree = replace(ctx, kernel_root=str(materialize(mutant, Path(tmp))))
        seen = _run(tree, mutant.killers, 1, exitfirst=True)
        seen = {i: c for i, c in seen.items() if c.get("kind") != "not_run"}
    details = {"change": mutant.description, "killers": {i: c["status"] for i, c in seen.items()}}
    killed = [c for c in seen.values() if c["status"] == "fail"]
    if killed:
        c = killed[0]
        return Result("pass", _num(c["measured"]), _num(c["budget"]), f"killed by {_summary(c)}",
                      {**details, "killed_by": c["id"]})
    errored = [c for c in seen.values() if c["status"] == "error"]
    if errored:
        return Result("error", message="killer errored on the mutant: " + "; ".join(
            f"{c['id']}: {c['message']}" for c in errored), details=details)
    return Result("fail", message=f"SURVIVED ({mutant.description}): " + "; ".join(_summary(c) for c in seen.values()),
                  details=details)


def table(records) -> Table:
    """The `verify mutants` table: mutant, what it changes, which check killed it, measured vs budget."""
    t = Table(title="mutation self-test")
    for col in ("mutant", "what it changes", "killed by", "measured vs budget"):
        t.add_column(col)
    for r in records:
        res = r.result
        killer = res.details.get("killed_by", {"fail": "SURVIVED", "error": "ERROR"}.get(res.status, res.status))
        numbers = f"{res.measured:.3g} vs {res.budget:.3g}" if res.measured is not None and res.budget is not None else ""
        t.add_row(r.id.removeprefix("mutant."), escape(every()[r.id.removeprefix("mutant.")].description),
                  escape(killer), numbers)
    return t


def declare(mutant: Mutant) -> None:
    register(f"mutant.{mutant.name}", f"planted bug is caught: {mutant.description}",
             lambda ctx: check_mutant(mutant, ctx))
