"""`verify compare`: run one kernel op on your own tensors (a repro) against the float64 oracle, under the
budget rule of the kernel checks (verify.budget, with the op's budget factor c for the pass).

FILE.pt holds a dict of tensors saved with torch.save, named as the op's record (verify/ops/) names its
inputs (a file that lacks one is refused with the list).  q, k, v are cast to --dtype (default:
q's own dtype), cu_seqlens to int32, the other tensors to fp32 as the kernels require.  Inputs are
validated first (the op's input validation, its record's error_inputs): a bad input is exit status 2, and so is an
input on which the float64 oracle or the same-dtype implementation cannot run.  `verify kernels
--save-failing DIR` writes such files for failing checks and prints the command that replays each.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from verify.errors import UsageError, is_interpreter_gap

DTYPES = {"torch.bfloat16": "bf16", "torch.float32": "fp32"}


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="run one kernel on your own saved tensors against the float64 oracle (a repro)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", required=True, help="the kernel op: a record of verify/ops/ (path_attn, mdn_recurrent, "
                                                "gdn_chunk, ...; an unknown name lists them all)")
    p.add_argument("--inputs", required=True, metavar="FILE.pt", help="dict of tensors saved with torch.save")
    p.add_argument("--dtype", choices=("bf16", "fp32"), help="dtype of q, k, v (default: q's dtype)")
    p.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="fwd",
                   help="judge the forward outputs (default) or the gradients, as the kernel checks do")
    p.add_argument("--seed", type=int, default=0, help="bwd: seed of the random upstream gradient (default 0)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where kernel and oracle run (default: cuda when available, else cpu)")
    p.add_argument("--fp32-dot", choices=("tf32", "ieee"), default="tf32",
                   help="CPU interpreter: emulate the GPU's TF32 fp32 dots (default) or run them in IEEE fp32")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON")
    p.add_argument("--debug", action="store_true", help="print tracebacks")


def load(path: str, op) -> dict:
    """The tensors of FILE.pt, validated for op (a KernelOp)."""
    import torch

    from verify import validate
    if not Path(path).is_file():
        raise UsageError(f"--inputs {path}: no such file")
    try:
        x = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UsageError(f"--inputs {path}: not a torch.save file ({type(exc).__name__}: {exc})".splitlines()[0])
    if not isinstance(x, dict):
        raise UsageError(f"--inputs {path}: holds a {type(x).__name__}, expected a dict of named tensors")
    validate.keys(x, op.required, op.optional, op.name)
    x = {n: x.get(n) for n in op.required + op.optional}
    op.error_inputs(x)
    return x


def run(args) -> int:
    from kernels import fla_ops
    from verify import environment, results
    from verify.budget import OracleFailed
    from verify.checks.kernels import compare, prepare
    from verify.ops import OPS
    from verify.precision import Precision
    from verify.registry import Context

    if args.op not in OPS:
        raise UsageError(f"--op {args.op}: not a kernel op; choose from {', '.join(OPS)}")
    op = OPS[args.op]
    results.check_writable(args.json, "--json")
    device = environment.resolve_device(args.device)
    x = load(args.inputs, op)
    dtype = args.dtype or DTYPES.get(str(x["q"].dtype))
    if dtype is None:
        raise UsageError(f"q is {x['q'].dtype}: give --dtype bf16 or fp32")
    if dtype not in op.dtypes:
        raise UsageError(f"--op {op.name} runs in {' or '.join(op.dtypes)}, not {dtype}")
    if args.pass_ not in op.passes:
        raise UsageError(f"--pass {args.pass_}: {op.name} has the passes {', '.join(op.passes)}")
    fla_ops.check_fla_version()

    prec = Precision.of(dtype, op.dot or args.fp32_dot)
    ctx = Context(device=device, fp32_dot=args.fp32_dot)
    x = {n: None if t is None else (t.to(prec.torch_dtype) if n in ("q", "k", "v") else
                                   t.int() if n == "cu_seqlens" else t.float()).to(device)
         for n, t in x.items()}
    prepare(ctx)
    c = op.budget_factor[args.pass_]
    try:
        verdicts = compare(op, args.pass_, x, prec, args.seed)
    except OracleFailed as exc:       # not the kernel's failure: these inputs are outside what the oracle takes
        raise UsageError(f"--inputs {args.inputs}: {exc}") from exc
    except fla_ops.KernelUnavailable:
        raise
    except fla_ops.VariantUnsupported as exc:
        raise UsageError(f"--op {op.name}: {exc}") from exc
    except Exception as exc:     # the kernel raised on validated input: a failure, not a usage error
        if args.debug:
            raise
        if is_interpreter_gap(exc):
            raise UsageError(f"--op {op.name} is not verifiable on the CPU interpreter ({type(exc).__name__}: "
                             f"{exc}); run it with --device cuda".splitlines()[0]) from exc
        print(f"FAIL {op.name} raised {type(exc).__name__}: {exc}".splitlines()[0])
        return 1
    ok = all(v.ratio <= 1 for v in verdicts)
    print(f"verify compare: {op.name} {args.pass_} in {dtype} on {device}, inputs {args.inputs}, c = {c:g}")
    for v in verdicts:
        print(f"  {'within ' if v.ratio <= 1 else 'EXCEEDS'} {v.summary()}")
    print("pass" if ok else "FAIL: the kernel exceeds its budget on these inputs")
    if args.json:
        worst = max(verdicts, key=lambda v: v.ratio)
        doc = {"environment": {**environment.versions(), **environment.describe(device), "fp32_dot": args.fp32_dot},
               "op": op.name, "pass": args.pass_, "dtype": dtype, "inputs": str(args.inputs), "budget_factor": c,
               "status": "pass" if ok else "fail", "kind": None if ok else worst.kind, "measure": worst.measure,
               "tensors": [v.record() for v in verdicts]}
        results.write_text_atomic(args.json, json.dumps(doc, indent=2, allow_nan=False))
    return 0 if ok else 1
