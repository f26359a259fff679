"""The mutation self-test as library code (`verify mutants` drives it): each planted bug of an op or layer record
(pathmdn_verify.platform.mutation.Mutant) must turn at least one of its killer checks red.

Every run of checks here is a Session (pathmdn_verify.run.session): the killers first on the unmodified kernels (a
killer must be green there, or it proves nothing and the mutant is an error), then each mutant's killers on a copy
of the kernel package with its patch, as a kernel root, in a session of one worker that stops at the first killer
that kills it (exitfirst) and keeps no verdict; up to `workers` mutants at once.  A MutantRun answers what a Session
answers (chosen, contexts, run -> RunResult) with one outcome per mutant, `mutant.<name>`: pass (killed, by which
check), fail (SURVIVED), error, or skip (no killer runs here).
"""
from __future__ import annotations

import concurrent.futures as cf
import shlex
import tempfile
import threading
import time
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import REGISTRY, Check, Context, Result
from pathmdn_verify.core.results import Outcome, outcome_json
from pathmdn_verify.run import runner
from pathmdn_verify.run.session import RunOptions, RunResult, Session, replace


def every() -> dict:
    """name -> Mutant: the op records' and the layer records' planted bugs."""
    from pathmdn_verify import layers, ops
    return {**ops.mutants(), **layers.mutants()}


def repro_command(mutant_id: str, ctx: Context) -> str:
    return shlex.join(["verify", "mutants", *shlex.split(runner.repro_command(mutant_id, ctx))[2:]])


class MutantRun:
    """The judging of the chosen mutants (Checks named mutant.<name>, not registered) under `options`."""

    def __init__(self, options: RunOptions, chosen: list[Check]):
        self.mutants = [every()[c.id.removeprefix("mutant.")] for c in chosen]
        killers = tuple(sorted({k for m in self.mutants for k in m.killers}))
        missing = [k for k in killers if k not in REGISTRY]
        if missing:
            raise UsageError(f"killer checks not registered: {', '.join(missing)}")
        self.clean = Session(replace(options, ids=killers, patterns=(), prefixes=None, shard=None))
        self.options, self.chosen, self.contexts = options, chosen, self.clean.contexts
        self.device, self.kernel_root, self.workers = self.clean.device, self.clean.kernel_root, self.clean.workers
        self.timeout, self.impls, self.scope = self.clean.timeout, self.clean.impls, self.clean.scope
        self.live: dict[int, Session] = {}      # the sessions judging a mutant now (closed on interrupt)
        self.lock = threading.Lock()

    @property
    def compile_estimate(self) -> dict | None:
        """The clean killers' run's (Session.compile_estimate); the mutants' own runs are not estimated."""
        return self.clean.compile_estimate

    def run(self, on_header=lambda info: None, on_start=lambda i, c: None, on_done=lambda i, o: None,
            on_context=None) -> RunResult:
        started, t0 = time.time(), time.monotonic()
        ctx = self.contexts[0]
        done: dict[int, Outcome] = {}
        interrupted, info = None, {}
        try:
            clean_run = self.clean.run(on_header)
            info = clean_run.info
            if clean_run.interrupted:
                raise runner.Interrupted(clean_run.interrupted)
            clean = {o.id: outcome_json(o) for o in clean_run.outcomes}
            self._judge_all(clean, ctx, done, on_start, on_done)
        except runner.Interrupted as exc:
            interrupted = exc.code
        finally:
            self.close()
        outcomes = [done.get(i) or runner.not_run(c, ctx, runner.INTERRUPTED) for i, c in enumerate(self.chosen)]
        return RunResult(self, {ctx.seed: outcomes}, info, interrupted, started, time.monotonic() - t0)

    def _judge_all(self, clean: dict, ctx: Context, done: dict, on_start, on_done) -> None:
        """Up to `workers` mutants at once; on_done in the chosen order."""
        deadline = None if self.options.time_limit is None else time.monotonic() + self.options.time_limit
        reported = 0
        with cf.ThreadPoolExecutor(max(1, self.workers)) as threads:
            futures = {}
            for i, c in enumerate(self.chosen):
                if deadline is not None and time.monotonic() > deadline:
                    done[i] = runner.not_run(c, ctx, runner.TIME_LIMIT)
                    continue
                on_start(i, c)
                futures[threads.submit(self._outcome, i, clean, ctx)] = i
            pending = set(futures)
            while pending:
                finished_now, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for f in finished_now:
                    done[futures[f]] = f.result()     # a judge that raised: the run's error (usage, a bug here)
                while reported in done:
                    on_done(reported, done[reported])
                    reported += 1

    def _outcome(self, i: int, clean: dict, ctx: Context) -> Outcome:
        c = self.chosen[i]
        t0, started = time.perf_counter(), time.time()
        result = self._judge(self.mutants[i], clean)
        return Outcome(c.id, c.description, result, time.perf_counter() - t0, repro_command(c.id, ctx), started,
                       ctx.seed)

    def _judge(self, mutant, clean: dict[str, dict]) -> Result:
        if all(clean[i]["status"] == "skip" for i in mutant.killers):     # none of them can run here
            c = clean[mutant.killers[0]]
            kind = c.get("kind") or ("interpreter_gap" if "interpreter" in c["message"] else "unsupported")
            return Result("skip", message="no killer runs here: " + "; ".join(
                f"{clean[i]['id']}: {clean[i]['message']}" for i in mutant.killers), kind=kind)
        not_green = [clean[i] for i in mutant.killers if clean[i]["status"] not in ("pass", "xfail")]
        if not_green:
            return Result("error", message="killer not green on the unmodified kernels, so it proves nothing: "
                          + "; ".join(summary(c) for c in not_green))
        seen = {o.id: outcome_json(o) for o in self._killers_on(mutant) if o.result.kind != "not_run"}
        details = {"change": mutant.description, "killers": {i: c["status"] for i, c in seen.items()}}
        killed = [c for c in seen.values() if c["status"] == "fail"]
        if killed:
            c = killed[0]
            return Result("pass", _num(c["measured"]), _num(c["budget"]), f"killed by {summary(c)}",
                          {**details, "killed_by": c["id"]})
        errored = [c for c in seen.values() if c["status"] == "error"]
        if errored:
            return Result("error", message="killer errored on the mutant: " + "; ".join(
                f"{c['id']}: {c['message']}" for c in errored), details=details)
        return Result("fail", message=f"SURVIVED ({mutant.description}): "
                      + "; ".join(summary(c) for c in seen.values()), details=details)

    def _killers_on(self, mutant) -> list[Outcome]:
        """The mutant's killers on its copy of the kernel package: a session of one worker, none after the first
        that kills it, no verdict kept."""
        from pathmdn_verify.platform.mutation import materialize
        with tempfile.TemporaryDirectory(prefix=f"mutant_{mutant.name}_") as tmp:
            tree = str(materialize(mutant, Path(tmp)))
            session = Session(replace(self.options, ids=tuple(mutant.killers), patterns=(), prefixes=None, shard=None,
                                      kernel_root=tree, workers="1", exitfirst=True, cache=False))
            with self.lock:
                self.live[id(session)] = session
            try:
                return session.run().outcomes
            finally:
                with self.lock:
                    self.live.pop(id(session), None)

    def close(self) -> None:
        """An interrupt: the judging sessions' workers end, so do their threads."""
        with self.lock:
            live = list(self.live.values())
        for session in live:
            session.close()
        self.clean.close()


def _num(x) -> float | None:
    return None if x is None else float(x)     # JSON writes non-finite numbers as strings


def summary(c: dict) -> str:
    """A killer's outcome in a few words: id, status, measured vs budget."""
    return f"{c['id']} {c['status']} ({_num(c['measured']):.3g} vs budget {_num(c['budget']):.3g})" \
        if c["measured"] is not None and c["budget"] is not None else f"{c['id']} {c['status']}"
