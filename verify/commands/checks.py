"""The check-running commands (`verify all`, `oracles`, `symbolic`, `kernels`, `layers`: one per check family) and
`verify list`; and what every command that runs checks shares (`run_options`, `options_of`, `execute`: `verify
mutants` reports through them too).

Each command maps its arguments to RunOptions, runs a library Session (pathmdn_verify.run.session) with the console
(header, progress, Ctrl-C) and renders the result (summary, JSON, JUnit, exit status).  Exit status of a run: 0 when nothing failed (expected failures
allowed), 1 when a check failed or errored, 130 / 143 when interrupted by Ctrl-C / SIGTERM, 141 when the reader
of its output went away (`verify all | head`; the results of the checks that finished are still written).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pathmdn_verify.commands import options
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.run import load_checks
from pathmdn_verify.run import xfail_list as xfails
from pathmdn_verify.run.session import RunOptions, Session, implementations

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
                        "record's choice, the CPU for the sequential MDN and GDN recurrences and the MDN oracle checks, "
                        "measured faster there than as many small GPU launches), device (--device) or cpu; the "
                        "kernel always runs on --device, and its verdicts are the same (fixed-order same-dtype "
                        "arithmetic)")
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
    if args.command == "list":
        return _list(args)
    return execute(Session(options_of(args)), args, command)


def options_of(args, prefixes: tuple[str, ...] | None | str = "family") -> RunOptions:
    """The RunOptions of a check-running command's arguments (prefixes: the family's, unless given); the result
    files must be writable (a usage error before any work)."""
    from pathmdn_verify.core import results
    for path, flag in ((args.json, "--json"), (args.junit, "--junit")):
        results.check_writable(path, flag)
    first = args.seed if getattr(args, "seed_from", None) is None else args.seed_from
    if getattr(args, "repeat", 1) < 1:
        raise UsageError(f"--repeat {args.repeat}: must be at least 1")
    return RunOptions(
        prefixes=FAMILIES[args.command][0] if prefixes == "family" else prefixes, patterns=tuple(args.patterns or ()),
        ids=tuple(args.ids or ()), impls=tuple(args.impl or ()), device=args.device, profile=args.profile,
        seeds=tuple(range(first, first + getattr(args, "repeat", 1))), workers=args.workers,
        check_timeout=args.check_timeout, time_limit=getattr(args, "time_limit", None),
        exitfirst=getattr(args, "exitfirst", False), shard=getattr(args, "shard", None),
        durations=getattr(args, "durations", None), fp32_dot=args.fp32_dot, configs=args.configs,
        references=args.references, kernel_root=args.kernel_root, examples=args.examples,
        save_failing=getattr(args, "save_failing", None), xfails=tuple(args.xfails or ()),
        xfails_only=tuple(args.xfails_only or ()), cache=not args.no_cache, cache_dir=args.cache_dir, debug=args.debug)


def _list(args) -> int:
    from pathmdn_verify.core.registry import select
    load_checks()
    names = implementations(tuple(args.impl)) if args.impl else None
    chosen = select(args.patterns, args.ids)
    if names is not None:
        chosen = [c for c in chosen if CheckId.parse(c.id).impl in (None, *names)]
    if not chosen:
        raise UsageError(f"no check id matches {args.patterns or args.ids or 'the selection'}")
    width = max(len(c.id) for c in chosen)
    for c in chosen:
        print(f"{c.id:<{width}}  {c.description}")
    return 0


def execute(session: Session, args, command: list[str], report=None) -> int:
    """Run a session with the console (header, progress, Ctrl-C) and report it (summary, JSON, JUnit); the exit
    status.  report(outcomes, console): what a kind of run adds to the summary (verify mutants: its table)."""
    from pathmdn_verify.run import runner, terminal
    for path in (args.json, args.junit):      # never leave a stale result in place
        if path:
            Path(path).unlink(missing_ok=True)
    running = True
    def reader_gone():      # `verify all | head`: the run stops as an interrupted one, its results written
        if running:
            runner.stop(runner.OUTPUT_GONE)
    console = terminal.make_console(reader_gone)
    progress = terminal.Progress(console, len(session.chosen), args.verbose, args.debug)
    seeds = [ctx.seed for ctx in session.contexts]
    on_context = (lambda n, ctx: console.rule(f"run {n}/{len(seeds)}: seed {ctx.seed}")) if len(seeds) > 1 else None
    with runner.stopped_by_signals():        # the user's handlers come back once the results are written
        try:
            result = session.run(lambda info: _header(session, args, info, console), progress.start, progress.done,
                                 on_context)
        finally:
            running = False
            progress.close()
        return _report(result, args, command, console, report)


def _header(session: Session, args, info: dict, console) -> None:
    from pathmdn_verify.kernels.fla_import import IMPORT_FIXES, scan_fixes
    from pathmdn_verify.platform import bytecode, environment
    seeds = [ctx.seed for ctx in session.contexts]
    env = environment.versions()
    shard = session.options.shard
    console.print(f"verify {args.command}: {len(session.chosen)} checks{f' (shard {shard})' if shard else ''}, "
                  f"device={session.device}, profile={args.profile}, seed{'s' if len(seeds) > 1 else ''}="
                  f"{_span(seeds)}, workers={session.workers}, torch {env['torch']}, triton {env['triton']}, "
                  f"{environment.describe_kernel_package(info['kernel_package'])}")
    if info["kernel_package"]:      # the declared import fixes this tree calls for (pathmdn_verify.kernels.fla_import)
        info["kernel_package"]["import_fixes"] = scan_fixes(info["kernel_package"]["path"])
        for file, names in info["kernel_package"]["import_fixes"].items():
            console.print(f"import fix for {file}: " + "; ".join(f"{n}: {IMPORT_FIXES[n][0]}" for n in names),
                          highlight=False, soft_wrap=True)
    console.print(xfails.describe(session.scope(info["kernel_package"])), highlight=False, soft_wrap=True)
    console.print("implementations: " + ", ".join(_dots(name, args.fp32_dot) for name in session.impls),
                  highlight=False, soft_wrap=True)
    if (line := _cache_line(info)) is not None:
        console.print(line, highlight=False, soft_wrap=True)
    if note := bytecode.note():
        console.print(note, highlight=False, soft_wrap=True)
    if e := session.compile_estimate:
        console.print(f"Triton compilations to make: {e['compilations']} (of the {e['keys']} compile keys these "
                      f"checks used when they last ran here, {e['in_disk_cache']} are in the disk cache"
                      + (f"; {e['unknown']} checks never ran here" if e["unknown"] else "") + ")",
                      highlight=False, soft_wrap=True)


def _cache_line(info: dict) -> str | None:
    """How many verdicts the cache replays; when none, what of the key's run-wide part (toolkit, versions,
    variables, named sources) changed since the last run that kept any there (verdicts.VerdictCache.differences),
    so that a rerun that replays nothing says why."""
    if (cache := info.get("verdict_cache")) is None:
        return None
    line = f"verdict cache {cache['folder']}: {cache['replay']} of {cache['of']} verdicts replay"
    changes = cache["key_changes"]
    if changes:
        shown = ", ".join(changes[:6]) + (f" and {len(changes) - 6} more" if len(changes) > 6 else "")
        line += f"; none does: no run that kept verdicts there had this one's settings; since the last, {shown}"
        if any(c.startswith("variable ") and not c.endswith("declared unkeyed") for c in changes):
            line += (" (a variable that cannot change a verdict, such as a CI's per-run identifier, can be declared: "
                     "VERIFY_CACHE_UNKEYED=NAME,PREFIX*)")
    elif changes == []:
        line += ("; none does, though a run that kept verdicts there had this one's toolkit, versions and variables: "
                 "another profile, seed or option, or files the checks read changed")
    return line


def _dots(name: str, run_dot: str) -> str:
    """An implementation and the fp32 dot format its budgets assume."""
    from pathmdn_verify.ops.impls import BUILT_IN, registered
    if name == BUILT_IN:
        return f"{name} (fp32 dots: {run_dot}, --fp32-dot; PyTorch-coded ops: ieee)"
    dots = sorted({i.fp32_dot for i in registered((name,))})
    return f"{name} (fp32 dots: {', '.join(dots)}, declared)"


def _report(result, args, command: list[str], console, report=None) -> int:
    """The summary, the JSON and JUnit files; the exit status."""
    from pathmdn_verify.core import results
    from pathmdn_verify.platform import configs
    from pathmdn_verify.run import terminal
    outcomes = result.outcomes
    estimate = result.session.compile_estimate
    terminal.print_summary(outcomes, console, result.wall, result.interrupted is not None,
                           estimate["compilations"] if estimate else None)
    asked = args.verbose or any(a == "--configs" or a.startswith("--configs=") for a in command)
    if asked and (line := configs.summary_line(configs.summary(args.configs, outcomes))):   # for who asked
        console.print(line, highlight=False, soft_wrap=True)
    if len(result.runs) > 1:
        terminal.print_repeat_summary(result.runs, console)
    if report is not None:
        report(outcomes, console)
    doc = result.document(command)
    if args.json:
        results.write_json(args.json, doc)
    if args.junit:
        results.write_junit(args.junit, doc["checks"], interrupted=result.interrupted is not None)
    return result.interrupted or results.exit_status(doc["checks"])


def _span(seeds: list[int]) -> str:
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"
