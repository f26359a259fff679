"""`verify report`: sweep the kernels and the reference algorithms over the regimes that matter and write a
self-contained report (report.md, PNG plots, report.json); or, with --compare, diff two reports.

Exit status: 0 a report was written (kernels over their bounds are findings, not errors); with --compare, 1 when
the new report has a regression; 2 for a usage or environment error.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path

from pathmdn_verify.commands import options
from pathmdn_verify.core.errors import UsageError

EPILOG = """examples:
  verify report --out /tmp/r                         the quick profile, into /tmp/r/
  verify report --profile ci -k mdn_map --out /tmp/r
  verify report --device cuda --profile full --results kernels_full.json --out /tmp/full
  verify report --compare reports/A/report.json reports/B/report.json --out /tmp/diff"""


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="error-bound report: plots, a-priori bounds, report.json; --compare two reports",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", metavar="DIR", help="the folder the report is written to (required); with --compare, "
                                                "where compare.md/.png/.json go (optional)")
    options.device(p)
    options.profile(p, default="quick", what="report sizes")
    options.keyword(p, what="report points (<plot>.<op>.<pass>.<dtype>.<x>)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="measure points in N worker processes (default 1; a point whose worker crashes or hangs is "
                        "a failure of kind crashed or timeout, and the others go on)")
    options.seed(p, "seed of every input (default 0)")
    options.fp32_dot(p)
    p.add_argument("--results", metavar="FILE", help="a `verify ... --json` result: its worst kernel checks, with "
                                                     "their reproduction commands, go into the report")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="diff two report.json files; exit 1 on a regression")
    options.debug(p, "print tracebacks")


def run(args) -> int:
    from pathmdn_verify.report import diff
    if args.compare:
        return diff.run(*args.compare, args.out)
    if args.workers < 1:
        raise UsageError(f"--workers {args.workers}: must be at least 1")
    if not args.out:
        raise UsageError("--out DIR is required: the folder the report is written to")
    results = _results(args.results)
    from pathmdn_verify.kernels.fla_ops import check_fla_version
    from pathmdn_verify.platform import environment
    
    from pathmdn_verify.report import sweeps
    from pathmdn_verify.run import load_checks
    load_checks()       # the op table with any plug-in op ($VERIFY_EXTRA_CHECKS): the report's sweeps read it
    device = environment.resolve_device(args.device)
    check_fla_version()
    chosen = sweeps.select(sweeps.points(args.profile, args.seed), args.patterns)
    if not chosen:
        raise UsageError(f"no report point matches {args.patterns}")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc}") from exc
    return _write(args, device, chosen, out, results)


def _results(path: str | None) -> dict | None:
    if path is None:
        return None
    try:
        doc = json.loads(Path(path).read_text())
        doc["checks"][0:0]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--results {path}: not a `verify ... --json` result ({exc})".splitlines()[0]) from exc
    return doc


def _write(args, device: str, chosen, out: Path, results: dict | None) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from pathmdn_verify.platform import environment
    from pathmdn_verify.report import document, measure, plots
    from pathmdn_verify.run import xfail_list as xfails
    t0, c0 = time.perf_counter(), time.process_time()
    with Progress(TextColumn("verify report"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}")) as bar:
        task = bar.add_task("", total=len(chosen))

        def progress(point, finished: bool):
            bar.update(task, advance=int(finished), description=point.id)
        measurements, facts = measure.run_points(chosen, device, args.fp32_dot, args.workers, progress, args.profile)
        bar.update(task, completed=len(chosen), description="plots")
        made = plots.all_plots(measurements, out, document.decode_by_length(results))
    meta = {"command": shlex.join(["verify", "report", *sys.argv[2:]]) if sys.argv[1:2] == ["report"]
            else "verify report", "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": device, "profile": args.profile, "seed": args.seed, "fp32_dot": args.fp32_dot,
            "workers": args.workers, "wall_seconds": round(time.perf_counter() - t0, 1),
            "cpu_seconds": round(time.process_time() - c0, 1), "results_file": args.results,
            "environment": {**environment.versions(), **environment.describe(device), "fp32_dot": args.fp32_dot,
                            "kernel_package": facts["kernel_package"],
                            "interpreter_fidelity": facts["interpreter_fidelity"],
                            "autotune_configs": facts["autotune_configs"] or None}}
    doc = document.build(measurements, meta, made, results, xfails.expected_failures())
    document.write_json(doc, out / "report.json")
    (out / "report.md").write_text(document.markdown(doc))
    over = sum(m["status"] == "fail" for m in measurements)
    print(f"verify report: {len(measurements)} points, {len(made)} plots, {over} over the checks' budget or failing; "
          f"{doc['wall_seconds']:.0f} s -> {out / 'report.md'}")
    return 0
