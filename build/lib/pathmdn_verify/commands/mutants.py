"""`verify mutants`: the mutation self-test.  Each planted bug of an op or layer record (its `mutants`,
pathmdn_verify.platform.mutation.Mutant) must turn at least one of its killer checks red.

The killers first run on the unmodified kernels (the installed package or --kernel-root), in the run's workers:
a killer must be green there (pass, or xfail: a listed check that only the expected-failure ratchet turns red
when it fails worse), or a red killer proves nothing and the mutant is an error.  Then, for each mutant, the
kernel package is copied with the mutant's patch into a temporary directory and its killers run against that
copy as a kernel root, in a fresh one-worker pool of the runner (a mutant that crashes its worker costs only
itself), in the registry's order, none started after the first that kills it (as under --exitfirst); up to
--workers mutants at once.  Every outcome is `mutant.<name>`: pass (killed, by which check), fail (SURVIVED),
error, or skip (no killer runs here).

Exit status: 0 every mutant killed (or skipped), 1 one survived or errored, 2 a usage error, 130 / 143
interrupted.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import shlex
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from pathmdn_verify.commands import checks, options
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import REGISTRY, Check, Context, Result, matcher
from pathmdn_verify.core.results import Outcome, outcome_json

DESCRIPTION = "mutation self-test: planted bugs in a copy of the kernels, each must turn one of its killer checks red"


def add_parser(sub) -> None:
    p = sub.add_parser("mutants", help=DESCRIPTION + " (minutes)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    options.select(p, "mutant (mutant.<name>)")
    checks.run_options(p)
    p.add_argument("--list", action="store_true", help="print the selected mutants and their killers, run nothing")


def every() -> dict:
    """name -> Mutant: the op records' and the layer records' planted bugs."""
    from pathmdn_verify import layers, ops
    return {**ops.mutants(), **layers.mutants()}


def _selection(args, durations=None) -> list[Check]:
    """The selected mutants as checks of the run's presentation (not registered: a mutant is judged by this
    command, not run as a check)."""
    tests = [matcher(p) for p in args.patterns or ()]
    ids = {i if i.startswith("mutant.") else f"mutant.{i}" for i in args.ids or ()}
    chosen = [Check(f"mutant.{name}", f"planted bug is caught: {m.description}", run=None)
              for name, m in every().items()
              if not (tests or ids) or f"mutant.{name}" in ids or any(t(f"mutant.{name}") for t in tests)]
    if not chosen:
        raise UsageError(f"no mutant matches {args.patterns or args.ids}; see `verify mutants --list`")
    return chosen


def run(args, command: list[str]) -> int:
    from pathmdn_verify.run import load_checks
    load_checks()
    if args.list:
        for c in _selection(args):
            m = every()[c.id.removeprefix("mutant.")]
            print(f"{c.id}  {m.description}\n    killers: {', '.join(m.killers)}")
        return 0
    others = [s for s in args.impl or () if s != "fla"]
    if others:
        raise UsageError(f"verify mutants: not supported for implementation {', '.join(others)}: the mutants are "
                         "planted bugs in fla's kernel package")
    from pathmdn_verify.kernels.fla_ops import check_fla_version
    check_fla_version()
    plan = checks.prepare(args, command, _selection)
    return checks.execute(plan, MutantSession(plan))


def repro_command(mutant_id: str, ctx: Context) -> str:
    from pathmdn_verify.run.runner import repro_command as check_repro
    return shlex.join(["verify", "mutants", *shlex.split(check_repro(mutant_id, ctx))[2:]])


class MutantSession:
    """Judges a plan's mutants: the killers on the unmodified kernels once, then each mutant's killers on its
    copy of the kernel package."""

    def __init__(self, plan: checks.Plan):
        self.plan = plan
        self.pool = None
        self.live: dict = {}             # id -> the one-worker pool of a mutant being judged (closed on interrupt)
        self.lock = threading.Lock()

    def start(self) -> dict:
        from pathmdn_verify.run import runner
        p = self.plan
        self.pool = runner.Workers(p.workers, p.contexts[0], True, p.args.debug)
        return self.pool.wait_ready()

    def run(self, ctx: Context, finished: dict, progress, deadline: float | None) -> None:
        from pathmdn_verify.run import runner
        mutants = [every()[c.id.removeprefix("mutant.")] for c in self.plan.chosen]
        killers = sorted({k for m in mutants for k in m.killers})
        missing = [k for k in killers if k not in REGISTRY]
        if missing:
            raise UsageError(f"killer checks not registered: {', '.join(missing)}")
        progress.console.print(f"killers on the unmodified kernels: {len(killers)} checks", highlight=False)
        clean = {o.id: outcome_json(o) for o in self.pool.run([REGISTRY[k] for k in killers], ctx, {},
                                                             self.plan.timeout, deadline)}
        reported = [0]
        done: dict[int, Outcome] = {}

        def judge(i: int) -> None:
            c = self.plan.chosen[i]
            t0, started = time.perf_counter(), time.time()
            result = self._judge(mutants[i], clean, ctx)
            done[i] = Outcome(c.id, c.description, result, time.perf_counter() - t0, repro_command(c.id, ctx),
                              started, ctx.seed)

        with cf.ThreadPoolExecutor(self.plan.workers) as threads:
            futures = {}
            for i, c in enumerate(self.plan.chosen):
                if deadline is not None and time.monotonic() > deadline:
                    done[i] = runner.not_run(c, ctx, runner.TIME_LIMIT)
                    continue
                futures[threads.submit(judge, i)] = i
            pending = set(futures)
            while pending:
                finished_now, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for f in finished_now:
                    f.result()          # a judge that raised: the run's error (a usage error, a bug here)
                while reported[0] in done:
                    i = reported[0]
                    finished[i] = done[i]
                    progress.done(i, done[i])
                    reported[0] += 1
        for i in sorted(set(done) - set(finished)):
            finished[i] = done[i]

    def _judge(self, mutant, clean: dict[str, dict], ctx: Context) -> Result:
        from pathmdn_verify.platform.mutation import materialize
        from pathmdn_verify.run import runner
        if all(clean[i]["status"] == "skip" for i in mutant.killers):     # none of them can run here
            c = clean[mutant.killers[0]]
            kind = c.get("kind") or ("interpreter_gap" if "interpreter" in c["message"] else "unsupported")
            return Result("skip", message="no killer runs here: " + "; ".join(
                f"{clean[i]['id']}: {clean[i]['message']}" for i in mutant.killers), kind=kind)
        not_green = [clean[i] for i in mutant.killers if clean[i]["status"] not in ("pass", "xfail")]
        if not_green:
            return Result("error", message="killer not green on the unmodified kernels, so it proves nothing: "
                          + "; ".join(_summary(c) for c in not_green))
        with tempfile.TemporaryDirectory(prefix=f"mutant_{mutant.name}_") as tmp:
            tree = replace(ctx, kernel_root=str(materialize(mutant, Path(tmp))))
            pool = runner.Workers(1, tree, True, self.plan.args.debug)
            with self.lock:
                self.live[id(pool)] = pool
            try:
                pool.wait_ready()
                seen = pool.run([REGISTRY[k] for k in mutant.killers], tree, {}, self.plan.timeout, exitfirst=True)
            finally:
                with self.lock:
                    self.live.pop(id(pool), None)
                pool.close()
        seen = {o.id: outcome_json(o) for o in seen if o.result.kind != "not_run"}
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
        return Result("fail", message=f"SURVIVED ({mutant.description}): "
                      + "; ".join(_summary(c) for c in seen.values()), details=details)

    def close(self) -> None:
        with self.lock:
            live = list(self.live.values())
        for pool in live:                 # an interrupt: the judging threads' workers end, so do the threads
            pool.close()
        if self.pool is not None:
            self.pool.close()

    def report(self, outcomes, console) -> None:
        console.print(table(outcomes))


def _num(x) -> float | None:
    return None if x is None else float(x)     # JSON writes non-finite numbers as strings


def _summary(c: dict) -> str:
    return f"{c['id']} {c['status']} ({_num(c['measured']):.3g} vs budget {_num(c['budget']):.3g})" \
        if c["measured"] is not None and c["budget"] is not None else f"{c['id']} {c['status']}"


def table(outcomes) -> Table:
    """The mutants table: mutant, what it changes, which check killed it, measured vs budget."""
    t = Table(title="mutation self-test")
    for col in ("mutant", "what it changes", "killed by", "measured vs budget"):
        t.add_column(col)
    mutants = every()
    for o in outcomes:
        res = o.result
        killer = res.details.get("killed_by", {"fail": "SURVIVED", "error": "ERROR"}.get(res.status, res.status))
        numbers = f"{res.measured:.3g} vs {res.budget:.3g}" if res.measured is not None and res.budget is not None else ""
        name = o.id.removeprefix("mutant.")
        t.add_row(name, escape(mutants[name].description if name in mutants else ""), escape(killer), numbers)
    return t
