"""The `verify` command: one entry point, one subcommand per check family.

Exit status: 0 when nothing failed (expected failures allowed), 1 when a check failed or errored,
2 for usage or environment errors (one line on stderr; a traceback only with --debug).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from kernels.fla_ops import KernelUnavailable, check_fla_version
from verify import bisect, compare, coverage
from verify.errors import UsageError
from verify.registry import PROFILES

# subcommand -> (id prefixes it runs, help)
FAMILIES = {
    "all": (None, "run every registered check family (what CI runs) except the mutation self-test, whose "
                  "mutant.* checks run with `verify mutants` or when named by --id or a -k pattern containing 'mutant'"),
    "oracles": (("oracle.",), "float64 oracles against mpmath and against each other, with negative controls"),
    "symbolic": (("symbolic.",), "sympy proofs of the PaTH and MDN identities, with negative controls"),
    "kernels": (("env.interpreter.", "kernel."), "production Triton kernels against the float64 oracles"),
    "mutants": (("mutant.",), "mutation self-test: planted bugs in a copy of the kernels, each must turn one of "
                              "its killer checks red (minutes)"),
}
# `verify all` runs checks under this prefix only when named: by --id, or by a -k pattern containing "mutant".
OPT_IN = "mutant."

EPILOG = """examples:
  verify all                          every check, ci profile, cuda if available else cpu
  verify oracles -k mdn --json out.json
  verify kernels --profile quick -k 'kernel.fla.path_attn.*'
  verify list -k spectra
  verify mutants --json mutants.json  every planted bug must be caught (mutant.* checks; `all` skips them
                                      unless named with --id or a -k pattern containing "mutant")
  verify kernels --profile quick --repeat 20 --seed-from 1      false-alarm hunt over 20 fresh seeds
  verify compare --op path_attn --inputs failing.pt             a repro on your own saved tensors
exit status: 0 nothing failed (expected failures allowed), 1 a check failed, 2 usage/environment error"""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-k", dest="patterns", action="append", metavar="PATTERN",
                   help="select checks whose id contains PATTERN (glob if it has * ? [); repeatable")
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
    p.add_argument("--json", metavar="PATH", help="write results as JSON")
    p.add_argument("--junit", metavar="PATH", help="write results as JUnit XML")
    p.add_argument("--fp32-dot", choices=("tf32", "ieee"), default="tf32",
                   help="CPU interpreter: emulate the GPU's TF32 fp32 dots (default) or run them in IEEE fp32")
    p.add_argument("--kernel-root", metavar="PATH",
                   help="import the kernel package (fla) from this checkout, in a fresh subprocess")
    p.add_argument("--examples", type=int, metavar="N",
                   help="hypothesis examples per kernel check (default: quick 2, ci 3, full 5)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="start no check after SECONDS; the ones left are recorded as skipped ('not run: time "
                        "limit') and listed, so a time-boxed run still writes its JSON")
    p.add_argument("--debug", action="store_true", help="print tracebacks")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verify", description=__doc__.splitlines()[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (_, help_) in FAMILIES.items():
        _common(sub.add_parser(name, help=help_, description=help_))
    compare.add_parser(sub)
    bisect.add_parser(sub)
    coverage.add_parser(sub)
    lst = sub.add_parser("list", help="print every check id with its one-line description")
    lst.add_argument("-k", dest="patterns", action="append", metavar="PATTERN")
    lst.add_argument("--debug", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except (UsageError, KernelUnavailable) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"verify: error: {exc}", file=sys.stderr)
        return 2


def _dispatch(args) -> int:
    from verify import checks
    from verify.registry import REGISTRY, select
    if args.command == "compare":
        return compare.run(args)
    if args.command == "bisect":
        return bisect.run(args)
    if args.command == "coverage":
        return coverage.run(args)
    checks.load_all()
    if args.command == "list":
        chosen = select(args.patterns)
        if not chosen:
            raise UsageError(f"no check id matches {args.patterns}")
        width = max(len(c.id) for c in chosen)
        for c in chosen:
            print(f"{c.id:<{width}}  {c.description}")
        return 0
    return _run(args, FAMILIES[args.command][0], REGISTRY, select)


def _run(args, prefixes, REGISTRY, select) -> int:
    from rich.console import Console

    from verify import environment, runner
    from verify.registry import Context

    if args.kernel_root and os.environ.get("VERIFY_KERNEL_ROOT_CHILD") != args.kernel_root:
        return _rerun_with_kernel_root(args)
    device = environment.resolve_device(args.device)
    runner.check_writable(args.json, "--json")
    runner.check_writable(args.junit, "--junit")
    chosen = select(args.patterns, args.ids, prefixes)
    if args.command == "all":
        chosen = [c for c in chosen if not c.id.startswith(OPT_IN) or c.id in (args.ids or ())
                  or any("mutant" in p for p in args.patterns or ())]
    if not chosen:
        what = args.patterns or args.ids
        raise UsageError(f"no check of `verify {args.command}` matches {what}; see `verify list`")
    if args.examples is not None and args.examples < 1:
        raise UsageError(f"--examples {args.examples}: must be at least 1")
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: must be at least 1")
    if args.time_limit is not None and not args.time_limit > 0:
        raise UsageError(f"--time-limit {args.time_limit}: must be positive")
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    if any(c.id.startswith(("kernel.", OPT_IN)) for c in chosen):
        check_fla_version()
    first = args.seed if args.seed_from is None else args.seed_from
    seeds = list(range(first, first + args.repeat))
    console = Console(highlight=False)
    if not console.is_terminal:     # logs and pipes: wide enough that tables keep check ids whole
        console.width = 200
    env = environment.versions()
    console.print(f"verify {args.command}: {len(chosen)} checks, device={device}, profile={args.profile}, "
                  f"seed{'s' if len(seeds) > 1 else ''}={_span(seeds)}, torch {env['torch']}, "
                  f"triton {env['triton']}, fla {env['fla']}")
    runs = {}
    for n, seed in enumerate(seeds, 1):
        ctx = Context(device=device, profile=args.profile, seed=seed, fp32_dot=args.fp32_dot,
                      kernel_root=args.kernel_root, examples=args.examples)
        if len(seeds) > 1:
            console.rule(f"run {n}/{len(seeds)}: seed {seed}")
        runs[seed] = runner.run_checks(chosen, ctx, console, args.debug, deadline)
    records = [r for rs in runs.values() for r in rs]
    runner.print_summary(records, console)
    if len(seeds) > 1:
        runner.print_repeat_summary(runs, console)
    if args.command == "mutants":
        from verify.checks.mutants import table
        console.print(table(records))
    if args.json:
        runner.write_json(args.json, records, ctx, seeds if len(seeds) > 1 else None)
    if args.junit:
        runner.write_junit(args.junit, records)
    counts = runner.summary_counts(records)
    return 1 if counts["fail"] or counts["error"] else 0


def _span(seeds: list[int]) -> str:
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"


def _rerun_with_kernel_root(args) -> int:
    """Re-execute this command in a fresh interpreter with the kernel checkout first on sys.path."""
    from verify.kernel_root import validate_kernel_root
    root = validate_kernel_root(args.kernel_root)
    env = dict(os.environ, VERIFY_KERNEL_ROOT_CHILD=root,
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    argv = [a if a != args.kernel_root else root for a in sys.argv[1:]]
    return subprocess.call([sys.executable, "-m", "verify", *argv], env=env)
