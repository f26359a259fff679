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
import math
import os
import tempfile

from pathmdn_verify.core.errors import KernelUnavailable, UsageError
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


def _num(x: float):
    return x if math.isfinite(x) else str(x)


def localize(op, pass_: str, dtype: str, x: dict, fp32_dot: str) -> list[dict]:
    """One row per judged tensor, in stage order: stage, source, tensor, measured, budget, ratio, verdict."""
    stages = op.stages[pass_](op, x, dtype, fp32_dot)
    return [{"stage": st.name, "source": st.source, "tensor": v.name, "measured": v.measured, "budget": v.budget,
             "ratio": v.ratio, "decided_by": v.decided_by, "verdict": "within" if v.ratio <= 1 else "DIVERGES"}
            for st in stages for v in st.verdicts(op.budget_factor)]


def first_divergence(rows: list[dict]) -> dict | None:
    return next((r for r in rows if r["verdict"] != "within"), None)


def print_table(rows: list[dict], console) -> None:
    from rich.table import Table
    table = Table(title="stages in the order the kernel computes them")
    for col in ("stage", "computed by", "tensor", "measure", "measured", "budget", "ratio", "verdict"):
        table.add_column(col, justify="right" if col in ("measured", "budget", "ratio") else "left")
    for r in rows:
        colour = "green" if r["verdict"] == "within" else "red"
        table.add_row(r["stage"], r["source"], r["tensor"], r["decided_by"], f"{r['measured']:.2e}", f"{r['budget']:.2e}",
                      f"{r['ratio']:.2f}", f"[{colour}]{r['verdict']}[/]")
    console.print(table)


def run(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from pathmdn_verify.kernels import fla_ops
    from pathmdn_verify import ops
    from pathmdn_verify.core import results
    from pathmdn_verify.platform import environment
    from pathmdn_verify.core import examples as example
    from pathmdn_verify.platform.setup import prepare
    from pathmdn_verify.core.errors import innermost_error, is_device_fatal, is_interpreter_gap
    from pathmdn_verify.core.ids import CheckId
    from pathmdn_verify.core.registry import DEVICE_LOST, REGISTRY, Context
    from pathmdn_verify.run import load_checks


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
    if args.kernel_root:        # before anything imports fla
        from pathmdn_verify.platform.kernel_root import activate
        args.kernel_root = activate(args.kernel_root)
    staged = cid.pass_ in op.stages
    if not staged and not args.sanitize:
        staged_ops = [f"{o.name}.{p}" for o in ops.OPS.values() for p in o.stages]
        raise UsageError(f"--id {args.id}: {op.name} defines no stages for its {cid.pass_} pass (stages: "
                         f"{', '.join(staged_ops)}); --sanitize works for any searched kernel check")
    if args.examples is not None and args.examples < 1:
        raise UsageError(f"--examples {args.examples}: must be at least 1")
    results.check_writable(args.json, "--json")
    device = environment.resolve_device(args.device)
    fla_ops.check_fla_version()
    ctx = Context(device=device, profile=args.profile, seed=args.seed, fp32_dot=args.fp32_dot,
                  kernel_root=args.kernel_root, examples=args.examples)
    x = example.load(args.inputs, op, cid.dtype, "cpu") if args.inputs else None
    prepare(ctx)
    if args.inputs:
        label, lost = args.inputs, False
    else:       # the check's own search, seeded: the example it reports
        result = REGISTRY[args.id].run(ctx)
        label = example.reported(result)
        if label is None:
            raise UsageError(f"{args.id} at seed {ctx.seed} reported no example ({result.status}: {result.message})")
        x, lost = example.from_label(op, cid.dtype, label), bool(result.details.get(DEVICE_LOST))
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 160
    console.print(escape(f"verify localize: {args.id} on {device}, example [{label}] ({example.shape(x)})"))
    doc = {"environment": {**environment.versions(), **environment.describe(device), "fp32_dot": args.fp32_dot},
           "check": args.id, "example": label, "shape": example.shape(x)}
    hint = "" if args.sanitize else "; rerun with --sanitize to name the faulting access"
    status = 0
    if lost:        # the search's fatal CUDA error left this process without a usable CUDA context
        doc["error"] = "the kernel raised a fatal CUDA error on this example in the check's search"
        console.print(f"FAIL: {doc['error']}; no stage compared{hint}")
        status = 1
    elif staged:
        try:
            rows = localize(op, cid.pass_, cid.dtype, {n: None if t is None else t.to(device) for n, t in x.items()},
                            args.fp32_dot)
        except (UsageError, KernelUnavailable):
            raise
        except Exception as exc:        # the kernel raised on valid input: a failure, localized to no stage
            if args.debug:
                raise
            if is_interpreter_gap(exc):     # the CPU interpreter's missing support, as the check skips it
                raise UsageError(f"{args.id}: not verifiable on the CPU interpreter: {innermost_error(exc)}") from exc
            doc["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            console.print(escape(f"FAIL: the kernel raised {doc['error']}" + (hint if is_device_fatal(exc) else "")))
            rows = []
        first = first_divergence(rows)
        if rows:
            print_table(rows, console)
            console.print(f"first divergent stage: {first['stage']} ({first['source']}; {first['tensor']} at "
                          f"{first['ratio']:.1f}x its budget)" if first else "no stage leaves its budget")
        doc["stages"] = [{k: _num(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows]
        doc["first_divergent"] = first and {k: first[k] for k in ("stage", "source", "tensor")}
        status = 1 if first or not rows else 0
    if args.sanitize:
        from pathmdn_verify.run import sanitize
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "example.pt")
            example.save(x, path)
            verdict = sanitize.sanitize(args.id, path, device)
        console.print(escape(f"sanitizer: {verdict['summary']}"))
        doc["sanitizer"] = verdict
        status = max(status, 1 if verdict["status"] == "fault" else 0)
    if args.json:
        doc["status"] = "fail" if status else "pass"
        results.write_text_atomic(args.json, json.dumps(doc, indent=2))
    return status
