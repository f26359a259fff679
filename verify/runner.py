"""Run selected checks with live progress, apply the expected-failure list, and write JSON / JUnit."""
from __future__ import annotations

import json
import math
import os
import shlex
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from verify import environment
from verify.errors import UsageError
from verify.registry import DEVICE_LOST, STATUSES, Check, Context, Result
from verify import xfails as xfail_list
from verify.xfails import NOT_REPRODUCED
TIME_LIMIT = "not run: --time-limit reached"
COLOURS = {"pass": "green", "fail": "red", "error": "red", "xfail": "yellow", "skip": "dim"}


@dataclass
class Record:
    id: str
    description: str
    result: Result
    seconds: float
    repro: str

    def as_json(self) -> dict:
        def num(x):
            return None if x is None else (x if math.isfinite(x) else str(x))
        return {"id": self.id, "status": self.result.status, "measured": num(self.result.measured),
                "budget": num(self.result.budget), "message": self.result.message,
                "repro": self.repro, "seconds": round(self.seconds, 3), "details": self.result.details}


def repro_command(check_id: str, ctx: Context) -> str:
    parts = ["verify", "all", "--id", check_id, "--seed", str(ctx.seed), "--profile", ctx.profile,
             "--device", ctx.device]
    if ctx.fp32_dot != "tf32":
        parts += ["--fp32-dot", ctx.fp32_dot]
    if ctx.examples:
        parts += ["--examples", str(ctx.examples)]
    if ctx.kernel_root:
        parts += ["--kernel-root", ctx.kernel_root]
    return shlex.join(parts)


def run_one(check: Check, ctx: Context, scope: xfail_list.Scope, debug: bool = False) -> Record:
    t0 = time.perf_counter()
    if ctx.device not in check.devices:
        result = Result("skip", message=f"not applicable on device {ctx.device}")
    else:
        try:
            result = check.run(ctx)
            if not isinstance(result, Result):
                raise TypeError(f"check returned {type(result).__name__}, not Result")
        except UsageError:
            raise
        except Exception as exc:  # a crashing check is an error, never a pass
            tb = traceback.format_exc() if debug else traceback.format_exc(limit=-3)
            result = Result("error", message=f"{type(exc).__name__}: {exc}", details={"traceback": tb})
    result = xfail_list.judge(check.id, result, scope)
    return Record(check.id, check.description, result, time.perf_counter() - t0, repro_command(check.id, ctx))


def run_checks(checks: list[Check], ctx: Context, console: Console, debug: bool = False,
               deadline: float | None = None) -> list[Record]:
    """Run each check in turn; after `deadline` (time.monotonic()) the rest are recorded as skipped."""
    scope = xfail_list.current_scope(ctx.device, ctx.profile)
    console.print(xfail_list.describe(scope), highlight=False, soft_wrap=True)
    records = []
    width = len(str(len(checks)))
    lost_in = None      # the check after which the CUDA context is unusable
    for n, chk in enumerate(checks, 1):
        not_run = (Result("skip", message=TIME_LIMIT) if deadline is not None and time.monotonic() > deadline
                   else Result("error", message=f"not run: the CUDA context was lost to a fatal error in {lost_in}; "
                                                "run this check with --id") if lost_in is not None
                   else None)
        if not_run is not None:
            records.append(Record(chk.id, chk.description, not_run, 0.0, repro_command(chk.id, ctx)))
            continue
        if console.is_terminal:
            with console.status(escape(f"[{n}/{len(checks)}] {chk.id}")):
                rec = run_one(chk, ctx, scope, debug)
        else:
            rec = run_one(chk, ctx, scope, debug)
        records.append(rec)
        if rec.result.details.get(DEVICE_LOST):
            lost_in = rec.id
        st = rec.result.status
        console.print(f"\\[{n:>{width}}/{len(checks)}] [{COLOURS[st]}]{st:5}[/] {rec.id}  "
                      f"{escape(rec.result.message)}  ({rec.seconds:.1f}s)", highlight=False, soft_wrap=True)
        if st in ("fail", "error"):
            console.print(f"    reproduce: {rec.repro}", highlight=False, soft_wrap=True)
            if debug and "traceback" in rec.result.details:
                console.print(rec.result.details["traceback"], highlight=False, markup=False)
    return records


def status_counts(statuses) -> dict[str, int]:
    """How many of each status (every status present, zero or not)."""
    statuses = list(statuses)
    return {s: statuses.count(s) for s in STATUSES}


def summary_counts(records: list[Record]) -> dict[str, int]:
    return status_counts(r.result.status for r in records)


def print_summary(records: list[Record], console: Console) -> None:
    families: dict[str, dict[str, int]] = {}
    for r in records:
        fam = ".".join(r.id.split(".")[:2])
        families.setdefault(fam, {s: 0 for s in STATUSES})[r.result.status] += 1
    table = Table(title="verify summary")
    table.add_column("family")
    for s in STATUSES:
        table.add_column(s, justify="right")
    for fam, c in families.items():
        table.add_row(fam, *(str(c[s]) for s in STATUSES))
    total = summary_counts(records)
    table.add_row("[bold]total", *(f"[bold]{total[s]}" for s in STATUSES))
    console.print(table)
    xf = [r for r in records if r.result.status == "xfail"]
    if xf:
        console.print(f"[yellow]{len(xf)} expected failure(s) (listed in verify/expected_failures.toml):")
        for r in xf:
            console.print(f"  {r.id}: {escape(r.result.message)}", highlight=False, soft_wrap=True)
    stale = [r for r in records if r.result.status == "pass" and NOT_REPRODUCED in r.result.message]
    for r in stale:
        console.print(f"[yellow]expected failure not reproduced[/] {r.id} (check verify/expected_failures.toml)",
                      highlight=False)
    not_run = [r for r in records if r.result.message == TIME_LIMIT]
    if not_run:
        console.print(f"[yellow]{len(not_run)} check(s) not run: --time-limit reached[/] "
                      f"(first: {not_run[0].id}); run them with --id or -k", highlight=False, soft_wrap=True)
    bad = [r for r in records if r.result.status in ("fail", "error")]
    for r in bad:
        console.print(f"[red]{r.result.status.upper()}[/] {r.id}\n    {escape(r.result.message)}\n    reproduce: {r.repro}",
                      highlight=False, soft_wrap=True)


def print_repeat_summary(runs: dict[int, list[Record]], console: Console) -> None:
    """After --repeat: per check that did not always pass, in how many runs it failed, errored or failed
    as expected, and its worst such run; a check whose outcome differs between seeds is marked flaky."""
    by_id: dict[str, list[tuple[int, Record]]] = {}
    for seed, records in runs.items():
        for r in records:
            by_id.setdefault(r.id, []).append((seed, r))
    header = f"{len(runs)} runs, seeds {min(runs)}..{max(runs)}"
    lines = []
    for cid, seen in by_id.items():
        statuses = [r.result.status for _, r in seen]
        if set(statuses) <= {"pass", "skip"}:
            continue
        seed_, bad = max(((s, r) for s, r in seen if r.result.status not in ("pass", "skip")),
                         key=lambda sr: _ratio(sr[1].result))
        counts = ", ".join(f"{st} {statuses.count(st)}/{len(seen)}" for st in ("fail", "error", "xfail")
                           if st in statuses)
        lines.append(f"  {cid}: {counts}{' FLAKY' if len(set(statuses)) > 1 else ''}; worst: seed {seed_} "
                     f"{bad.result.status} {_fmt(bad.result.measured)} / {_fmt(bad.result.budget)}")
    if not lines:
        console.print(f"{header}: every check passed in every run")
        return
    console.print(f"{header}: {len(lines)} check(s) did not always pass (measured / budget)")
    for line in lines:
        console.print(escape(line), highlight=False, soft_wrap=True)


def _ratio(result: Result) -> float:
    """measured / budget for ordering runs; a result without both numbers (an error) sorts first."""
    if result.measured is None or not result.budget:
        return math.inf
    return result.measured / result.budget


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def check_writable(path: str | None, flag: str) -> None:
    """Fail before any work when an output path cannot be written."""
    if path is None:
        return
    if Path(path).is_dir():
        raise UsageError(f"{flag} {path}: is a directory")
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (Path(path).exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable")


def write_text_atomic(path: str, text: str) -> None:
    """Write through a temporary file, so that a reader never sees a partial result."""
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_json(path: str, records: list[Record], ctx: Context, seeds: list[int] | None = None) -> None:
    """seeds: every seed of a --repeat run (the records of all runs, each with its own repro line)."""
    doc = {"environment": {**environment.versions(), **environment.describe(ctx.device),
                           "profile": ctx.profile, "seed": ctx.seed, "fp32_dot": ctx.fp32_dot,
                           "kernel_root": ctx.kernel_root, "interpreter_fidelity": _fidelity_parts(),
                           "expected_failures": xfail_list.scope_json(ctx.device, ctx.profile),
                           **({"seeds": seeds} if seeds else {})},
           "checks": [r.as_json() for r in records],
           "summary": summary_counts(records)}
    write_text_atomic(path, json.dumps(doc, indent=2))


def _fidelity_parts():
    """The interpreter fidelity patches in force (None when kernels ran natively or none ran)."""
    if "verify.fidelity" not in sys.modules:
        return None
    return sys.modules["verify.fidelity"].active_parts()


def write_junit(path: str, records: list[Record]) -> None:
    counts = summary_counts(records)
    suite = ET.Element("testsuite", name="verify", tests=str(len(records)),
                       failures=str(counts["fail"]), errors=str(counts["error"]),
                       skipped=str(counts["skip"] + counts["xfail"]))
    for r in records:
        case = ET.SubElement(suite, "testcase", classname=r.id.rsplit(".", 1)[0], name=r.id,
                             time=f"{r.seconds:.3f}")
        st = r.result.status
        if st in ("fail", "error"):
            el = ET.SubElement(case, "failure" if st == "fail" else "error", message=r.result.message)
            el.text = f"reproduce: {r.repro}"
        elif st in ("skip", "xfail"):
            ET.SubElement(case, "skipped", message=f"{st}: {r.result.message}")
    tmp = Path(str(path) + ".tmp")
    ET.ElementTree(suite).write(tmp, encoding="utf-8", xml_declaration=True)
    tmp.replace(path)
