"""The check-running commands (`verify all`, `oracles`, `symbolic`, `kernels`, `layers`: one per check family) and
`verify list`; and what every command that runs checks shares (`run_options`, `prepare`, `execute`: `verify mutants`
runs its killer checks through them too).

A run is prepared (options checked, the selection and the contexts made), executed (workers, progress, Ctrl-C)
and reported (summary, JSON, JUnit, exit status).  Exit status of a run: 0 when nothing failed (expected failures
allowed), 1 when a check failed or errored, 130 / 143 when interrupted by Ctrl-C / SIGTERM (the results of the
checks that finished are still written).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from pathmdn_verify.commands import options
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import Check, Context
from pathmdn_verify.run import xfail_list as xfails

# subcommand -> (id prefixes it runs, help)
FAMILIES = {
    "all": (None, "run every registered check family (what CI runs)"),
    "oracles": (("oracle.",), "float64 oracles against mpmath and against each other, with negative controls"),
    "symbolic": (("symbolic.",), "sympy proofs of the PaTH and MDN identities, with negative controls"),
    "kernels": (("env.interpreter.", "kernel."), "production Triton kernels against the float64 oracles"),
    "layers": (("layer.", "env.interpreter.device."), "the model layers users call (flash-linear-attention's "
               "fla.layers: PaTH, FoX, MDN, GDN) against float64 literals of the same layers, and the device answers "
               "they read"),
}
KERNEL_PREFIXES = ("kernel.", "layer.", "env.interpreter.")    # checks that import the kernel package


def add_parser(sub) -> None:
    """The check-running commands and `verify list`."""
    for name, (_, help_) in FAMILIES.items():
        p = sub.add_parser(name, help=help_, description=help_)
        options.select(p)
        run_options(p)
        p.add_argument("--repeat", type=int, default=1, metavar="N",
                       help="run the selected checks N times with seeds S, S+1, ... and report per check how many "
                            "runs failed (exit 1 if any failed outside the expected failures)")
        p.add_argument("--seed-from", type=int, metavar="S", help="first seed of --repeat (default: --seed)")
        p.add_argument("--shard", metavar="K/N", help="run shard K of N (1-based) of the selection: deterministic and "
                                                      "balanced by --durations, else by id; merge with `verify merge`")
        p.add_argument("--durations", metavar="FILE",
                       help="a previous --json result: checks start longest first by its per-check seconds (default: "
                            "on a GPU layer generation checks first, then kernel backward checks, the other kernel, "
                            "layer and remaining checks; on the CPU the selection's order), and they balance --shard")
        p.add_argument("--save-failing", metavar="DIR",
                       help="save each failing kernel check's minimal example in DIR as a file `verify compare` accepts")
        p.add_argument("--time-limit", type=float, metavar="SECONDS",
                       help="start no check after SECONDS; the ones left are skipped (kind not_run) and listed, so "
                            "a time-boxed run still writes its JSON")
        p.add_argument("-x", "--exitfirst", action="store_true",
                       help="start no check after one failed or errored (an expected failure does not stop the run); "
                            "the ones left are skipped (kind not_run) and listed")
    lst = sub.add_parser("list", help="print every check id with its one-line description",
                         description="Print every registered check id with its one-line description (with --impl: the "
                                     "checks `verify all --impl ...` runs).")
    options.select(lst)
    options.impl(lst, "checks are listed beside the others that take no implementation (default: every registered "
                      "one)")
    options.debug(lst)


def run_options(p: argparse.ArgumentParser) -> None:
    """The options of every command that runs checks in workers (the check families, `verify mutants`)."""
    options.device(p)
    options.profile(p)
    options.seed(p)
    p.add_argument("--workers", default="auto", metavar="N|auto",
                   help="worker processes running checks in parallel (default auto: up to 16 per visible GPU and one "
                        "per core, each pinned to one, on cuda; one per available core on the CPU). Every check runs "
                        "in a worker: one that crashes, hangs or hits a fatal CUDA error is replaced and the run goes on")
    p.add_argument("--check-timeout", type=float, metavar="SECONDS",
                   help="a check running longer fails with kind timeout and its worker is replaced "
                        "(default: quick 300, ci 600, full 1800)")
    options.json_out(p, "results (format: verify/core/results.schema.json)")
    p.add_argument("--junit", metavar="PATH", help="write results as JUnit XML")
    options.fp32_dot(p)
    p.add_argument("--configs", choices=("cover", "all", "autotune", "first"), default="cover",
                   help="which tile config each autotuned kernel runs: cover (default) rotates every kernel's configs "
                        "over its launches, deterministically from check id and seed, so that a run covers each "
                        "config (the results say which ran and any left unrun); first: always the first config "
                        "(the CPU's old behaviour); autotune: Triton's timing (GPU only); all: every example again "
                        "under each config of each kernel (round r: config r mod n; the worst round decides, a failure "
                        "names the rounds that failed; costs as many times as the most configs a kernel has)")
    p.add_argument("--references", choices=("auto", "device", "cpu"), default="auto",
                   help="where the float64 oracle and the same-dtype implementation run: auto (default: each op "
                        "record's choice, the CPU for the sequential MDN and GDN recurrences, measured faster there "
                        "than as many small GPU launches), device (--device) or cpu; the kernel always runs on "
                        "--device, and the verdicts are the same (fixed-order same-dtype arithmetic)")
    options.kernel_root(p)
    options.impl(p)
    p.add_argument("--xfails", action="append", metavar="FILE",
                   help="add the expected failures of FILE (e.g. your own tree's defects) to the built-in list "
                        "(verify/run/expected_failures.toml, whose header documents the format); repeatable; a "
                        "malformed FILE is exit status 2")
    p.add_argument("--xfails-only", action="append", metavar="FILE",
                   help="read the expected failures from FILE alone, not the built-in list; repeatable")
    options.examples(p)
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where verdicts are kept and reused while nothing a check read changed (every file its "
                        "worker read, the toolkit, the run's options, the environment, the named implementations' "
                        "sources) (default: $VERIFY_CACHE_DIR, else beside Triton's cache, ~/.triton/verify-verdicts); "
                        "safe to delete")
    p.add_argument("--no-cache", action="store_true", help="run every check, reusing and keeping no verdict")
    p.add_argument("-v", "--verbose", action="store_true", help="print every check's message, not only failures'")
    options.debug(p)


def run(args, command: list[str]) -> int:
    from pathmdn_verify.run import load_checks
    load_checks()
    if args.command == "list":
        return _list(args)
    plan = prepare(args, command, _selection)
    return execute(plan, CheckSession(plan))


def _list(args) -> int:
    from pathmdn_verify.core.registry import select
    names = implementations(args.impl) if args.impl else None
    chosen = select(args.patterns, args.ids)
    if names is not None:
        chosen = [c for c in chosen if CheckId.parse(c.id).impl in (None, *names)]
    if not chosen:
        raise UsageError(f"no check id matches {args.patterns or args.ids or 'the selection'}")
    width = max(len(c.id) for c in chosen)
    for c in chosen:
        print(f"{c.id:<{width}}  {c.description}")
    return 0


def _selection(args, seconds: dict[str, float] | None) -> list[Check]:
    from pathmdn_verify.core.registry import select
    from pathmdn_verify.run.runner import shard
    from pathmdn_verify.core.registry import REGISTRY
    unknown = [i for i in args.ids or () if i not in REGISTRY]
    if unknown:
        raise UsageError(f"--id {unknown[0]}: no such check (`verify list` lists them; an implementation's checks "
                         "exist once --impl names it)")
    chosen = select(args.patterns, args.ids, FAMILIES[args.command][0])
    if not chosen:
        raise UsageError(f"no check of `verify {args.command}` matches {args.patterns or args.ids}; see `verify list`")
    if args.shard:
        m = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if not m or not 1 <= int(m[1]) <= int(m[2]):
            raise UsageError(f"--shard {args.shard}: must be K/N with 1 <= K <= N")
        chosen = shard(chosen, int(m[1]), int(m[2]), seconds)
    return chosen


def _durations(path: str) -> dict[str, float]:
    """Per-check seconds of a --json result (the checks that ran)."""
    from pathmdn_verify.core import results
    return {c["id"]: c["seconds"] for c in results.load(path)["checks"] if c["started"]}


@dataclass
class Plan:
    """A prepared run: the selection and the contexts it runs in (one per seed of --repeat)."""
    args: argparse.Namespace
    command: list[str]
    device: str
    chosen: list[Check]
    contexts: list[Context]
    workers: int
    kernels: bool                   # the selection imports the kernel package
    timeout: float
    durations: dict[str, float] | None
    impls: tuple[str, ...] = ("fla",)     # the implementations whose kernel and layer checks run

    @property
    def seeds(self) -> list[int]:
        return [c.seed for c in self.contexts]


def _validate(args) -> None:
    if args.examples is not None and args.examples < 1:
        raise UsageError(f"--examples {args.examples}: must be at least 1")
    if getattr(args, "repeat", 1) < 1:
        raise UsageError(f"--repeat {args.repeat}: must be at least 1")
    if getattr(args, "time_limit", None) is not None and not args.time_limit > 0:
        raise UsageError(f"--time-limit {args.time_limit}: must be positive")
    if args.check_timeout is not None and not args.check_timeout > 0:
        raise UsageError(f"--check-timeout {args.check_timeout}: must be positive")
    if getattr(args, "save_failing", None) and Path(args.save_failing).exists() and not Path(args.save_failing).is_dir():
        raise UsageError(f"--save-failing {args.save_failing}: not a directory")
    if args.xfails and args.xfails_only:
        raise UsageError("--xfails adds to the built-in list, --xfails-only replaces it: give one of them")
    xfails.chosen(args.xfails or (), args.xfails_only or ())   # a malformed list: one line naming it, exit 2


def implementations(specs: list[str] | None) -> tuple[str, ...]:
    """The implementation names of --impl SPEC... (default: the built-in fla), loaded in this process, and the
    specs passed on to the run's workers ($VERIFY_IMPLS)."""
    from pathmdn_verify.ops.impls import BUILT_IN
    from pathmdn_verify.run import IMPLS_ENV, load_checks, load_impl
    specs = [s for s in specs or [BUILT_IN]]
    load_checks()       # the installed plug-ins, whose names a spec may give
    names = tuple(dict.fromkeys(n for s in specs for n in load_impl(s)))
    os.environ[IMPLS_ENV] = json.dumps([s for s in specs if s != BUILT_IN])
    load_checks()       # the checks of the implementations just loaded
    return names


def prepare(args, command: list[str], selection) -> Plan:
    """Check the options (a usage error before any work), then the selection, its seeds and contexts.
    selection(args, durations) -> the checks to run."""
    from pathmdn_verify.core import results
    from pathmdn_verify.kernels.fla_ops import check_fla_version
    from pathmdn_verify.platform import environment
    from pathmdn_verify.platform.kernel_root import activate
    from pathmdn_verify.run import runner
    _validate(args)
    if args.kernel_root:
        args.kernel_root = activate(args.kernel_root)
    device = environment.resolve_device(args.device)
    if args.configs == "autotune" and device == "cpu":
        raise UsageError("--configs autotune: Triton's timing needs a GPU; on the cpu every config ties (use cover)")
    for path, flag in ((args.json, "--json"), (args.junit, "--junit")):
        results.check_writable(path, flag)
    durations = _durations(args.durations) if getattr(args, "durations", None) else None
    names = implementations(args.impl)
    chosen = [c for c in selection(args, durations) if CheckId.parse(c.id).impl in (None, *names)]
    if not chosen:
        raise UsageError(f"no check of the implementation(s) {', '.join(names)} matches the selection")
    kernels = any(c.id.startswith(KERNEL_PREFIXES) for c in chosen)
    if kernels:
        check_fla_version()
    first = args.seed if getattr(args, "seed_from", None) is None else args.seed_from
    save_failing = None
    if getattr(args, "save_failing", None):
        Path(args.save_failing).mkdir(parents=True, exist_ok=True)
        save_failing = str(Path(args.save_failing).resolve())
    contexts = [Context(device=device, profile=args.profile, seed=s, fp32_dot=args.fp32_dot,
                        kernel_root=args.kernel_root, examples=args.examples, save_failing=save_failing,
                        configs=args.configs, references=args.references)
                for s in range(first, first + getattr(args, "repeat", 1))]
    return Plan(args, command, device, chosen, contexts,
                workers=min(runner.worker_count(args.workers, device), max(1, len(chosen))),   # a worker per check at most
                kernels=kernels, timeout=args.check_timeout or runner.CHECK_TIMEOUT[args.profile], durations=durations,
                impls=names)


class CheckSession:
    """Runs a plan's registered checks in the runner's workers (pathmdn_verify.run.runner.Workers)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.workers = None
        self.cache = verdict_cache(plan)

    def start(self) -> dict:
        """Start the workers, unless the verdict cache holds every check's verdict; what the first one loaded
        (kernel package, interpreter fidelity) for the header, or the kernel package found here."""
        from pathmdn_verify.platform import environment
        from pathmdn_verify.run import cache, runner
        p = self.plan
        try:
            package = environment.kernel_package()
        except ImportError:
            package = None
        root = Path(package["path"]).parent if package else None
        if self.cache is not None and all(cache.cacheable(c.id) and self.cache.get(c.id, ctx, root) is not None
                                          for ctx in p.contexts for c in p.chosen):       # the header a worker gives:
            return {"kernel_package": package if p.kernels else None,        # no package for a kernel-free run
                    "interpreter_fidelity": None, "import_error": None}
        self.workers = runner.Workers(p.workers, p.contexts[0], p.kernels, p.args.debug, cache=self.cache,
                                      run_label=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                      start_timeout=min(runner.START_TIMEOUT, p.timeout))
        return self.workers.wait_ready()

    def run(self, ctx: Context, finished: dict, progress, deadline: float | None) -> None:
        p = self.plan
        if self.workers is None:          # every verdict from the cache: the pool's loop with nothing to start
            from pathmdn_verify.run import runner
            runner.from_cache(p.chosen, ctx, finished, self.cache, progress.done)
            return
        self.workers.run(p.chosen, ctx, finished, p.timeout, deadline, progress.start, progress.done,
                         getattr(p.args, "exitfirst", False), p.durations)

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()

    def report(self, outcomes, console) -> None:
        """What this kind of run adds to the summary (nothing for checks)."""


def verdict_cache(plan: Plan):
    """The run's verdict cache (pathmdn_verify.run.cache), or None under --no-cache."""
    from pathmdn_verify.platform import environment
    from pathmdn_verify.run import cache, xfail_list
    if getattr(plan.args, "no_cache", False):
        return None
    name = environment.describe(plan.device)["device_name"] if plan.device == "cuda" else None
    folder = Path(plan.args.cache_dir) if getattr(plan.args, "cache_dir", None) else cache.default_dir()
    return cache.VerdictCache(folder, xfail_list.device_class(plan.device, name))


def execute(plan: Plan, session) -> int:
    """Run a plan through a session (start, run per context, close, report), with the console, Ctrl-C handling,
    the summary and the result files every check-running command shares; the exit status."""
    from pathmdn_verify.run import runner, terminal
    args = plan.args
    for path in (args.json, args.junit):      # never leave a stale result in place
        if path:
            Path(path).unlink(missing_ok=True)
    console = terminal.make_console()
    started, t0 = time.time(), time.monotonic()
    finished: dict[int, dict] = {ctx.seed: {} for ctx in plan.contexts}
    interrupted, info = None, {}
    listed_before = xfails.use(xfails.chosen(args.xfails or (), args.xfails_only or ()))   # what the runner applies
    with runner.stopped_by_signals():        # the user's handlers come back once the results are written
        try:
            try:
                info = session.start()
                _header(plan, info, console)
                _run_contexts(plan, session, console, finished)
            except runner.Interrupted as exc:
                interrupted = exc.code
            finally:
                session.close()
            runs = {ctx.seed: [finished[ctx.seed].get(i) or runner.not_run(c, ctx, runner.INTERRUPTED)
                               for i, c in enumerate(plan.chosen)] for ctx in plan.contexts}
            return _report(plan, session, runs, info, console, started, time.monotonic() - t0, interrupted)
        finally:
            xfails.use(listed_before)


def _run_contexts(plan: Plan, session, console, finished: dict) -> None:
    """Each context (seed) of the plan in turn, with the progress lines; --exitfirst stops between them."""
    from pathmdn_verify.run import runner, terminal
    args = plan.args
    deadline = None if getattr(args, "time_limit", None) is None else time.monotonic() + args.time_limit
    progress = terminal.Progress(console, len(plan.chosen), args.verbose, args.debug)
    try:
        for n, ctx in enumerate(plan.contexts, 1):
            if len(plan.contexts) > 1:
                console.rule(f"run {n}/{len(plan.contexts)}: seed {ctx.seed}")
            if getattr(args, "exitfirst", False) and runner.any_failed(
                    r for done in finished.values() for r in done.values()):
                finished[ctx.seed] = {i: runner.not_run(c, ctx, runner.EXITFIRST) for i, c in enumerate(plan.chosen)}
                continue
            session.run(ctx, finished[ctx.seed], progress, deadline)
    finally:
        progress.close()


def _header(plan: Plan, info: dict, console) -> None:
    from pathmdn_verify.kernels.fla_import import IMPORT_FIXES, scan_fixes
    from pathmdn_verify.platform import environment
    from pathmdn_verify.run import runner
    args, seeds = plan.args, plan.seeds
    env = environment.versions()
    shard = getattr(args, "shard", None)
    console.print(f"verify {args.command}: {len(plan.chosen)} checks{f' (shard {shard})' if shard else ''}, "
                  f"device={plan.device}, profile={args.profile}, seed{'s' if len(seeds) > 1 else ''}="
                  f"{_span(seeds)}, workers={plan.workers}, torch {env['torch']}, triton {env['triton']}, "
                  f"{environment.describe_kernel_package(info['kernel_package'])}")
    if info["kernel_package"]:      # the declared import fixes this tree calls for (pathmdn_verify.kernels.fla_import)
        info["kernel_package"]["import_fixes"] = scan_fixes(info["kernel_package"]["path"])
        for file, names in info["kernel_package"]["import_fixes"].items():
            console.print(f"import fix for {file}: " + "; ".join(f"{n}: {IMPORT_FIXES[n][0]}" for n in names),
                          highlight=False, soft_wrap=True)
    console.print(xfails.describe(runner.scope(plan.contexts[0], info["kernel_package"])), highlight=False,
                  soft_wrap=True)
    console.print("implementations: " + ", ".join(_dots(name, args.fp32_dot) for name in plan.impls), highlight=False,
                  soft_wrap=True)


def _dots(name: str, run_dot: str) -> str:
    """An implementation and the fp32 dot format its budgets assume."""
    from pathmdn_verify.ops.impls import BUILT_IN, registered
    if name == BUILT_IN:
        return f"{name} (fp32 dots: {run_dot}, --fp32-dot; PyTorch-coded ops: ieee)"
    dots = sorted({i.fp32_dot for i in registered((name,))})
    return f"{name} (fp32 dots: {', '.join(dots)}, declared)"


def _report(plan: Plan, session, runs: dict, info: dict, console, started: float, wall: float,
            interrupted: int | None) -> int:
    """The summary, the JSON and JUnit files; the exit status."""
    from pathmdn_verify.core import results
    from pathmdn_verify.platform import configs, environment
    from pathmdn_verify.run import runner, terminal
    args = plan.args
    outcomes = [r for rs in runs.values() for r in rs]
    terminal.print_summary(outcomes, console, wall, interrupted is not None)
    configs_doc = configs.summary(args.configs, outcomes)     # per kernel: configs run / declared
    asked = args.verbose or any(a == "--configs" or a.startswith("--configs=") for a in plan.command)
    if asked and (line := configs.summary_line(configs_doc)):      # a note only for who asked about configs
        console.print(line, highlight=False, soft_wrap=True)
    if len(runs) > 1:
        terminal.print_repeat_summary(runs, console)
    session.report(outcomes, console)
    environment_doc = {**environment.versions(), **environment.describe(plan.device), "profile": args.profile,
                       "seed": plan.seeds[0], "fp32_dot": args.fp32_dot, "kernel_root": args.kernel_root,
                       "workers": plan.workers, "shard": getattr(args, "shard", None), "check_timeout": plan.timeout,
                       "interpreter_fidelity": info.get("interpreter_fidelity"), "configs": configs_doc,
                       "expected_failures": xfails.scope_json(runner.scope(plan.contexts[0], info.get("kernel_package"))),
                       **({"seeds": plan.seeds} if len(runs) > 1 else {})}
    doc = results.document(outcomes, command=plan.command, toolkit=environment.toolkit(),
                           kernel_package=info.get("kernel_package"), environment=environment_doc,
                           started=started, wall_seconds=wall, interrupted=interrupted is not None)
    if args.json:
        results.write_json(args.json, doc)
    if args.junit:
        results.write_junit(args.junit, doc["checks"], interrupted=interrupted is not None)
    return interrupted or results.exit_status(doc["checks"])


def _span(seeds: list[int]) -> str:
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"
