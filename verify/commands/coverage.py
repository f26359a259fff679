"""`verify coverage`: which code of the kernel package the selected checks execute, per op.

Under the CPU interpreter a @triton.jit kernel runs as Python, so coverage.py (branch coverage) sees its
lines like a launcher's.  Each op's checks run under their own measurement, restricted to the kernel
package; the report gives, per op, the line coverage of its own files' function bodies (kernels and
launchers: statements executed / statements), the kernels (@triton.jit functions) that never ran, and the
launcher branches (arcs of the non-jit functions) never taken, plus coverage.py's own HTML report per op
(--html DIR).  An op's own files are those of its folders in fla/ops (its record's `package`); shared helpers
(fla/ops/utils, fla/modules) count for no op but are in the HTML report.  Code an op's checks leave
unreached on purpose is listed in its op record's `not_reached` (verify/ops/) with the reason, and reported as such rather than as missing.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId, op_of
from pathmdn_verify.commands import options


def add_parser(sub) -> None:
    p = sub.add_parser("coverage", help="which kernels, kernel lines and launcher branches of the kernel package "
                                        "the selected checks reach, per op (CPU interpreter)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.select(p, default=" (default: every kernel check)")
    options.profile(p)
    options.seed(p)
    options.examples(p)
    options.kernel_root(p)
    p.add_argument("--html", metavar="DIR", help="write coverage.py's HTML report, one folder per op")
    options.json_out(p, "the per-op result")
    options.debug(p)


def run(args) -> int:
    from rich.console import Console

    from pathmdn_verify.core import results
    from pathmdn_verify.platform import configs
    from pathmdn_verify.platform.mutation import fla_package_dir
    from pathmdn_verify.run import code_coverage
    results.check_writable(args.json, "--json")
    if args.html and Path(args.html).exists() and not Path(args.html).is_dir():
        raise UsageError(f"--html {args.html}: not a directory")
    chosen = _chosen(args)
    if args.kernel_root:      # the checks run in this process (code_coverage): the tree first on its import path
        from pathmdn_verify.platform.kernel_root import activate
        args.kernel_root = activate(args.kernel_root)
    console = Console(highlight=False)
    if not console.is_terminal:     # logs and pipes: wide enough that tables and file:line items stay whole
        console.width = 200
    package = fla_package_dir().resolve()
    console.print(f"verify coverage: {len(chosen)} checks on {package}, profile={args.profile}, seed={args.seed}")
    result, outcomes = code_coverage.measure(
        chosen, args.profile, args.seed, args.kernel_root, args.examples, args.html, args.debug,
        lambda o: console.print(f"  {o.result.status:5} {o.id} ({o.seconds:.1f}s)", highlight=False))
    run_wide = configs.summary("cover", outcomes)
    _render(result, run_wide, args.profile, console)
    counts = results.summary_counts(outcomes)
    if args.json:
        results.write_text_atomic(args.json, json.dumps({"package": str(package), "profile": args.profile,
                                                        "seed": args.seed, "checks": counts, "ops": result,
                                                        "configs": run_wide}, indent=2))
    if args.html:
        console.print(f"HTML: {Path(args.html) / '<op>' / 'index.html'}")
    if counts["fail"] or counts["error"]:
        console.print(f"[red]{counts['fail']} check(s) failed, {counts['error']} errored[/] (coverage still reported)")
    return 1 if counts["fail"] or counts["error"] else 0


def _chosen(args) -> list:
    """The selected kernel checks of fla's ops that have a package of their own."""
    from pathmdn_verify.core.registry import select
    from pathmdn_verify.run import load_checks
    from pathmdn_verify.run.code_coverage import families
    load_checks()
    others = sorted({CheckId.parse(i).impl for i in args.ids or () if CheckId.parse(i).impl not in (None, "fla")})
    if others:
        raise UsageError(f"verify coverage: not supported for implementation {', '.join(others)} (it measures the "
                         "lines of the kernel package fla)")
    chosen = [c for c in select(args.patterns, args.ids, ("kernel.fla.",)) if op_of(c.id) in families()]
    if not chosen:
        raise UsageError(f"no kernel check of an op in {sorted(families())} matches {args.patterns or args.ids}")
    return chosen


def _render(result: dict, run_wide: dict, profile: str, console) -> None:
    """The per-op table, what each op left unreached, the configs and boundary levels reached."""
    from rich.table import Table
    table = Table(title=f"kernel coverage per op ({profile} profile, CPU interpreter)")
    for col in ("op", "checks", "lines run", "kernels run", "launcher branches never taken", "lines excluded"):
        table.add_column(col)
    for op, r in result.items():
        pct = "-" if r["percent"] is None else f"{r['executed']}/{r['statements']} ({r['percent']:.0f}%)"
        table.add_row(op, str(len(r["checks"])), pct, f"{r['kernels'] - len(r['kernels_never_ran'])}/{r['kernels']}",
                      str(len(r["launcher_branches_never_taken"])), str(r["excluded"]))
    console.print(table)
    for op, r in result.items():
        for what in ("kernels_never_ran", "launcher_branches_never_taken", "deliberately_not_reached"):
            if r[what]:
                console.print(f"[yellow]{op}: {what.replace('_', ' ')}:[/]")
                for item in r[what]:
                    console.print(f"  {item}", highlight=False, soft_wrap=True)
    for kernel, v in run_wide["kernels"].items():      # a helper kernel (fla/ops/utils) several ops launch
        if sum(kernel in r["configs"]["kernels"] for r in result.values()) > 1:
            unrun = f" (unrun: {v['unrun']})" if v["unrun"] else ""
            console.print(f"all selected ops: tile configs run {v['ran']} of {kernel}{unrun}", highlight=False)
    for op, r in result.items():
        for kernel, v in r["configs"]["kernels"].items():
            unrun = f" (unrun: {v['unrun']})" if v["unrun"] else ""
            console.print(f"{op}: tile configs run {v['ran']} of {kernel}{unrun}", highlight=False)
        for name, passes in r["structure"].items():
            for pass_, fs in passes.items():
                line = "; ".join(f"{f} {len(v['reached'])}/{len(v['declared'])}" for f, v in fs.items())
                console.print(f"{op}: {name} {pass_} boundaries reached: {line}", highlight=False)
                for f, v in fs.items():
                    if v["missing"]:
                        console.print(f"[yellow]  not reached: {f} = {', '.join(v['missing'])}[/]", highlight=False)
