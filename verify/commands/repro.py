"""`verify repro CHECK --out DIR`: write a bundle that reproduces a failing kernel check with torch and fla alone,
for fla's maintainers and its issue tracker.

DIR receives repro.py (fla's entry point called on the example as the check calls it; every output or gradient
judged against its float64 expected tensor under the check's budget; exit 1 while the defect is present, 0 once
it is gone, 2 when the fla it finds cannot make the call, 77 when the finding needs a GPU and there is none),
tensors.pt (the inputs, the backward's upstream gradients, the expected tensors), bundle.json (the budgets and
what was measured) and ISSUE.md (title, environment, steps, expected, observed, cause).

The example is the one the check's seeded search reports at --seed (its minimal failing example), or --case
LABEL (a case as checks print it: 'T=600 D=16 Dv=32 HQ=2 seed=3'), or --inputs FILE.pt (the format of `verify
compare`).  It must fail here, measured by the toolkit as the check measures it, and not only by an
out-of-bounds access (fla alone would make it unchecked).  A finding that shows only on a GPU is written from any
example with --needs-gpu WHY: its repro.py says WHY and exits 77 on a machine without one.  `verify bisect
--bundle DIR` judges each commit of a kernel repository by the bundle.

Exit status: 0 the bundle was written, 2 bad input or an example that passes here or fails only out of
bounds (nothing is written).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pathmdn_verify.commands import options


def add_parser(sub) -> None:
    p = sub.add_parser("repro", help="write a standalone repro bundle (repro.py, tensors, ISSUE.md) for a failing "
                                     "kernel check, runnable with torch and fla alone",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("check", metavar="CHECK", help="a kernel check of fla: kernel.fla.<op>.<fwd|bwd>.<dtype>.<regime>")
    p.add_argument("--out", required=True, metavar="DIR", help="the bundle's folder (new, or empty)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--case", metavar="LABEL", help="this case instead of the search's example (a label as checks "
                                                    "print it, e.g. 'T=600 D=16 Dv=32 HQ=2 seed=3')")
    src.add_argument("--inputs", metavar="FILE.pt", help="a saved example instead (dict of named tensors, as verify "
                                                         "compare)")
    options.seed(p, "seed of the check's search whose example is used, and of the backward's upstream gradients "
                    "(default 0)")
    options.profile(p, what="the check's profile for the search")
    options.examples(p)
    options.device(p)
    options.fp32_dot(p)
    options.kernel_root(p)
    p.add_argument("--title", help="the issue's title (default: the entry point, pass, dtype and what failed)")
    p.add_argument("--needs-gpu", metavar="WHY",
                   help="the finding shows only on an NVIDIA GPU (which one, and why): written even when the example "
                        "passes here; its repro.py exits 77 without a GPU")
    options.debug(p)


def run(args) -> int:
    if args.kernel_root:        # before anything imports fla
        from pathmdn_verify.platform.kernel_root import activate
        args.kernel_root = activate(args.kernel_root)
    from pathmdn_verify.core.errors import UsageError
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.kernels import fla_ops
    from pathmdn_verify.platform import environment
    from pathmdn_verify.platform.setup import prepare
    from pathmdn_verify.repro import make

    make.validate(args.check, args.out)
    if args.examples is not None and args.examples < 1:
        raise UsageError(f"--examples {args.examples}: must be at least 1")
    device = environment.resolve_device(args.device)
    fla_ops.check_fla_version()
    ctx = Context(device=device, profile=args.profile, seed=args.seed, fp32_dot=args.fp32_dot,
                  kernel_root=args.kernel_root, examples=args.examples)
    prepare(ctx)
    doc = make.make(args.check, args.out, ctx, case=args.case, inputs=args.inputs, title=args.title,
                    needs_gpu=args.needs_gpu)
    sizes = ", ".join(f"{f.name} {f.stat().st_size / 1024:.0f} KiB" for f in sorted(Path(args.out).iterdir()))
    print(f"verify repro: {doc['title']}\n  example [{doc['example']}], measured on {device}: {_observed(doc)}\n"
          f"  wrote {args.out}: {sizes}\n  run it with torch and fla alone: python {Path(args.out) / 'repro.py'}"
          + (f"\n  needs an NVIDIA GPU: {doc['needs_gpu']}" if doc["needs_gpu"] else ""))
    return 0


def _observed(doc: dict) -> str:
    m = doc["measured"]
    if "exception" in m:
        return f"raises {m['exception']}" + (f" at {m['where']}" if m["where"] else "")
    if "not_run" in m:
        return m["not_run"]
    worst = m["ratio"]
    return "non-finite" if worst is None else f"{worst:.3g}x its budget"
