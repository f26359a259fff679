"""`verify compare`: run one kernel on your own tensors (a repro) against the float64 oracle, under the
budget rule of the kernel checks (verify.budget, c of the forward pass).

FILE.pt holds a dict of tensors saved with torch.save, named as in the canonical conventions
(kernels/fla_ops.py): q, k, v, w, beta and optionally g, cu_seqlens for path_attn; q, k, v, g and
optionally cu_seqlens for forgetting_attn; q, k, v, log_alpha, log_mu, beta, eta and optionally S0, M0 for
mdn_chunk and mdn_recurrent.  q, k, v are cast to --dtype (default: q's own dtype), the other tensors to
fp32 as the kernels require.  Inputs are validated first (verify.validate): a bad input is exit status 2.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from verify.errors import UsageError

OPS = {   # op -> (required tensors, optional tensors)
    "path_attn": (("q", "k", "v", "w", "beta"), ("g", "cu_seqlens")),
    "forgetting_attn": (("q", "k", "v", "g"), ("cu_seqlens",)),
    "mdn_chunk": (("q", "k", "v", "log_alpha", "log_mu", "beta", "eta"), ("S0", "M0")),
    "mdn_recurrent": (("q", "k", "v", "log_alpha", "log_mu", "beta", "eta"), ("S0", "M0")),
}
DTYPES = {"torch.bfloat16": "bf16", "torch.float32": "fp32"}


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="run one kernel on your own saved tensors against the float64 oracle (a repro)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", required=True, choices=OPS)
    p.add_argument("--inputs", required=True, metavar="FILE.pt", help="dict of tensors saved with torch.save")
    p.add_argument("--dtype", choices=("bf16", "fp32"), help="dtype of q, k, v (default: q's dtype)")
    p.add_argument("--chunk", type=int, default=None, help="mdn_chunk: chunk size 16, 32 or 64 (default 64)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where kernel and oracle run (default: cuda when available, else cpu)")
    p.add_argument("--fp32-dot", choices=("tf32", "ieee"), default="tf32",
                   help="CPU interpreter: emulate the GPU's TF32 fp32 dots (default) or run them in IEEE fp32")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON")
    p.add_argument("--debug", action="store_true", help="print tracebacks")


def load(path: str, op: str) -> dict:
    """The tensors of FILE.pt, validated for op."""
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
    required, optional = OPS[op]
    validate.keys(x, required, optional, op)
    x = {n: x.get(n) for n in required + optional}
    if op.startswith("mdn"):
        validate.mdn_inputs(x)
    else:
        from kernels import fla_ops
        conv = fla_ops.PATH_CONVENTIONS if op == "path_attn" else fla_ops.FOX_CONVENTIONS
        validate.path_inputs(x, conv.head_dims)
    return x


def _functions(op: str, x: dict, prec, chunk):
    """(output names, kernel, float64 oracle, same-dtype reference) as the kernel checks define them."""
    from kernels import fla_ops
    from references import mdn as MDN
    from references import path_attn as P
    from verify import lowprec
    if op.startswith("mdn"):
        return (["o", "S_T", "M_T"], lambda **a: fla_ops.mdn(**a, chunk=chunk), lambda **a: MDN.recurrence(**a),
                lambda **a: lowprec.mdn(**a, prec=prec))
    s = x["q"].shape[-1] ** -0.5
    if op == "path_attn":
        gs = fla_ops.PATH_CONVENTIONS.gate_scaled
        return (["o"], lambda **a: fla_ops.path_attn(**a, scale=s),
                lambda **a: P.path_attn(**a, scale=s, gate_scaled=gs),
                lambda **a: lowprec.path_attn(**a, prec=prec, scale=s, gate_scaled=gs))
    gs = fla_ops.FOX_CONVENTIONS.gate_scaled
    return (["o"], lambda **a: fla_ops.forgetting_attn(**a, scale=s),
            lambda **a: P.fox_attn(**a, scale=s, gate_scaled=gs),
            lambda **a: lowprec.fox_attn(**a, prec=prec, scale=s, gate_scaled=gs))


def _num(x: float):
    return x if math.isfinite(x) else str(x)


def run(args) -> int:
    from kernels import fla_ops
    from verify import environment, runner
    from verify.checks.kernels import C, compare, prepare
    from verify.precision import Precision
    from verify.registry import Context

    runner.check_writable(args.json, "--json")
    device = environment.resolve_device(args.device)
    x = load(args.inputs, args.op)
    dtype = args.dtype or DTYPES.get(str(x["q"].dtype))
    if dtype is None:
        raise UsageError(f"q is {x['q'].dtype}: give --dtype bf16 or fp32")
    conv = {"path_attn": fla_ops.PATH_CONVENTIONS, "forgetting_attn": fla_ops.FOX_CONVENTIONS,
            "mdn_chunk": fla_ops.MDN_CONVENTIONS, "mdn_recurrent": fla_ops.MDN_RECURRENT_CONVENTIONS}[args.op]
    if dtype not in conv.dtypes:
        raise UsageError(f"--op {args.op} runs in {' or '.join(conv.dtypes)}, not {dtype}")
    if args.chunk is not None and (args.op != "mdn_chunk" or args.chunk not in conv.chunk_sizes):
        raise UsageError(f"--chunk {args.chunk}: applies to mdn_chunk only, with a size in {fla_ops.MDN_CONVENTIONS.chunk_sizes}")
    chunk = (args.chunk or 64) if args.op == "mdn_chunk" else None
    fla_ops.check_fla_version()

    prec = Precision.of(dtype, args.fp32_dot)
    ctx = Context(device=device, fp32_dot=args.fp32_dot)
    x = {n: None if t is None else (t.to(prec.torch_dtype) if n in ("q", "k", "v") else
                                   t.int() if n == "cu_seqlens" else t.float()).to(device)
         for n, t in x.items()}
    prepare(ctx)
    names, kernel, oracle, ref = _functions(args.op, x, prec, chunk)
    try:
        verdicts = compare("fwd", names, kernel, oracle, ref, x, prec, C["fwd"], 0, ())
    except (UsageError, fla_ops.KernelUnavailable):
        raise
    except Exception as exc:     # the kernel (or the oracle) raised on validated input: a failure, not a usage error
        if args.debug:
            raise
        print(f"FAIL {args.op} raised {type(exc).__name__}: {exc}".splitlines()[0])
        return 1
    ok = all(v.ratio <= 1 for v in verdicts)
    print(f"verify compare: {args.op} in {dtype} on {device}, inputs {args.inputs}, c = {C['fwd']:g}")
    for v in verdicts:
        print(f"  {'within ' if v.ratio <= 1 else 'EXCEEDS'} {v.summary()}")
    print("pass" if ok else "FAIL: the kernel exceeds its budget on these inputs")
    if args.json:
        doc = {"environment": {**environment.versions(), **environment.describe(device), "fp32_dot": args.fp32_dot},
               "op": args.op, "dtype": dtype, "chunk": chunk, "inputs": str(args.inputs),
               "status": "pass" if ok else "fail",
               "tensors": [{"name": v.name, "decided_by": v.decided_by,
                            **{f: _num(getattr(v, f)) for f in ("ratio", "err_rel", "budget_rel", "err_abs",
                                                                 "budget_abs", "ref_rel", "ref_abs")}}
                           for v in verdicts]}
        runner.write_text_atomic(args.json, json.dumps(doc, indent=2))
    return 0 if ok else 1
