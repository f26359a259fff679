"""`verify coverage`: which code of the kernel package the selected checks execute, per op.

Under the CPU interpreter a @triton.jit kernel runs as Python, so coverage.py (branch coverage) sees its
lines like a launcher's.  Each op's checks run under their own measurement, restricted to the kernel
package; the report gives, per op, the line coverage of its own files' function bodies (kernels and
launchers: statements executed / statements), the kernels (@triton.jit functions) that never ran, and the
launcher branches (arcs of the non-jit functions) never taken, plus coverage.py's own HTML report per op
(--html DIR).  An op's own files are those of its folders in fla/ops (its record's `package`); shared helpers
(fla/ops/utils, fla/modules) count for no op but are in the HTML report.  Code an op's checks leave
unreached on purpose is listed in EXCLUDED with the reason, and reported as such rather than as missing.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import tempfile
from pathlib import Path

from verify.errors import UsageError

def families() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Check-id op -> (family label, folders of the kernel package that are its own code), from the op
    records' `package`: ops sharing a package are one family, named by their names' common prefix
    (mdn_chunk16 ... mdn_recurrent -> mdn; gdn_chunk, gdn_recurrent -> gdn)."""
    from verify.ops import OPS
    by_package: dict[tuple, list[str]] = {}
    for op in OPS.values():
        if op.package:
            by_package.setdefault(op.package, []).append(op.name)
    return {name: (os.path.commonprefix(names).rstrip("_"), tuple(m.split(".", 1)[1].replace(".", "/") for m in package))
            for package, names in by_package.items() for name in names}


# op label -> {regex of source lines: (kind, why the checks do not reach them)}.  coverage.py's own exclusion:
# "exclude" drops the matched lines and the block a matched line opens (and the branch into it) from the
# counts, "partial" accepts a branch of the matched line that only ever goes one way.  Not reached is not verified: each
# reason says why that is a deliberate limit of the toolkit, not a gap in the checks.
EXCLUDED = {
    "path_attn": {
        r"^[ \t]*if cu_seqlens is not None and q\.shape\[0\] != 1:": (
            "exclude", "fla's refusal of varlen input with batch > 1: verify.validate rejects that input first"),
        r"^[ \t]*if RETURN_H:": (
            "exclude", "parallel.py always calls the backward's prepare kernel with return_h=False"),
        r"^[ \t]*if BS == BT:": (
            "exclude", "parallel.py never picks equal tile sizes (BS 64 or 32, BT 128 or 64 with BS < BT)"),
    },
    "mdn": {
        r"^[ \t]*if (ctx\.)?use_qk_l2norm_in_kernel:": (
            "exclude", "use_qk_l2norm_in_kernel=True is fla's shared l2norm op (fla/modules/norm) applied to q, k, "
                       "p before MDN, with no oracle here: the toolkit verifies MDN on q, k as given (declared "
                       "convention; inputs drawn unit-norm)"),
        r"^[ \t]*if cu_seqlens is not None:": (
            "exclude", "fla's refusal of varlen MDN (NotImplementedError): MDN_CONVENTIONS.varlen=False"),
        r"^[ \t]*if chunk_size not in \(16, 32, 64\):": (
            "exclude", "fla's refusal of other chunk sizes: the checks pass 16, 32 or 64"),
        r"^[ \t]*if (beta|eta) is None:": (
            "exclude", "the toolkit always passes every gate: fla's defaults (beta = eta = 1) are not MDN's gated "
                       "arithmetic under test"),
        r"^[ \t]*if eta_r is not None:": (
            "partial", "fla's launchers replace eta=None by ones before the autograd function: never None there"),
        r"^[ \t]*if scale is None:\n\s*scale = 1 / \(q\.shape\[-1\] \*\* 0\.5\)": (
            "exclude", "the default scale of fla's reference functions (naive.py): the launchers always pass one "
                       "(their own default is checked by the scale_default probes)"),
        r"^[ \t]*if output_final_state:": (
            "partial", "the checks judge S_T and M_T, so they always ask for the final state"),
    },
}


def add_parser(sub) -> None:
    p = sub.add_parser("coverage", help="which kernels, kernel lines and launcher branches of the kernel package "
                                        "the selected checks reach, per op (CPU interpreter)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-k", dest="patterns", action="append", metavar="PATTERN",
                   help="select kernel checks whose id contains PATTERN (glob if it has * ? [); repeatable "
                        "(default: every kernel.fla check)")
    p.add_argument("--id", dest="ids", action="append", metavar="ID", help="select one check by exact id; repeatable")
    p.add_argument("--profile", choices=("quick", "ci", "full"), default="ci", help="check sizes (default ci)")
    p.add_argument("--seed", type=int, default=0, help="seed for every random draw (default 0)")
    p.add_argument("--examples", type=int, metavar="N", help="hypothesis examples per check (default: the profile's)")
    p.add_argument("--kernel-root", metavar="PATH", help="measure the fla package of this checkout instead")
    p.add_argument("--html", metavar="DIR", help="write coverage.py's HTML report, one folder per op")
    p.add_argument("--json", metavar="FILE", help="write the per-op result as JSON")
    p.add_argument("--debug", action="store_true", help="print tracebacks")


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
    reference code, naive.py, for PaTH) are left out.  excluded: the op's EXCLUDED entries (the report
    was made with them), listed per matching line with their reason."""
    files, never_ran, untaken, deliberate = {}, [], [], []
    for name, f in report["files"].items():
        rel = Path(name).resolve().relative_to(package).as_posix()
        if not rel.startswith(tuple(d + "/" for d in dirs)):
            continue
        kernels, launchers = kernels_and_launchers(package / rel)
        body = {n for lo, hi in [*kernels.values(), *launchers.values()] for n in range(lo, hi + 1)}
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
        from verify.kernel_root import activate
        args.kernel_root = activate(args.kernel_root)
    import coverage
    from rich.console import Console
    from rich.table import Table

    from verify import checks, results, runner
    from verify import xfails as xfail_list
    from verify.mutants import fla_package_dir
    from verify.registry import Context, select
    results.check_writable(args.json, "--json")
    if args.html and Path(args.html).exists() and not Path(args.html).is_dir():
        raise UsageError(f"--html {args.html}: not a directory")
    checks.load_all()
    family = families()
    chosen = [c for c in select(args.patterns, args.ids, ("kernel.fla.",)) if c.id.split(".")[2] in family]
    if not chosen:
        raise UsageError(f"no kernel.fla check of an op in {sorted(family)} matches {args.patterns or args.ids}")
    package = fla_package_dir().resolve()
    console = Console(highlight=False)
    if not console.is_terminal:     # logs and pipes: wide enough that tables and file:line items stay whole
        console.width = 200
    ctx = Context(device="cpu", profile=args.profile, seed=args.seed, kernel_root=args.kernel_root,
                  examples=args.examples)
    scope = xfail_list.current_scope("cpu", args.profile)
    groups: dict[str, list] = {}
    for c in chosen:
        groups.setdefault(family[c.id.split(".")[2]][0], []).append(c)
    console.print(f"verify coverage: {len(chosen)} checks on {package}, profile={args.profile}, seed={args.seed}")
    result, records = {}, []
    for op, op_checks in groups.items():
        cov = coverage.Coverage(source=[str(package)], branch=True, data_file=None, config_file=False)
        for pattern, (which, _) in EXCLUDED.get(op, {}).items():
            cov.exclude(pattern, which=which)
        cov.start()
        try:
            for chk in op_checks:
                rec = runner.run_one(chk, ctx, scope, args.debug)
                records.append(rec)
                console.print(f"  {rec.result.status:5} {chk.id} ({rec.seconds:.1f}s)", highlight=False)
        finally:
            cov.stop()
        dirs = family[op_checks[0].id.split(".")[2]][1]
        include = [f"{package}/{d}/*" for d in dirs]
        with tempfile.TemporaryDirectory() as tmp:
            cov.json_report(outfile=str(Path(tmp) / "c.json"), include=include)
            report = json.loads((Path(tmp) / "c.json").read_text())
        if args.html:     # the op's own files and the shared helpers it ran
            cov.html_report(directory=str(Path(args.html) / op), title=f"verify coverage: {op}",
                            include=include + [f"{package}/ops/utils/*", f"{package}/modules/*"], skip_empty=True)
        result[op] = {"checks": [c.id for c in op_checks], "dirs": list(dirs),
                      **analyse(report, package, dirs, EXCLUDED.get(op))}
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
    counts = runner.summary_counts(records)
    if args.json:
        results.write_text_atomic(args.json, json.dumps({"package": str(package), "profile": args.profile,
                                                        "seed": args.seed, "checks": counts, "ops": result}, indent=2))
    if args.html:
        console.print(f"HTML: {Path(args.html) / '<op>' / 'index.html'}")
    if counts["fail"] or counts["error"]:
        console.print(f"[red]{counts['fail']} check(s) failed, {counts['error']} errored[/] (coverage still reported)")
    return 1 if counts["fail"] or counts["error"] else 0
