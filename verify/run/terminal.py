"""Console reporting: one short line per check, the summary table, the expected-failure recap (one line per
finding), the checks that did not run, the failures with their repro commands, and the total wall time."""
from __future__ import annotations

import math
import os
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import STATUSES, Check, Result
from pathmdn_verify.core.results import Outcome, summary_counts
from pathmdn_verify.core.results import run_compilations
from pathmdn_verify.run.xfail_list import NOT_REPRODUCED

COLOURS = {"pass": "green", "fail": "red", "error": "red", "xfail": "yellow", "skip": "dim"}


class _Stdout:
    """The console's stdout.  Once its reader has gone (BrokenPipeError: `verify all | head`), what is written after
    goes to /dev/null, and on_gone() is called once (a run stops as if interrupted, and what finished is kept)."""

    def __init__(self, on_gone):
        self.stream, self.on_gone, self.gone = sys.stdout, on_gone, False

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._lost()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._lost()

    def _lost(self) -> None:
        discard_stdout(self.stream)
        if not self.gone:
            self.gone = True
            self.on_gone()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def discard_stdout(stream=None) -> None:
    """Point stdout's file descriptor at /dev/null once its reader has gone: what is still buffered, and Python's
    flush at exit, would raise BrokenPipeError again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, (stream or sys.stdout).fileno())
    os.close(devnull)


def make_console(on_gone=None) -> Console:
    """A console on stdout; on_gone() is called once when the reader of stdout has gone (it may raise)."""
    console = Console(highlight=False, file=_Stdout(on_gone) if on_gone else None)
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


MAX_STATUS = 120     # columns of the live status line at most
STATUS_MARGIN = 3    # the spinner and its space


def status_line(running: list[str], width: int) -> str:
    """ "running: a, b, c" within width columns: as many ids as fit, then "(+N more)"; one id longer than the
    line is cut with "..." at its end."""
    width = max(width, 20)
    head = f"running {len(running)}: " if len(running) > 1 else "running: "
    for n in range(len(running), 0, -1):
        more = f" (+{len(running) - n} more)" if n < len(running) else ""
        line = head + ", ".join(running[:n]) + more
        if len(line) <= width:
            return line
    more = f" (+{len(running) - 1} more)" if len(running) > 1 else ""
    room = width - len(head) - len(more)
    return head + running[0][:max(room - 3, 0)] + "..." + more


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
        self._show()
        self.status.start()

    def _show(self) -> None:
        """The live line: the checks running now (never finished ones), cut to the terminal's width (at most
        MAX_STATUS columns, less the spinner's)."""
        if not self.running:
            self.status.update("")
            return
        self.status.update(escape(status_line(list(self.running.values()),
                                              min(self.console.width, MAX_STATUS) - STATUS_MARGIN)))

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()

    def done(self, i: int, outcome: Outcome) -> None:
        if self.running.pop(i, None) is not None and self.status is not None:
            self._show()
        res = outcome.result
        st = res.status
        r = ratio(res)
        shown = "" if r is None else f"  ratio {r:.3g}" if math.isfinite(r) else f"  ratio {r}"
        kind = f" {res.kind}" if res.kind and st != "pass" else ""
        took = f"cached from {c['run']}" if (c := res.details.get("cached")) else f"{outcome.seconds:.1f}s"
        self.console.print(f"\\[{i + 1:>{self.width}}/{self.total}] [{COLOURS[st]}]{st:5}[/] {outcome.id}{kind}"
                           f"{shown}  ({took})", highlight=False, soft_wrap=True)
        if self.verbose or st in ("fail", "error"):
            self.console.print(f"    {escape(res.message)}", highlight=False, soft_wrap=True)
        if st in ("fail", "error"):
            self.console.print(f"    reproduce: {outcome.repro}", highlight=False, soft_wrap=True)
            if self.debug and "traceback" in res.details:
                self.console.print(res.details["traceback"], highlight=False, markup=False)


def print_summary(outcomes: list[Outcome], console: Console, wall_seconds: float, interrupted: bool = False,
                  estimated: int | None = None) -> None:
    """The summary table, the skips, failures and Triton compilations (estimated: the compile estimate's count)."""
    families: dict[str, dict[str, int]] = {}
    for r in outcomes:
        fam = CheckId.parse(r.id).section
        families.setdefault(fam, {s: 0 for s in STATUSES})[r.result.status] += 1
    table = Table(title="verify summary")
    table.add_column("family")
    for s in STATUSES:
        table.add_column(s, justify="right")
    for fam, c in families.items():
        table.add_row(fam, *(str(c[s]) for s in STATUSES))
    total = summary_counts(outcomes)
    table.add_row("[bold]total", *(f"[bold]{total[s]}" for s in STATUSES))
    console.print(table)
    _print_findings([r for r in outcomes if r.result.status == "xfail"], console)
    _print_not_reproduced(outcomes, console)
    skipped = [r for r in outcomes if r.result.kind in ("not_run", "interpreter_gap", "unsupported", "incompatible")]
    whys = {"interpreter_gap": "not verifiable on the CPU interpreter (they run on a GPU)",
            "incompatible": "the kernel package's code was written for another Triton than the installed one",
            "unsupported": "not applicable (a variant the kernel package or the device does not offer)"}
    groups: dict[str, list] = {}       # why -> outcomes, in order; a not-run check says why in its message
    for r in skipped:
        why = whys.get(r.result.kind) or ("interrupted" if interrupted else r.result.message.removeprefix("not run: "))
        groups.setdefault(why, []).append(r)
    for why, of_kind in groups.items():
        console.print(f"[yellow]{len(of_kind)} check(s) skipped: {why}[/] (first: {of_kind[0].id}: "
                      f"{escape(_without_id(of_kind[0]))})", highlight=False, soft_wrap=True)
    for r in outcomes:
        if r.result.status in ("fail", "error"):
            console.print(f"[red]{r.result.status.upper()}[/] {r.id}" + (f" ({r.result.kind})" if r.result.kind else "")
                          + f"\n    {escape(r.result.message)}\n    reproduce: {r.repro}", highlight=False, soft_wrap=True)
    comp = run_compilations([r.result.details for r in outcomes])
    if comp["compiled"] or comp["cache_loads"] or estimated is not None:
        console.print(f"Triton compilations: {comp['compiled']} ({comp['duplicates']} duplicate(s) of a key compiled "
                      f"earlier in this run), {comp['cache_loads']} loaded from its disk cache, "
                      f"{comp['compile_seconds']:.1f} worker-s compiling and loading"
                      + (f"; {estimated} estimated before the run" if estimated is not None else ""), highlight=False)
    cached = sum("cached" in r.result.details for r in outcomes)
    if cached:
        console.print(f"{cached} of {len(outcomes)} verdicts reused from the verdict cache (their checks and everything "
                      "they read unchanged; --no-cache runs them)", highlight=False)
    console.print(f"{'interrupted after' if interrupted else 'total wall time'} {wall_seconds:.1f} s", highlight=False)


def _without_id(outcome: Outcome) -> str:
    """The outcome's message without a leading "<its id>: " (the line that prints it names the check)."""
    return outcome.result.message.removeprefix(f"{outcome.id}: ")


def _print_not_reproduced(outcomes: list[Outcome], console: Console) -> None:
    """One line for the listed checks that passed where their entry says the defect reproduces (a fix, or a
    list to update); a listed pass elsewhere in the entry's scope is no news and is only in its message."""
    ids = list(dict.fromkeys(r.id for r in outcomes if r.result.status == "pass"
                             and (r.result.details.get("expected_failure") or {}).get("expected_here")
                             and NOT_REPRODUCED in r.result.message))
    if ids:
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        console.print(f"[yellow]{len(ids)} expected failure(s) not reproduced[/] where the list outcomes them failing: "
                      f"{shown} (fixed? update verify/run/expected_failures.toml)", highlight=False, soft_wrap=True)


def _print_findings(xfailed: list[Outcome], console: Console) -> None:
    """One line per finding: an entry listing several ids, or entries stating the same cause, are one."""
    if not xfailed:
        return
    findings: dict[str, list[Outcome]] = {}
    for r in xfailed:
        findings.setdefault(r.result.details["expected_failure"]["cause"], []).append(r)
    lists = sorted({r.result.details["expected_failure"].get("list") or "?" for r in xfailed})
    console.print(f"[yellow]{len(xfailed)} expected failure(s), {len(findings)} finding(s) "
                  f"(listed in {', '.join(lists)}):")
    for cause, outcomes in findings.items():
        what = outcomes[0].id if len(outcomes) == 1 else f"{outcomes[0].id} and {len(outcomes) - 1} more"
        console.print(f"  {what}: {escape(cause)}", highlight=False, soft_wrap=True)


def print_repeat_summary(runs: dict[int, list[Outcome]], console: Console) -> None:
    """After --repeat: per check that did not always pass, in how many runs it failed, errored or failed
    as expected, and its worst such run; a check whose outcome differs between seeds is marked flaky."""
    by_id: dict[str, list[Outcome]] = {}
    for outcomes in runs.values():
        for r in outcomes:
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
