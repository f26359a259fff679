"""What code of the kernel package the selected checks execute, per op (verify coverage): each op's checks run in
this process (a Session of workers="0": coverage.py's tracer sees only its own process) under their own
measurement, restricted to the kernel package.  Under the CPU interpreter a @triton.jit kernel runs as Python, so
its lines are seen like a launcher's."""
from __future__ import annotations

import ast
import json
import os
import re
import tempfile
from pathlib import Path

from pathmdn_verify.core.ids import CheckId, op_of


def structure_reached(outcomes, profile: str) -> dict:
    """op -> pass -> factor -> declared / reached / missing levels (pathmdn_verify.core.boundaries.reached), from the
    cases each searched check of the outcomes evaluated (details["cases"])."""
    from pathmdn_verify import ops
    from pathmdn_verify.core import boundaries, examples
    by: dict[tuple[str, str], list] = {}
    for r in outcomes:
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


def measure(chosen, profile: str, seed: int, kernel_root: str | None, examples: int | None, html: str | None,
            debug: bool, on_done) -> tuple[dict, list]:
    """Per op group of the chosen checks: their run in this process under coverage.py (branch coverage of the
    kernel package), analysed (`analyse`), with the boundary levels their cases reached and the configs they ran;
    and every check's outcome (on_done(outcome) as each ends).  html: coverage.py's HTML report, a folder per op."""
    import coverage

    from pathmdn_verify.platform import configs
    from pathmdn_verify.platform.mutation import fla_package_dir
    from pathmdn_verify.run.session import RunOptions, Session
    if kernel_root:      # this process runs the checks: the tree first on its import path, for good
        from pathmdn_verify.platform.kernel_root import activate
        activate(kernel_root)
    family = families({op_of(c.id) for c in chosen})
    package = fla_package_dir().resolve()
    groups: dict[str, list] = {}
    for c in chosen:
        groups.setdefault(family[op_of(c.id)][0], []).append(c)
    result, outcomes = {}, []
    for op, op_checks in groups.items():
        _, dirs, excluded = family[op_of(op_checks[0].id)]
        cov = coverage.Coverage(source=[str(package)], branch=True, data_file=None, config_file=False)
        for pattern, (which, _) in excluded.items():
            cov.exclude(pattern, which=which)
        session = Session(RunOptions(ids=tuple(c.id for c in op_checks), device="cpu", profile=profile, seeds=(seed,),
                                     workers="0", cache=False, kernel_root=kernel_root, examples=examples, debug=debug))
        cov.start()
        try:
            mine = session.run(on_done=lambda i, o: on_done(o)).outcomes
        finally:
            cov.stop()
        outcomes += mine
        include = [f"{package}/{d}/*" for d in dirs]
        with tempfile.TemporaryDirectory() as tmp:
            cov.json_report(outfile=str(Path(tmp) / "c.json"), include=include)
            report = json.loads((Path(tmp) / "c.json").read_text())
        if html:     # the op's own files and the shared helpers it ran
            cov.html_report(directory=str(Path(html) / op), title=f"verify coverage: {op}",
                            include=include + [f"{package}/ops/utils/*", f"{package}/modules/*"], skip_empty=True)
        result[op] = {"checks": [c.id for c in op_checks], "dirs": list(dirs), **analyse(report, package, dirs, excluded),
                      "structure": structure_reached(mine, profile), "configs": configs.summary("cover", mine)}
    return result, outcomes
