"""`verify localize`: run a multi-stage kernel once on one input and name the first stage whose result
leaves its budget (the first divergence), comparing every intermediate with the float64 reference
intermediate of the same definition.

The input is the example a kernel check reports at --seed (its hypothesis search, rerun; the worst case
when it passes, the minimal failing one when it fails) or a saved file of named tensors (--inputs, the
format of `verify compare`).  Each stage is judged like a kernel output (verify/core/budget.py): within c
(4 for a forward stage, 8 for a backward one) times the error of the same stage computed in the working
precision by the references, with the unit roundoff floor.  The stages of an op's pass are
its record's (pathmdn_verify.ops, field `stages`), defined in verify/stages/: fla's PaTH, FoX and GDN chunk
forward and backward, fla's MDN chunk forward; the passes that are one kernel or one PyTorch function with no
intermediate to read (the GDN and MDN recurrences, PaTH's decode cache, MDN's autograd backward) are one stage,
judged as their check judges them.  --sanitize reruns the example alone under compute-sanitizer, or on the CPU
under an interpreter bounds check (pathmdn_verify.run.sanitize), for any searched kernel check (fwd, bwd, decode).

Exit status: 0 no stage diverges, 1 a stage diverges (or the kernel raised), 2 bad input (or a kernel the CPU
interpreter cannot run, which the check skips).
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.commands import options


def add_parser(sub) -> None:
    p = sub.add_parser("localize", help="name the first stage of a kernel whose intermediate leaves its budget",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--id", required=True, metavar="CHECK", help="a kernel check id, e.g. kernel.fla.path_attn.fwd.bf16.beta_two")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--seed", type=int, default=0, help="seed of the check's search whose example is used (default 0)")
    src.add_argument("--inputs", metavar="FILE.pt", help="a saved example instead (dict of named tensors, as verify compare)")
    options.profile(p, what="the check's profile for --seed")
    options.examples(p)
    options.device(p)
    options.fp32_dot(p)
    options.kernel_root(p)
    p.add_argument("--sanitize", action="store_true",
                   help="also rerun the example alone under a bounds checker: compute-sanitizer memcheck on cuda (the CUDA "
                        "toolkit's), the interpreter's bounds check on cpu")
    options.json_out(p, "the stage table")
    options.debug(p)


def print_table(rows: list[dict], console) -> None:
    from rich.table import Table
    table = Table(title="stages in the order the kernel computes them")
    for col in ("stage", "computed by", "tensor", "measure", "measured", "budget", "ratio", "verdict"):
        table.add_column(col, justify="right" if col in ("measured", "budget", "ratio") else "left")
    for r in rows:
        colour = "green" if r["verdict"] == "within" else "red"
        table.add_row(r["stage"], r["source"], r["tensor"], r["decided_by"], f"{float(r['measured']):.2e}",
                      f"{float(r['budget']):.2e}", f"{float(r['ratio']):.2f}", f"[{colour}]{r['verdict']}[/]")
    console.print(table)


def run(args) -> int:
    from pathmdn_verify.core import results
    _, staged, session = _prepare(args)
    results.check_writable(args.json, "--json")
    with tempfile.TemporaryDirectory(prefix="verify_localize_") as folder:      # the example, for the sanitizer
        return _localize(args, staged, session, folder)


def _localize(args, staged: bool, session, folder: str) -> int:
    from rich.console import Console
    from rich.markup import escape

    from pathmdn_verify.core import results
    from pathmdn_verify.platform import environment
    from pathmdn_verify.run.localize import stages
    from pathmdn_verify.run.runner import Lost
    [got] = session.map([(stages, (args.id, session.contexts[0], args.inputs, staged, args.debug, folder))])
    if isinstance(got, Lost):
        raise UsageError(f"{args.id}: the kernel's worker was lost on its example ({got.kind}: {got.message}); "
                         "`verify localize --sanitize` or `verify compare` replays it alone")
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 160
    console.print(escape(f"verify localize: {args.id} on {session.device}, example [{got['label']}] ({got['shape']})"))
    doc = {"environment": {**environment.versions(), **environment.describe(session.device), "fp32_dot": args.fp32_dot},
           "check": args.id, "example": got["label"], "shape": got["shape"]}
    status = _report_stages(got, staged, args.sanitize, doc, console) if staged or got["lost"] else 0
    if args.sanitize:
        from pathmdn_verify.run import sanitize
        verdict = sanitize.sanitize(args.id, got["example"], session.device)
        console.print(escape(f"sanitizer: {verdict['summary']}"))
        doc["sanitizer"] = verdict
        status = max(status, 1 if verdict["status"] == "fault" else 0)
    if args.json:
        doc["status"] = "fail" if status else "pass"
        results.write_text_atomic(args.json, json.dumps(doc, indent=2))
    return status


def _prepare(args):
    """The check's id, whether its pass has stages, and a Session (of no check) on the run's device and tree."""
    from pathmdn_verify import ops
    from pathmdn_verify.core.ids import CheckId
    from pathmdn_verify.core.registry import REGISTRY
    from pathmdn_verify.run import load_checks
    from pathmdn_verify.run.session import RunOptions, Session
    cid = CheckId.parse(args.id)
    if cid.impl not in (None, "fla"):
        raise UsageError(f"verify localize: not supported for implementation {cid.impl} (its stages are fla's "
                         "intermediate tensors; `verify all --impl ... --save-failing DIR` and `verify compare` "
                         "replay an example of any implementation)")
    load_checks()
    op = ops.record(cid)
    if args.id not in REGISTRY:
        raise UsageError(f"--id {args.id}: no such check; see `verify list -k kernel.`")
    if not cid.searched:
        raise UsageError(f"--id {args.id}: not a searched kernel check (kernel.<impl>.<op>.<fwd|bwd|decode>.<dtype>."
                         "<regime>): it reports no example to localize")
    staged = cid.pass_ in op.stages
    if not staged and not args.sanitize:
        staged_ops = [f"{o.name}.{p}" for o in ops.OPS.values() for p in o.stages]
        raise UsageError(f"--id {args.id}: {op.name} defines no stages for its {cid.pass_} pass (stages: "
                         f"{', '.join(staged_ops)}); --sanitize works for any searched kernel check")
    if args.inputs and not Path(args.inputs).is_file():       # before any worker starts
        raise UsageError(f"--inputs {args.inputs}: no such file")
    session = Session(RunOptions(prefixes=(), device=args.device, profile=args.profile, seeds=(args.seed,),
                                 fp32_dot=args.fp32_dot, kernel_root=args.kernel_root, examples=args.examples,
                                 workers="1", debug=args.debug))
    return cid, staged, session


def _report_stages(got: dict, staged: bool, sanitize: bool, doc: dict, console) -> int:
    """The stage table and the first divergence (exit status 1 for one, or for a kernel that raised)."""
    from rich.markup import escape

    from pathmdn_verify.run.localize import first_divergence
    hint = "" if sanitize else "; rerun with --sanitize to name the faulting access"
    if got["lost"]:       # the search's fatal CUDA error left its process without a usable CUDA context
        doc["error"] = "the kernel raised a fatal CUDA error on this example in the check's search"
        console.print(f"FAIL: {doc['error']}; no stage compared{hint}")
        return 1
    rows = got["rows"]
    if got["error"]:
        doc["error"] = got["error"]
        console.print(escape(f"FAIL: the kernel raised {got['error']}" + (hint if got.get("fatal") else "")))
    first = first_divergence([{**r, "ratio": float(r["ratio"])} for r in rows])
    if rows:
        print_table(rows, console)
        console.print(f"first divergent stage: {first['stage']} ({first['source']}; {first['tensor']} at "
                      f"{float(first['ratio']):.1f}x its budget)" if first else "no stage leaves its budget")
    doc["stages"] = rows
    doc["first_divergent"] = first and {k: first[k] for k in ("stage", "source", "tensor")}
    return 1 if first or not rows else 0
