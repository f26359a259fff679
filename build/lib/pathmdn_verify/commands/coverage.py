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
import ast
import json
import os
import re
import tempfile
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId, op_of
from pathmdn_verify.commands import options


def structure_reached(records, profile: str) -> dict:
    """op -> pass -> factor -> declared / reached / missing levels (pathmdn_verify.core.boundaries.reached), from the
    cases each searched check of the records evaluated (details["cases"])."""
    from pathmdn_verify import ops
    from pathmdn_verify.core import boundaries, examples
    by: dict[tuple[str, str], list] = {}
    for r in records:
        cid = CheckId.parse(r.id)
        if cid.searched and ops.OPS[cid.op].structure is not None:
            case_type = type(ops.OPS[cid.op].sample_case)
            by.setdefault((cid.op, cid.pass_), []).extend(
                examples.case_from_label(case_type, lb) for lb in r.result.details.get("cases", []))
    out: dict = {}
    for (name, pass_), cases in by.items():
        out.setdefault(name, {})[pass_] = boundaries.reached(ops.OPS[name], pass_, profile, cases)
    return out


def families(names: set[str] | None = None) -> dict[str, tuple[str, tuple[str, ...], dict]]:
    """Check-id op -> (family label, folders of the kernel package that are its own code, the lines its
    records exclude), from the op records' `package`: the ops (of `names`, default all) sharing a package are
    one family, named by their names' common prefix (mdn_chunk16 ... mdn_recurrent -> mdn; gdn_chunk,
    gdn_recurrent -> gdn), or each by its own name when they share none."""
    from pathmdn_verify.ops import OPS
    by_package: dict[tuple, list] = {}
    for op in OPS.values():
        if op.package:
            by_package.setdefault(op.package, []).append(op)
    out = {}
    for package, group in by_package.items():
        prefix = os.path.commonprefix([op.name for op in group]).rstrip("_")
        label = lambda op: prefix if len(prefix) >= 3 else op.name      # noqa: E731 (no shared prefix: the op's name)
        dirs = tuple(m.split(".", 1)[1].replace(".", "/") for m in package)
        for op in group:
            if names is None or op.name in names:
                excluded = {k: v for o in group if label(o) == label(op) for k, v in o.not_reached.items()}
                out[op.name] = (label(op), dirs, excluded)
    return out


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


def kernels_and_launchers(path: Path) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """{qualified name: (first, last line of its body)} of the @triton.jit functions and of the others (the
    def line runs at import, the body only when called)."""
    kernels, others = {}, {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                jit = any("jit" in ast.unparse(d) for d in child.decorator_list)
                (kernels if jit else others)[name] = (child.body[0].lineno, child.end_lineno)   # the body only
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
    visit(ast.parse(path.read_text()), "")
    return kernels, others


def analyse(report: dict, package: Path, dirs: tuple[str, ...], excluded: dict | None = None) -> dict:
    """Per op, from coverage.py's JSON report: coverage of the function bodies of its own files (what runs
    when the op is called; module-level lines run at import, possibly before the measurement started),
    the kernels that never ran, and the launcher branches never taken (file:line->target; a negative
    target is a function exit).  Files none of whose functions ran and that hold no kernel (fla's
    reference code, naive.py, for PaTH) are left out.  excluded: the op records' not_reached entries (the report
    was made with them), listed per matching line with their reason."""
    files, never_ran, untaken, deliberate = {}, [], [], []
    for name, f in report["files"].items():
        rel = Path(name).resolve().relative_to(package).as_posix()
        if not rel.startswith(tuple(d + "/" for d in dirs)):
            continue
        kernels, launchers = kernels_and_launchers(package / rel)
        body = {n for lo, hi in [*kernels.values(), *launchers.values()] for n in range(lo, hi + 1)}
        skipped = set(f.get("excluded_lines", []))      # a kernel its record excludes is listed there, not here
        kernels = {k: span for k, span in kernels.items() if not set(range(span[0], span[1] + 1)) <= skipped}
        ran = set(f["executed_lines"])
        if not kernels and not ran & body:
            continue
        missing = sorted(set(f["missing_lines"]) & body)
        files[rel] = {"statements": len((ran | set(missing)) & body), "executed": len(ran & body),
                      "missing_lines": missing, "excluded_lines": sorted(set(f.get("excluded_lines", [])) & body),
                      "kernels": len(kernels)}
        text = (package / rel).read_text()
        deliberate += [f"{rel}:{n}: {why}" for pattern, (_, why) in (excluded or {}).items()
                       for m in re.finditer(pattern, text, re.MULTILINE)
                       if (n := text.count("\n", 0, m.start()) + 1) in body]
        never_ran += [f"{rel}:{k}" for k, (lo, hi) in kernels.items() if not ran & set(range(lo, hi + 1))]
        for a, b in f.get("missing_branches", []):
            owner = [n for n, (lo, hi) in launchers.items() if lo <= a <= hi]
            if owner and a in ran:
                untaken.append(f"{rel}:{a}->{b} in {max(owner, key=len)}")
    statements = sum(x["statements"] for x in files.values())
    executed = sum(x["executed"] for x in files.values())
    return {"files": files, "statements": statements, "executed": executed,
            "percent": 100.0 * executed / statements if statements else None,
            "kernels": sum(x["kernels"] for x in files.values()), "kernels_never_ran": never_ran,
            "launcher_branches_never_taken": untaken,
            "excluded": sum(len(x["excluded_lines"]) for x in files.values()), "deliberately_not_reached": deliberate}


def run(args) -> int:
    if args.kernel_root:
        from pathmdn_verify.platform.kernel_root import activate
        args.kernel_root = activate(args.kernel_root)
    import coverage
    from rich.console import Console
    from rich.table import Table

    from pathmdn_verify.core import results
    from pathmdn_verify.platform import configs
    from pathmdn_verify.platform.mutation import fla_package_dir
    from pathmdn_verify.core.registry import Context, select
    from pathmdn_verify.run import runner
    from pathmdn_verify.run import xfail_list
    from pathmdn_verify.run import load_checks
    results.check_writable(args.json, "--json")
    if args.html and Path(args.html).exists() and not Path(args.html).is_dir():
        raise UsageError(f"--html {args.html}: not a directory")
    load_checks()
    others = sorted({CheckId.parse(i).impl for i in args.ids or () if CheckId.parse(i).impl not in (None, "fla")})
    if others:
        raise UsageError(f"verify coverage: not supported for implementation {', '.join(others)} (it measures the "
                         "lines of the kernel package fla)")
    chosen = [c for c in select(args.patterns, args.ids, ("kernel.fla.",)) if op_of(c.id) in families()]
    if not chosen:
        raise UsageError(f"no kernel check of an op in {sorted(families())} matches {args.patterns or args.ids}")
    family = families({op_of(c.id) for c in chosen})
    package = fla_package_dir().resolve()
    console = Console(highlight=False)
    if not console.is_terminal:     # logs and pipes: wide enough that tables and file:line items stay whole
        console.width = 200
    ctx = Context(device="cpu", profile=args.profile, seed=args.seed, kernel_root=args.kernel_root,
                  examples=args.examples)
    scope = xfail_list.current_scope("cpu", args.profile)
    groups: dict[str, list] = {}
    for c in chosen:
        groups.setdefault(family[op_of(c.id)][0], []).append(c)
    console.print(f"verify coverage: {len(chosen)} checks on {package}, profile={args.profile}, seed={args.seed}")
    result, records = {}, []
    for op, op_checks in groups.items():
        cov = coverage.Coverage(source=[str(package)], branch=True, data_file=None, config_file=False)
        _, dirs, excluded = family[op_of(op_checks[0].id)]
        for pattern, (which, _) in excluded.items():
            cov.exclude(pattern, which=which)
        cov.start()
        try:
            for chk in op_checks:
                rec = runner.run_one(chk, ctx, scope, args.debug)
                records.append(rec)
                console.print(f"  {rec.result.status:5} {chk.id} ({rec.seconds:.1f}s)", highlight=False)
        finally:
            cov.stop()
        include = [f"{package}/{d}/*" for d in dirs]
        with tempfile.TemporaryDirectory() as tmp:
            cov.json_report(outfile=str(Path(tmp) / "c.json"), include=include)
            report = json.loads((Path(tmp) / "c.json").read_text())
        if args.html:     # the op's own files and the shared helpers it ran
            cov.html_report(directory=str(Path(args.html) / op), title=f"verify coverage: {op}",
                            include=include + [f"{package}/ops/utils/*", f"{package}/modules/*"], skip_empty=True)
        result[op] = {"checks": [c.id for c in op_checks], "dirs": list(dirs),
                      **analyse(report, package, dirs, excluded),
                      "structure": structure_reached([r for r in records if op_of(r.id) in
                                                      {op_of(c.id) for c in op_checks}], args.profile),
                      "configs": configs.summary(ctx.configs, [r for r in records if op_of(r.id) in
                                                               {op_of(c.id) for c in op_checks}])}
    table = Table(title=f"kernel coverage per op ({args.profile} profile, CPU interpreter)")
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
    run_wide = configs.summary(ctx.configs, records)
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
    counts = results.summary_counts(records)
    if args.json:
        results.write_text_atomic(args.json, json.dumps({"package": str(package), "profile": args.profile,
                                                        "seed": args.seed, "checks": counts, "ops": result,
                                                        "configs": run_wide}, indent=2))
    if args.html:
        console.print(f"HTML: {Path(args.html) / '<op>' / 'index.html'}")
    if counts["fail"] or counts["error"]:
        console.print(f"[red]{counts['fail']} check(s) failed, {counts['error']} errored[/] (coverage still reported)")
    return 1 if counts["fail"] or counts["error"] else 0
