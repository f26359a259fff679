"""A run of checks as library code (pytest's Session is the model): the command line, `pathmdn_verify.check`, the
pytest plugin, `verify mutants`, `verify coverage`, `verify localize` and `verify report` all run through here.

`RunOptions` says what to run and how.  `Session(options)` plans the run at once, so that a bad option is a usage
error before any work: the implementations named, the selection, one context per seed, the expected-failure lists
(carried by the scope the outcomes are judged in: no process-wide state), the verdict cache.  `Session.run` runs
every check in an isolated worker process (pathmdn_verify.run.runner.Workers: a check that crashes, hangs or
faults costs only itself), reusing what the verdict cache holds, or with `workers="0"` in this process (a tracer's
run, verify coverage's); it returns a `RunResult`, which writes the JSON document.  `Session.map` runs other tasks
(the report's points, localize's example) with the same isolation.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import Check, Context
from pathmdn_verify.core.results import Outcome
from pathmdn_verify.platform import timing
from pathmdn_verify.run import IMPLS_ENV, load_checks, runner, verdicts
from pathmdn_verify.run import xfail_list

# checks that import the kernel package (their workers import it first, after the interpreter fidelity layer)
KERNEL_PREFIXES = ("kernel.", "layer.", "env.interpreter.")


@dataclass(frozen=True)
class RunOptions:
    """What a run runs and how (each field the `verify all` option of the same name; docs/commands.md)."""
    prefixes: tuple[str, ...] | None = None   # the check families' id prefixes (None: every family; (): no check,
    #                                           a session for Session.map's tasks)
    patterns: tuple[str, ...] = ()            # -k expressions (a union with ids)
    ids: tuple[str, ...] = ()
    impls: tuple[str, ...] = ("fla",)         # --impl specs
    device: str | None = None                 # None: cuda when available, else cpu
    profile: str = "ci"
    seeds: tuple[int, ...] = (0,)             # one run per seed (--repeat)
    workers: str = "auto"                     # N, auto, or "0": in this process, without isolation
    check_timeout: float | None = None
    time_limit: float | None = None
    exitfirst: bool = False
    shard: str | None = None                  # "K/N"
    durations: str | None = None              # a previous --json result: start order and shard balance
    fp32_dot: str = "tf32"
    configs: str = "cover"
    references: str = "auto"
    kernel_root: str | None = None
    examples: int | None = None
    save_failing: str | None = None
    xfails: tuple[str, ...] = ()              # lists added to the built-in one
    xfails_only: tuple[str, ...] = ()         # lists instead of the built-in one
    cache: bool = True                        # reuse and keep verdicts (pathmdn_verify.run.verdicts)
    cache_dir: str | None = None
    debug: bool = False

    def __post_init__(self):
        """Options that cannot describe a run are a UsageError, one line naming the option."""
        checks = [(self.examples is not None and self.examples < 1, f"--examples {self.examples}: must be at least 1"),
                  (not self.seeds, "no seed to run"),
                  (self.time_limit is not None and not self.time_limit > 0, f"--time-limit {self.time_limit}: must be "
                                                                            "positive"),
                  (self.check_timeout is not None and not self.check_timeout > 0,
                   f"--check-timeout {self.check_timeout}: must be positive"),
                  (bool(self.xfails and self.xfails_only), "--xfails adds to the built-in list, --xfails-only "
                                                           "replaces it: give one of them"),
                  (bool(self.save_failing and Path(self.save_failing).exists()
                        and not Path(self.save_failing).is_dir()), f"--save-failing {self.save_failing}: not a "
                                                                   "directory"),
                  (self.shard is not None and not _shard_ok(self.shard), f"--shard {self.shard}: must be K/N with "
                                                                         "1 <= K <= N")]
        for bad, why in checks:
            if bad:
                raise UsageError(why)


def _shard_ok(spec: str) -> bool:
    m = re.fullmatch(r"(\d+)/(\d+)", spec)
    return bool(m) and 1 <= int(m[1]) <= int(m[2])


def implementations(specs: tuple[str, ...]) -> tuple[str, ...]:
    """The implementation names of --impl SPEC... (the built-in fla when none), loaded in this process, and how
    the run's workers find them again ($VERIFY_IMPLS: each one's own spec, or the file that defines it)."""
    from pathmdn_verify.ops.impls import BUILT_IN, registered
    from pathmdn_verify.run import load_impl
    specs = tuple(specs) or (BUILT_IN,)
    load_checks()       # the installed plug-ins, whose names a spec may give
    names = tuple(dict.fromkeys(n for s in specs for n in load_impl(s)))
    found = [_spec_of(i) for i in registered(names) if i.name != BUILT_IN]
    os.environ[IMPLS_ENV] = json.dumps(list(dict.fromkeys(found)))
    load_checks()       # the checks of the implementations just loaded
    return names


def _spec_of(impl) -> str:
    """How a fresh process finds an implementation again: the spec it was loaded by, else the file of the module
    that registered it (the caller's own code: pv.implement in a module it imported)."""
    import sys
    if impl.spec:
        return impl.spec
    path = getattr(sys.modules.get(impl.module or "__main__"), "__file__", None)
    if impl.module is None or path is None:
        raise UsageError(f"implementation {impl.name}: registered by the main script, which the worker processes "
                         "cannot import; call pathmdn_verify.implement in a module (a .py file) and import that")
    return str(Path(path).resolve())


class Session:
    """One planned run (see the module's docstring): `run` it, or `map` tasks beside it."""

    def __init__(self, options: RunOptions):
        from pathmdn_verify.platform import environment
        from pathmdn_verify.platform.kernel_root import validate_kernel_root
        self.options = o = options
        self.lists = xfail_list.chosen(o.xfails, o.xfails_only)     # a malformed list: one line naming it
        # the workers import the tree (runner._worker_start); this process only reads it: sessions side by side
        # (a mutant's killers on its tree each) never change its import path
        self.kernel_root = validate_kernel_root(o.kernel_root) if o.kernel_root else None
        self.device = environment.resolve_device(o.device)
        if o.configs == "autotune" and self.device == "cpu":
            raise UsageError("--configs autotune: Triton's timing needs a GPU; on the cpu every config ties (use cover)")
        self.durations = _durations(o.durations) if o.durations else None     # start order and shards
        self._impls_env = os.environ.get(IMPLS_ENV)   # the caller's, back at close (pv.check runs in its process)
        self.impls = implementations(o.impls)
        self.chosen = self._select()
        self.kernels = any(c.id.startswith(KERNEL_PREFIXES) for c in self.chosen)
        if self.kernels and not self.kernel_root:     # a kernel root was validated: it holds fla
            from pathmdn_verify.kernels.fla_ops import check_fla_version
            check_fla_version()
        save = str(Path(o.save_failing).resolve()) if o.save_failing else None
        if save:
            Path(save).mkdir(parents=True, exist_ok=True)
        self.contexts = [Context(device=self.device, profile=o.profile, seed=s, fp32_dot=o.fp32_dot,
                                 kernel_root=self.kernel_root, examples=o.examples, save_failing=save,
                                 configs=o.configs, references=o.references) for s in o.seeds]
        self.workers = 0 if o.workers == "0" else min(runner.worker_count(o.workers, self.device),
                                                      max(1, len(self.chosen)))
        self.timeout = o.check_timeout or runner.CHECK_TIMEOUT[o.profile]
        self.cache = self._verdict_cache()
        # the seconds of this kind of run's checks, kept beside the verdict cache: the start order of a run given
        # no --durations (longest first; never the shards, which must be the same on every machine)
        self.kept_durations = self._kept("durations")
        self.compile_estimate: dict | None = None      # timing.estimate, before a run on cuda with a kept record
        self.pool: runner.Workers | None = None

    def _select(self) -> list[Check]:
        from pathmdn_verify.core.registry import REGISTRY, select
        o = self.options
        if o.prefixes == ():
            return []
        unknown = [i for i in o.ids if i not in REGISTRY]
        if unknown:
            raise UsageError(f"--id {unknown[0]}: no such check (`verify list` lists them; an implementation's checks "
                             "exist once --impl names it)")
        chosen = [c for c in select(list(o.patterns) or None, list(o.ids) or None, o.prefixes)
                  if CheckId.parse(c.id).impl in (None, *self.impls)]
        if not chosen:
            raise UsageError(f"no check of the implementation(s) {', '.join(self.impls)} matches "
                             f"{list(o.patterns or o.ids) or 'the selection'}; see `verify list`")
        if o.shard:
            k, n = map(int, o.shard.split("/"))
            chosen = runner.shard(chosen, k, n, self.durations)
        return chosen

    def _verdict_cache(self):
        """The run's verdict cache (pathmdn_verify.run.verdicts), or None without one (in this process: no worker's
        reads to keep a verdict with)."""
        from pathmdn_verify.platform import environment
        if not self.options.cache or self.workers == 0:
            return None
        name = environment.describe(self.device)["device_name"] if self.device == "cuda" else None
        folder = Path(self.options.cache_dir) if self.options.cache_dir else verdicts.default_dir()
        return verdicts.VerdictCache(folder, xfail_list.device_class(self.device, name), self.impls)

    def _kept(self, what: str) -> Path | None:
        """A record kept beside the verdict cache per device class and profile (durations, compile keys)."""
        if self.cache is None:
            return None
        return self.cache.folder / f"{what}-{self.cache.base['device'].replace(':', '_').replace(' ', '_')}-" \
                                   f"{self.options.profile}.json"

    def _compile_keys(self) -> dict[str, list[str]]:
        """The kept record of the Triton compile keys each check used when it last ran (timing.keys_used)."""
        path = self._kept("compile-keys")
        try:
            return json.loads(path.read_text()) if path is not None and path.is_file() else {}
        except (OSError, ValueError):
            return {}           # unreadable: no estimate (the file is rewritten after the run)

    def _keep_compile_keys(self, outcomes) -> None:
        """Each check that ran: the keys it compiled or loaded, replacing the kept ones; none (its worker had them
        all loaded, or it compiles nothing) keeps the kept ones, or records none."""
        ran = {o.id: timing.keys_used(o.result.details) for o in outcomes
               if o.started and "cached" not in o.result.details and o.result.kind != "not_run"}
        path = self._kept("compile-keys")
        if path is None or not any(ran.values()):
            return
        kept = self._compile_keys()
        kept |= {cid: keys or kept.get(cid, []) for cid, keys in ran.items()}
        verdicts.write_atomic(path, json.dumps(kept, sort_keys=True))

    def _start_order_durations(self) -> dict[str, float] | None:
        if self.durations is not None or self.kept_durations is None or not self.kept_durations.is_file():
            return self.durations
        try:
            return {k: float(v) for k, v in json.loads(self.kept_durations.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            return None        # unreadable: the default order (the file is rewritten after the run)

    def _keep_durations(self, outcomes) -> None:
        """The seconds of the checks that ran, merged into the kept ones."""
        ran = {o.id: round(o.seconds, 3) for o in outcomes if o.started and "cached" not in o.result.details
               and o.result.kind not in ("not_run",)}
        if self.kept_durations is None or not ran:
            return
        kept = self._start_order_durations() if self.durations is None else {}
        kept = {**(kept or {}), **ran}
        verdicts.write_atomic(self.kept_durations, json.dumps(kept, sort_keys=True))

    def scope(self, kernel_package: dict | None) -> xfail_list.Scope:
        """What the expected-failure lists are judged against (runner.scope), with this run's lists."""
        return runner.scope(self.contexts[0], kernel_package, self.lists)

    # ------------------------------------------------------------------------------------------- running

    def run(self, on_header: Callable[[dict], None] = lambda info: None,
            on_start: Callable[[int, Check], None] = lambda i, c: None,
            on_done: Callable[[int, Outcome], None] = lambda i, o: None,
            on_context: Callable[[int, Context], None] | None = None) -> RunResult:
        """Every context's run of the selection; on_header(what the workers loaded) once they are ready, on_context
        (n from 1, context) before each seed's run, on_start and on_done per check (selection index).  Interrupted
        (SIGINT / SIGTERM under runner.stopped_by_signals) ends it with what finished; the workers end with it."""
        started, t0 = time.time(), time.monotonic()
        finished: dict[int, dict[int, Outcome]] = {ctx.seed: {} for ctx in self.contexts}
        info, interrupted = {}, None
        deadline = None if self.options.time_limit is None else time.monotonic() + self.options.time_limit
        try:
            info = self._start()
            on_header(info)
            for n, ctx in enumerate(self.contexts, 1):
                if on_context is not None:
                    on_context(n, ctx)
                if self.options.exitfirst and runner.any_failed(o for done in finished.values() for o in done.values()):
                    finished[ctx.seed] = {i: runner.not_run(c, ctx, runner.EXITFIRST) for i, c in enumerate(self.chosen)}
                    continue
                self._run_context(ctx, finished[ctx.seed], deadline, on_start, on_done, info)
        except runner.Interrupted as exc:
            interrupted = exc.code
        finally:
            self.close()
        runs = {ctx.seed: [finished[ctx.seed].get(i) or runner.not_run(c, ctx, runner.INTERRUPTED)
                           for i, c in enumerate(self.chosen)] for ctx in self.contexts}
        self._keep_durations(o for run in runs.values() for o in run)
        self._keep_compile_keys(o for run in runs.values() for o in run)
        return RunResult(self, runs, info, interrupted, started, time.monotonic() - t0)

    def _start(self) -> dict:
        """Start the workers, unless every verdict is in the cache or the run is in this process; what the first
        worker loaded (kernel package, interpreter fidelity) for the header, or the kernel package found here."""
        from pathmdn_verify.platform import environment
        if self.workers:      # its fork server imports torch while this process reads the tree and the cache
            runner.start_fork_server(self.device, self.workers)
        try:
            package = environment.kernel_package(self.kernel_root)
        except ImportError:
            package = None
        here = {"kernel_package": package if self.kernels else None, "interpreter_fidelity": None,
                "import_error": None}
        if self.workers == 0:
            return here
        root = Path(package["path"]).parent if package else None
        def replayed(c: Check) -> bool:
            return self.cache is not None and verdicts.cacheable(c.id) and all(
                self.cache.get(c.id, ctx, root) is not None for ctx in self.contexts)
        hits = [replayed(c) for c in self.chosen]
        if self.cache is not None:      # for the header: how many replay, and if none, what changed in the key
            here["verdict_cache"] = {"folder": str(self.cache.folder), "replay": sum(hits), "of": len(hits),
                                     "key_changes": None if any(hits) else self.cache.differences()}
            if all(hits):
                return here
        if self.device == "cuda" and (kept := self._compile_keys()):
            pending = [c.id for c, hit in zip(self.chosen, hits) if not hit]
            self.compile_estimate = timing.estimate(kept, pending, timing.disk_cache_dir())
        self.pool = runner.Workers(self.workers, self.contexts[0], self.kernels, self.options.debug, cache=self.cache,
                                   run_label=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                   start_timeout=min(runner.START_TIMEOUT, self.timeout), lists=self.lists)
        info = dict(self.pool.wait_ready())      # a copy: the pool keeps its own
        if "verdict_cache" in here:
            info["verdict_cache"] = here["verdict_cache"]
        return info

    def _run_context(self, ctx: Context, finished: dict, deadline, on_start, on_done, info: dict) -> None:
        if self.pool is not None:
            self.pool.run(self.chosen, ctx, finished, self.timeout, deadline, on_start, on_done,
                          self.options.exitfirst, self._start_order_durations())
            return
        if self.workers == 0 and self.kernel_root:    # this process imports the tree: its path, for good
            from pathmdn_verify.platform.kernel_root import activate
            activate(self.kernel_root)
        listed = self.scope(info.get("kernel_package"))
        for i, c in enumerate(self.chosen):
            hit = None if self.workers == 0 or self.cache is None else self.cache.get(
                c.id, ctx, Path(info["kernel_package"]["path"]).parent if info.get("kernel_package") else None)
            if hit is None:
                if deadline is not None and time.monotonic() > deadline:
                    finished[i] = runner.not_run(c, ctx, runner.TIME_LIMIT)
                else:
                    on_start(i, c)
                    finished[i] = runner.execute(c, ctx, self.options.debug)
            else:
                finished[i] = hit
            finished[i] = runner.apply_xfails(finished[i], listed)
            on_done(i, finished[i])

    def map(self, tasks: list[tuple[Callable, tuple]], on_start=lambda i: None, on_done=lambda i, v: None,
            info: dict | None = None) -> list:
        """Tasks that are not checks, each a picklable (function, args), in worker processes of this run's device and
        kernel package, each task within the run's check timeout (runner.Workers.map: a task whose worker dies or
        hangs is a runner.Lost); info, a dict, gets what the workers loaded (kernel_package)."""
        pool = runner.Workers(max(1, self.workers), self.contexts[0], True, self.options.debug,
                              start_timeout=min(runner.START_TIMEOUT, self.timeout), lists=self.lists)
        try:
            loaded = pool.wait_ready()
            if info is not None:
                info["kernel_package"] = loaded["kernel_package"]
            return pool.map(tasks, self.timeout, on_start, on_done)
        finally:
            pool.close()

    def close(self) -> None:
        """The workers end; the caller's process gets its $VERIFY_IMPLS back (a later run or command in it loads
        only the implementations it names)."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        runner.stop_unused_fork_server()
        if self._impls_env is None:
            os.environ.pop(IMPLS_ENV, None)
        else:
            os.environ[IMPLS_ENV] = self._impls_env


def _durations(path: str) -> dict[str, float]:
    """Per-check seconds of a --json result (the checks that ran)."""
    from pathmdn_verify.core import results
    return {c["id"]: c["seconds"] for c in results.load(path)["checks"] if c["started"]}


@dataclass
class RunResult:
    """A finished (or interrupted) run: per seed, every check's outcome in selection order."""
    session: Session
    runs: dict[int, list[Outcome]]
    info: dict                       # what the workers loaded (kernel_package, interpreter_fidelity)
    interrupted: int | None          # the exit status of the signal that stopped it (130, 143)
    started: float
    wall: float
    extra: dict = field(default_factory=dict)     # what a caller adds to the JSON environment

    @property
    def outcomes(self) -> list[Outcome]:
        return [o for run in self.runs.values() for o in run]

    @property
    def scope(self) -> xfail_list.Scope:
        return self.session.scope(self.info.get("kernel_package"))

    def document(self, command: list[str]) -> dict:
        """The result document (verify/core/results.schema.json)."""
        from pathmdn_verify.core import results
        from pathmdn_verify.platform import configs, environment
        s, o = self.session, self.session.options
        seeds = [ctx.seed for ctx in s.contexts]
        env = {**environment.versions(), **environment.describe(s.device), "profile": o.profile, "seed": seeds[0],
               "fp32_dot": o.fp32_dot, "kernel_root": s.kernel_root, "workers": s.workers, "shard": o.shard,
               "check_timeout": s.timeout, "interpreter_fidelity": self.info.get("interpreter_fidelity"),
               "configs": configs.summary(o.configs, self.outcomes),
               "expected_failures": xfail_list.scope_json(self.scope), **({"seeds": seeds} if len(seeds) > 1 else {}),
               **({"compile_estimate": s.compile_estimate} if s.compile_estimate else {}), **self.extra}
        return results.document(self.outcomes, command=command, toolkit=environment.toolkit(),
                                kernel_package=self.info.get("kernel_package"), environment=env,
                                started=self.started, wall_seconds=self.wall, interrupted=self.interrupted is not None)

    def exit_status(self) -> int:
        """0 nothing failed (expected failures allowed), 1 a check failed or errored, the signal's status when
        interrupted."""
        from pathmdn_verify.core import results
        return self.interrupted or results.exit_status([{"status": o.result.status} for o in self.outcomes])


def replace(options: RunOptions, **changes) -> RunOptions:
    """options with some fields changed (a mutant's killers on its tree, a bisect step)."""
    return dataclasses.replace(options, **changes)
