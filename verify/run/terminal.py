"""Console reporting: one short line per check, the summary table, the expected-failure recap (one line per
finding), the checks that did not run, the failures with their repro commands, and the total wall time."""
from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from verify.registry import STATUSES, Check, Result
from verify.runner import TIME_LIMIT, Record, summary_counts
from verify.xfails import NOT_REPRODUCED

COLOURS = {"pass": "green", "fail": "red", "error": "red", "xfail": "yellow", "skip": "dim"}


def make_console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:     # logs and pipes: wide enough that tables keep check ids whole
        console.width = 200
    return console


def ratio(result: Result) -> float | None:
    """measured / budget, None without both numbers."""
    if result.measured is None or not result.budget:
        return None
    return result.measured / result.budget


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


class Progress:
    """Per-check lines as checks start (only when stdout is not a terminal: a hang in a CI log shows what
    hung) and end (in selection order)."""

    def __init__(self, console: Console, total: int, verbose: bool = False, debug: bool = False):
        self.console, self.total, self.verbose, self.debug = console, total, verbose, debug
        self.width = len(str(total))
        self.running: dict[int, str] = {}
        self.status = console.status("") if console.is_terminal else None   # a terminal: what runs now

    def start(self, i: int, check: Check) -> None:
        if self.status is None:
            self.console.print(f"\\[{i + 1:>{self.width}}/{self.total}] start {check.id}", highlight=False,
                               soft_wrap=True)
            return
        self.running[i] = check.id
        self.status.update(escape("running: " + ", ".join(self.running.values())))
        self.status.start()

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()

    def done(self, i: int, rec: Record) -> None:
        self.running.pop(i, None)
        res = rec.result
        st = res.status
        r = ratio(res)
        shown = "" if r is None else f"  ratio {r:.3g}" if math.isfinite(r) else f"  ratio {r}"
        kind = f" {res.kind}" if res.kind and st != "pass" else ""
        self.console.print(f"\\[{i + 1:>{self.width}}/{self.total}] [{COLOURS[st]}]{st:5}[/] {rec.id}{kind}{shown}  "
                           f"({rec.seconds:.1f}s)", highlight=False, soft_wrap=True)
        if self.verbose or st in ("fail", "error"):
            self.console.print(f"    {escape(res.message)}", highlight=False, soft_wrap=True)
        if st in ("fail", "error"):
            self.console.print(f"    reproduce: {rec.repro}", highlight=False, soft_wrap=True)
            if self.debug and "traceback" in res.details:
                self.console.print(res.details["traceback"], highlight=False, markup=False)


def print_summary(records: list[Record], console: Console, wall_seconds: float, interrupted: bool = False) -> None:
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
    _print_findings([r for r in records if r.result.status == "xfail"], console)
    for r in records:
        if r.result.status == "pass" and NOT_REPRODUCED in r.result.message:
            console.print(f"[yellow]expected failure not reproduced[/] {r.id} (check verify/expected_failures.toml)",
                          highlight=False)
    skipped = [r for r in records if r.result.kind in ("not_run", "interpreter_gap", "unsupported")]
    for kind in ("not_run", "interpreter_gap", "unsupported"):
        of_kind = [r for r in skipped if r.result.kind == kind]
        if of_kind:
            why = {"not_run": "interrupted" if interrupted else TIME_LIMIT.removeprefix("not run: "),
                   "interpreter_gap": "not verifiable on the CPU interpreter (they run on a GPU)",
                   "unsupported": "not applicable (a variant the kernel package or the device does not offer)"}[kind]
            console.print(f"[yellow]{len(of_kind)} check(s) skipped: {why}[/] (first: {of_kind[0].id}: "
                          f"{escape(of_kind[0].result.message)})", highlight=False, soft_wrap=True)
    for r in records:
        if r.result.status in ("fail", "error"):
            console.print(f"[red]{r.result.status.upper()}[/] {r.id}" + (f" ({r.result.kind})" if r.result.kind else "")
                          + f"\n    {escape(r.result.message)}\n    reproduce: {r.repro}", highlight=False, soft_wrap=True)
    console.print(f"{'interrupted after' if interrupted else 'total wall time'} {wall_seconds:.1f} s", highlight=False)


def _print_findings(xfailed: list[Record], console: Console) -> None:
    """One line per finding: an entry listing several ids, or entries stating the same cause, are one."""
    if not xfailed:
        return
    findings: dict[str, list[Record]] = {}
    for r in xfailed:
        findings.setdefault(r.result.details["expected_failure"]["cause"], []).append(r)
    console.print(f"[yellow]{len(xfailed)} expected failure(s), {len(findings)} finding(s) "
                  "(listed in verify/expected_failures.toml):")
    for cause, recs in findings.items():
        what = recs[0].id if len(recs) == 1 else f"{recs[0].id} and {len(recs) - 1} more"
        console.print(f"  {what}: {escape(cause)}", highlight=False, soft_wrap=True)


def print_repeat_summary(runs: dict[int, list[Record]], console: Console) -> None:
    """After --repeat: per check that did not always pass, in how many runs it failed, errored or failed
    as expected, and its worst such run; a check whose outcome differs between seeds is marked flaky."""
    by_id: dict[str, list[Record]] = {}
    for records in runs.values():
        for r in records:
            by_id.setdefault(r.id, []).append(r)
    header = f"{len(runs)} runs, seeds {min(runs)}..{max(runs)}"
    lines = []
    for cid, seen in by_id.items():
        statuses = [r.result.status for r in seen]
        if set(statuses) <= {"pass", "skip"}:
            continue
        bad = max((r for r in seen if r.result.status not in ("pass", "skip")),
                  key=lambda r: math.inf if ratio(r.result) is None else ratio(r.result))
        counts = ", ".join(f"{st} {statuses.count(st)}/{len(seen)}" for st in ("fail", "error", "xfail")
                           if st in statuses)
        lines.append(f"  {cid}: {counts}{' FLAKY' if len(set(statuses)) > 1 else ''}; worst: seed {bad.seed} "
                     f"{bad.result.status} {_fmt(bad.result.measured)} / {_fmt(bad.result.budget)}")
    if not lines:
        console.print(f"{header}: every check passed in every run")
        return
    console.print(f"{header}: {len(lines)} check(s) did not always pass (measured / budget)")
    for line in lines:
        console.print(escape(line), highlight=False, soft_wrap=True)
