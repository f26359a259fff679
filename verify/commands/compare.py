"""`verify compare`: run one kernel op on your own tensors (a repro) against the float64 oracle, under the
budget rule of the kernel checks (pathmdn_verify.core.budget, with the op's budget factor c for the pass).

FILE.pt holds a dict of tensors saved with torch.save, named as the op's record (verify/ops/) names its
inputs (a file that lacks one is refused with the list).  q, k, v are cast to --dtype (default:
q's own dtype), cu_seqlens to int32, the other tensors to fp32 as the kernels require.  Inputs are
validated first (the op's input validation, its record's error_inputs): a bad input is exit status 2, and so is an
input on which the float64 oracle or the same-dtype implementation cannot run.  `verify kernels
--save-failing DIR` writes such files for failing checks and prints the command that replays each.

The comparison runs in a worker process of the check runner (a Session of no check, one worker: the CPU
interpreter's fidelity layer and the kernel package imported there, as for a check; the unlisted `--in-child`
runs it in this process, as the worker does): a kernel that kills its process (segfault, abort,
"munmap_chunk(): invalid pointer") is a verdict, FAIL with kind crashed and the signal, exit status 1, and so is
one past the check timeout of the ci profile (kind timeout); a fatal CUDA error is FAIL with kind cuda_fatal.
--kernel-root TREE imports the kernel package (fla) from TREE, as for `verify kernels`.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import sys
from pathlib import Path

from pathmdn_verify.commands import options
from pathmdn_verify.core.errors import KernelUnavailable, UsageError, VariantUnsupported, is_device_fatal, is_interpreter_gap

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
    options.seed(p, "bwd: seed of the random upstream gradient (default 0)")
    options.device(p)
    options.fp32_dot(p)
    options.kernel_root(p)
    p.add_argument("--impl", metavar="SPEC", default="fla",
                   help="the implementation of --op (default fla): a registered name, module[:attr] or file.py[:attr]")
    options.json_out(p)
    options.debug(p)
    p.add_argument("--in-child", action="store_true", help=argparse.SUPPRESS)   # in this process (the worker's way)


def _fail_doc(args, device: str | None, kind: str, message: str, **extra) -> dict:
    from pathmdn_verify.platform import environment
    env = {**environment.versions(), **(environment.describe(device) if device else {}), "fp32_dot": args.fp32_dot,
           "kernel_root": args.kernel_root}
    return {"environment": env, "op": args.op, "pass": args.pass_, "dtype": args.dtype, "inputs": str(args.inputs),
            "status": "fail", "kind": kind, "message": message, **extra}


def _write(path: str | None, doc: dict) -> None:
    if path:
        from pathmdn_verify.core import results
        results.write_text_atomic(path, json.dumps(doc, indent=2, allow_nan=False))


def _in_worker(args, device: str) -> int:
    """Run the comparison (inputs validated here already) in a runner worker, its output passed on; a worker that
    died (or ran past the check timeout) is the kernel's verdict, FAIL with kind crashed (or timeout)."""
    from pathmdn_verify.run.runner import Lost
    from pathmdn_verify.run.session import RunOptions, Session
    if args.json:
        Path(args.json).unlink(missing_ok=True)       # never leave a stale result in place
    args.device = device
    session = Session(RunOptions(prefixes=(), device=device, fp32_dot=args.fp32_dot, kernel_root=args.kernel_root,
                                 workers="1", debug=args.debug))
    options = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, Path, type(None)))}
    try:
        [got] = session.map([(_worker_compare, (options,))])
    finally:
        session.close()
    if not isinstance(got, Lost):
        code, out, err = got
        sys.stdout.write(out)
        sys.stderr.write(err)
        return code
    sig = -got.exit_code if got.exit_code is not None and got.exit_code < 0 else None
    if sig in (signal.SIGINT, signal.SIGTERM):     # interrupted, not crashed
        return 128 + sig
    if got.kind == "timeout":
        message = f"{args.op} {args.pass_}: timeout: {got.message.split(';')[0]}"
    else:
        name = signal.Signals(sig).name if sig in signal.valid_signals() else "unknown signal"
        message = (f"{args.op} {args.pass_}: crashed (signal {sig}, {name}): the process running the kernel died"
                   if sig else f"{args.op} {args.pass_}: crashed: {got.message.split(';')[0]}")
    print(f"FAIL {message}")
    _write(args.json, _fail_doc(args, device, got.kind, message, **({"signal": sig} if sig else {})))
    return 1


def _worker_compare(options: dict) -> tuple[int, str, str]:
    """In the worker: the comparison of these options in this process (--in-child), its exit status and what it
    printed."""
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(**{**options, "in_child": True})
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(args)
    return code, out.getvalue(), err.getvalue()


def run(args) -> int:
    if args.kernel_root:       # before anything imports fla; the worker gets it (ctx.kernel_root) and repeats it
        from pathmdn_verify.platform.kernel_root import activate
        args.kernel_root = activate(args.kernel_root)
    op, device, x, dtype = _validated(args)
    if not args.in_child:          # validated: the kernel runs in a worker, whose death is a verdict
        return _in_worker(args, device)
    verdicts = _measure(args, op, device, x, dtype)
    if verdicts is None:
        return 1
    return _render(args, op, device, dtype, verdicts)


def _validated(args):
    """(op record, device, the saved inputs, dtype) of a compare call, or a usage error."""
    from pathmdn_verify.core import examples, results
    from pathmdn_verify.kernels import fla_ops
    from pathmdn_verify.ops import OPS, impls
    from pathmdn_verify.platform import environment
    from pathmdn_verify.run import load_checks, load_impl
    load_checks()       # the op table, with the ops of any plug-in module ($VERIFY_EXTRA_CHECKS)
    if args.op not in OPS:
        raise UsageError(f"--op {args.op}: not a kernel op; choose from {', '.join(OPS)}")
    names = load_impl(args.impl)
    op = OPS[args.op] if names == (impls.BUILT_IN,) else next(
        (impls.IMPLS[(n, args.op)].record for n in names if (n, args.op) in impls.IMPLS), None)
    if op is None:
        raise UsageError(f"--impl {args.impl}: implements no {args.op}")
    results.check_writable(args.json, "--json")
    device = environment.resolve_device(args.device)
    x = examples.load_file(args.inputs, op)
    dtype = args.dtype or DTYPES.get(str(x[op.dtype_inputs[0]].dtype))
    if dtype is None:
        raise UsageError(f"q is {x['q'].dtype}: give --dtype bf16 or fp32")
    if dtype not in op.dtypes:
        raise UsageError(f"--op {op.name} runs in {' or '.join(op.dtypes)}, not {dtype}")
    if args.pass_ not in op.passes:
        raise UsageError(f"--pass {args.pass_}: {op.name} has the passes {', '.join(op.passes)}")
    if why := (op.offered(args.pass_, dtype) if op.offered else None):
        raise UsageError(f"not supported for this implementation: {why}")
    fla_ops.check_fla_version()
    return op, device, x, dtype


def _measure(args, op, device: str, x: dict, dtype: str):
    """Every tensor's verdict (pathmdn_verify.core.engine.measure); None when the kernel raised (said, and the
    JSON written)."""
    from pathmdn_verify.core import examples
    from pathmdn_verify.core.budget import OracleFailed
    from pathmdn_verify.core.engine import measure
    from pathmdn_verify.core.precision import Precision
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.platform.setup import prepare
    prec = Precision.of(dtype, op.dot or args.fp32_dot)
    x = examples.in_dtypes(x, dtype, device, op.dtype_inputs)
    prepare(Context(device=device, fp32_dot=args.fp32_dot))
    try:
        return measure(op, args.pass_, x, prec, args.seed)
    except OracleFailed as exc:       # not the kernel's failure: these inputs are outside what the oracle takes
        raise UsageError(f"--inputs {args.inputs}: {exc}") from exc
    except KernelUnavailable:
        raise
    except VariantUnsupported as exc:
        raise UsageError(f"--op {op.name}: {exc}") from exc
    except Exception as exc:     # the kernel raised on validated input: a failure, not a usage error
        if is_device_fatal(exc):
            message = f"{op.name} {args.pass_}: cuda_fatal: {type(exc).__name__}: {exc}".splitlines()[0]
            print(f"FAIL {message}; rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel")
            _write(args.json, _fail_doc(args, device, "cuda_fatal", message))
            return None
        if args.debug:
            raise
        if is_interpreter_gap(exc):
            raise UsageError(f"--op {op.name} is not verifiable on the CPU interpreter ({type(exc).__name__}: "
                             f"{exc}); run it with --device cuda".splitlines()[0]) from exc
        message = f"{op.name} raised {type(exc).__name__}: {exc}".splitlines()[0]
        print(f"FAIL {message}")
        _write(args.json, _fail_doc(args, device, "exception", message, exception=type(exc).__name__))
        return None


def _render(args, op, device: str, dtype: str, verdicts) -> int:
    from pathmdn_verify.core import results
    from pathmdn_verify.platform import environment
    c = op.budget_factor[args.pass_]
    ok = all(v.ratio <= 1 for v in verdicts)
    print(f"verify compare: {op.name} {args.pass_} in {dtype} on {device}, inputs {args.inputs}, c = {c:g}")
    for v in verdicts:
        print(f"  {'within ' if v.ratio <= 1 else 'EXCEEDS'} {v.summary()}")
    print("pass" if ok else "FAIL: the kernel exceeds its budget on these inputs")
    if args.json:
        worst = max(verdicts, key=lambda v: v.ratio)
        doc = {"environment": {**environment.versions(), **environment.describe(device), "fp32_dot": args.fp32_dot,
                               "kernel_root": args.kernel_root},
               "op": op.name, "pass": args.pass_, "dtype": dtype, "inputs": str(args.inputs), "budget_factor": c,
               "status": "pass" if ok else "fail", "kind": None if ok else worst.kind, "measure": worst.measure,
               "tensors": [v.as_json() for v in verdicts]}
        results.write_text_atomic(args.json, json.dumps(doc, indent=2, allow_nan=False))
    return 0 if ok else 1
