"""The check-running commands (`verify all`, `oracles`, `symbolic`, `kernels`, `mutants`: one per check family)
and `verify list`.

Exit status of a run: 0 when nothing failed (expected failures allowed), 1 when a check failed or errored,
130 / 143 when interrupted by Ctrl-C / SIGTERM (the results of the checks that finished are still written).
"""
from __future__ import annotations

import argparse
import re
import signal
import time
from pathlib import Path

from pathmdn_verify.kernels.fla_ops import check_fla_version
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import K_HELP, PROFILES
from pathmdn_verify.run import xfail_list as xfails

# subcommand -> (id prefixes it runs, help)
FAMILIES = {
    "all": (None, "run every registered check family (what CI runs) except the mutation self-test, whose "
                  "mutant.* checks run with `verify mutants` or when named by --id or a -k pattern containing 'mutant'"),
    "oracles": (("oracle.",), "float64 oracles against mpmath and against each other, with negative controls"),
    "symbolic": (("symbolic.",), "sympy proofs of the PaTH and MDN identities, with negative controls"),
    "kernels": (("env.interpreter.", "kernel."), "production Triton kernels against the float64 oracles"),
    "layers": (("layer.",), "the model layers users call (flash-linear-attention's fla.layers: PaTH, FoX, MDN, "
                            "GDN) against float64 literals of the same layers"),
    "mutants": (("mutant.",), "mutation self-test: planted bugs in a copy of the kernels, each must turn one of "
                              "its killer checks red (minutes)"),
}
# `verify all` runs checks under this prefix only when named: by --id, or by a -k pattern containing "mutant".
OPT_IN = "mutant."



def add_parser(sub) -> None:
    """The check-running commands and `verify list`."""
    for name, (_, help_) in FAMILIES.items():
        _common(sub.add_parser(name, help=help_, description=help_))
    lst = sub.add_parser("list", help="print every check id with its one-line description",
                         description="Print every registered check id with its one-line description.")
    lst.add_argument("-k", dest="patterns", action="append", metavar="EXPR", help=K_HELP)
    lst.add_argument("--debug", action="store_true", help="print a traceback on a usage or environment error")


def run(args, command: list[str]) -> int:
    
    from pathmdn_verify.run import load_checks
    load_checks()
    if args.command == "list":
        return _list(args)
    return _run(args, command)


def _list(args) -> int:
    from pathmdn_verify.core.registry import select
    chosen = select(args.patterns)
    if not chosen:
        raise UsageError(f"no check id matches {args.patterns}")
    width = max(len(c.id) for c in chosen)
    for c in chosen:
        print(f"{c.id:<{width}}  {c.description}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-k", dest="patterns", action="append", metavar="EXPR", help=K_HELP)
    p.add_argument("--id", dest="ids", action="append", metavar="ID", help="select one check by exact id; repeatable")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where kernels and oracles run (default: cuda when available, else cpu)")
    p.add_argument("--profile", choices=PROFILES, default="ci",
                   help="quick: seconds; ci: the CI budget on CPU; full: GPU sizes (default ci)")
    p.add_argument("--seed", type=int, default=0, help="seed for every random draw (default 0)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run the selected checks N times with seeds S, S+1, ... and report per check how many "
                        "runs failed (exit 1 if any failed outside the expected failures)")
    p.add_argument("--seed-from", type=int, metavar="S", help="first seed of --repeat (default: --seed)")
    p.add_argument("--workers", default="auto", metavar="N|auto",
                   help="worker processes running checks in parallel (default auto: up to 16 per visible GPU and one per core, "
                        "each pinned to one, on cuda; one per available core on the CPU). Every check runs in a "
                        "worker: one that "
                        "crashes, hangs or hits a fatal CUDA error is replaced and the run goes on")
    p.add_argument("--check-timeout", type=float, metavar="SECONDS",
                   help="a check running longer fails with kind timeout and its worker is replaced "
                        "(default: quick 300, ci 600, full 1800)")
    p.add_argument("--shard", metavar="K/N", help="run shard K of N (1-based) of the selection: deterministic and "
                                                  "balanced by --durations, else by id; merge with `verify merge`")
    p.add_argument("--durations", metavar="FILE",
                   help="a previous --json result: checks start longest first by its per-check seconds (default: "
                        "on a GPU layer generation checks first, then kernel backward checks, the other kernel, "
                        "layer and remaining checks; "
                        "on the CPU the selection's order), and they balance --shard")
    p.add_argument("--json", metavar="PATH", help="write results as JSON (format: verify/core/results.schema.json)")
    p.add_argument("--junit", metavar="PATH", help="write results as JUnit XML")
    p.add_argument("--save-failing", metavar="DIR",
                   help="save each failing kernel check's minimal example in DIR as a file `verify compare` accepts")
    p.add_argument("--fp32-dot", choices=("tf32", "ieee"), default="tf32",
                   help="CPU interpreter: emulate the GPU's TF32 fp32 dots (default) or run them in IEEE fp32")
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
    p.add_argument("--kernel-root", metavar="PATH",
                   help="import the kernel package (fla) from this checkout instead of the installed one")
    p.add_argument("--xfails", metavar="FILE",
                   help="read the expected failures from FILE instead of the built-in list "
                        "(verify/run/expected_failures.toml, whose header documents the format); a malformed "
                        "FILE is exit status 2")
    p.add_argument("--examples", type=int, metavar="N",
                   help="hypothesis examples per kernel check, after its boundary and regression cases "
                        "(default: quick 2, ci 2, full 5)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="start no check after SECONDS; the ones left are skipped (kind not_run) and listed, so "
                        "a time-boxed run still writes its JSON")
    p.add_argument("-x", "--exitfirst", action="store_true",
                   help="start no check after one failed or errored (an expected failure does not stop the run); "
                        "the ones left are skipped (kind not_run) and listed")
    p.add_argument("-v", "--verbose", action="store_true", help="print every check's message, not only failures'")
    p.add_argument("--debug", action="store_true",
                   help="print tracebacks (of a usage error too, and a failing check's in full) and the third-party "
                        "warnings the toolkit filters (e.g. fla's 'roll back to CPU')")


def _selection(args, seconds: dict[str, float] | None) -> list:
    from pathmdn_verify.core.registry import select
    from pathmdn_verify.run.runner import shard
    chosen = select(args.patterns, args.ids, FAMILIES[args.command][0])
    if args.command == "all":
        chosen = [c for c in chosen if not c.id.startswith(OPT_IN) or c.id in (args.ids or ())
                  or any("mutant" in p.lower() for p in args.patterns or ())]
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


def _validate(args) -> None:
    if args.examples is not None and args.examples < 1:
        raise UsageError(f"--examples {args.examples}: must be at least 1")
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: must be at least 1")
    if args.time_limit is not None and not args.time_limit > 0:
        raise UsageError(f"--time-limit {args.time_limit}: must be positive")
    if args.check_timeout is not None and not args.check_timeout > 0:
        raise UsageError(f"--check-timeout {args.check_timeout}: must be positive")
    if args.save_failing and Path(args.save_failing).exists() and not Path(args.save_failing).is_dir():
        raise UsageError(f"--save-failing {args.save_failing}: not a directory")
    if args.xfails:
        xfails.load(args.xfails)      # a malformed list: one line naming the file and the problem, exit 2


def _interrupt(signum, frame):
    """The first SIGINT / SIGTERM stops the run; later ones are ignored until the results are written (GNU
    timeout signals the command and then its process group: two TERMs at once, and the second, arriving
    after the first's handler, used to kill the run before it wrote its JSON)."""
    from pathmdn_verify.run.runner import Interrupted
    if _stopping:          # a second signal that arrived before the first handler ignored them: already stopping
        return
    _stopping.append(signum)
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(128 + signum)


_stopping: list[int] = []       # the signal that stopped this run (the handler raises once per process)


def _run(args, command: list[str]) -> int:
    from pathmdn_verify.kernels.fla_import import IMPORT_FIXES, scan_fixes
    from pathmdn_verify.core import results
    from pathmdn_verify.platform import configs, environment
    from pathmdn_verify.platform.kernel_root import activate
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.run import runner, terminal

    _validate(args)
    if args.kernel_root:
        args.kernel_root = activate(args.kernel_root)
    device = environment.resolve_device(args.device)
    if args.configs == "autotune" and device == "cpu":
        raise UsageError("--configs autotune: Triton's timing needs a GPU; on the cpu every config ties (use cover)")
    for path, flag in ((args.json, "--json"), (args.junit, "--junit")):
        results.check_writable(path, flag)
    seconds = _durations(args.durations) if args.durations else None    # --shard's balance, runner.start_order
    chosen = _selection(args, seconds)
    kernels = any(c.id.startswith(("kernel.", "layer.", "env.interpreter.", OPT_IN)) for c in chosen)
    if kernels:
        check_fla_version()
    n_workers = min(runner.worker_count(args.workers, device), max(1, len(chosen)))   # a worker per check at most
    first = args.seed if args.seed_from is None else args.seed_from
    seeds = list(range(first, first + args.repeat))
    save_failing = None
    if args.save_failing:
        Path(args.save_failing).mkdir(parents=True, exist_ok=True)
        save_failing = str(Path(args.save_failing).resolve())
    contexts = [Context(device=device, profile=args.profile, seed=s, fp32_dot=args.fp32_dot,
                        kernel_root=args.kernel_root, examples=args.examples, save_failing=save_failing,
                        configs=args.configs, references=args.references)
                for s in seeds]
    timeout = args.check_timeout or runner.CHECK_TIMEOUT[args.profile]
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    for path in (args.json, args.junit):      # never leave a stale result in place
        if path:
            Path(path).unlink(missing_ok=True)
    console = terminal.make_console()
    started, t0 = time.time(), time.monotonic()
    finished: dict[int, dict] = {s: {} for s in seeds}
    interrupted = None
    _stopping.clear()
    handlers = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    listed_before = xfails.use(args.xfails)     # --xfails FILE: the list the runner applies and describes
    try:     # the user's handlers come back once the results are written
        workers = None
        info = {}
        try:
            workers = runner.Workers(n_workers, contexts[0], kernels, args.debug)
            info = workers.wait_ready()
            env = environment.versions()
            console.print(f"verify {args.command}: {len(chosen)} checks{f' (shard {args.shard})' if args.shard else ''}, "
                          f"device={device}, profile={args.profile}, seed{'s' if len(seeds) > 1 else ''}="
                          f"{_span(seeds)}, workers={n_workers}, torch {env['torch']}, triton {env['triton']}, "
                          f"{environment.describe_kernel_package(info['kernel_package'])}")
            if info["kernel_package"]:      # the declared import fixes this tree calls for (pathmdn_verify.kernels.fla_import)
                info["kernel_package"]["import_fixes"] = scan_fixes(info["kernel_package"]["path"])
                for file, names in info["kernel_package"]["import_fixes"].items():
                    console.print(f"import fix for {file}: " + "; ".join(f"{n}: {IMPORT_FIXES[n][0]}" for n in names),
                                  highlight=False, soft_wrap=True)
            console.print(xfails.describe(runner.scope(contexts[0], info["kernel_package"])), highlight=False,
                          soft_wrap=True)
            progress = terminal.Progress(console, len(chosen), args.verbose, args.debug)
            try:
                for n, ctx in enumerate(contexts, 1):
                    if len(seeds) > 1:
                        console.rule(f"run {n}/{len(seeds)}: seed {ctx.seed}")
                    if args.exitfirst and runner.any_failed(r for done in finished.values() for r in done.values()):
                        finished[ctx.seed] = {i: runner.not_run(c, ctx, runner.EXITFIRST) for i, c in enumerate(chosen)}
                        continue
                    workers.run(chosen, ctx, finished[ctx.seed], timeout, deadline, progress.start, progress.done,
                                args.exitfirst, seconds)
            finally:
                progress.close()
        except runner.Interrupted as exc:
            interrupted = exc.code
        finally:
            if workers is not None:
                workers.close()
        runs = {ctx.seed: [finished[ctx.seed].get(i) or runner.not_run(c, ctx, runner.INTERRUPTED)
                           for i, c in enumerate(chosen)] for ctx in contexts}
        outcomes = [r for rs in runs.values() for r in rs]
        wall = time.monotonic() - t0
        terminal.print_summary(outcomes, console, wall, interrupted is not None)
        configs_doc = configs.summary(args.configs, outcomes)     # per kernel: configs run / declared
        if line := configs.summary_line(configs_doc):
            console.print(line, highlight=False, soft_wrap=True)
        if len(seeds) > 1:
            terminal.print_repeat_summary(runs, console)
        if args.command == "mutants":
            from pathmdn_verify.checks.mutants import table
            console.print(table(outcomes))
        environment_doc = {**environment.versions(), **environment.describe(device), "profile": args.profile,
                           "seed": contexts[0].seed, "fp32_dot": args.fp32_dot, "kernel_root": args.kernel_root,
                           "workers": n_workers, "shard": args.shard, "check_timeout": timeout,
                           "interpreter_fidelity": info.get("interpreter_fidelity"), "configs": configs_doc,
                           "expected_failures": xfails.scope_json(runner.scope(contexts[0], info.get("kernel_package"))),
                           **({"seeds": seeds} if len(seeds) > 1 else {})}
        doc = results.document(outcomes, command=command, toolkit=environment.toolkit(),
                               kernel_package=info.get("kernel_package"), environment=environment_doc,
                               started=started, wall_seconds=wall, interrupted=interrupted is not None)
        if args.json:
            results.write_json(args.json, doc)
        if args.junit:
            results.write_junit(args.junit, doc["checks"], interrupted=interrupted is not None)
        return interrupted or results.exit_status(doc["checks"])
    finally:
        xfails.use(listed_before)
        for s, h in handlers.items():
            signal.signal(s, h)


def _span(seeds: list[int]) -> str:
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"
