"""kernel.<impl>.<op>.<pass>.<dtype>.<regime>: production kernels against the float64 oracles, declared from
the op table (pathmdn_verify.ops): every pass x dtype x regime of a record, its decode regimes and its conventions.

Each check runs a hypothesis search (pathmdn_verify.core.search) over cases of one regime of one op, climbing the
error/budget ratio measured by the engine (pathmdn_verify.core.engine).  kernel.<impl>.<op>.convention.<name>:
each declared convention of an op (its ConventionProbe), measured.
"""
from __future__ import annotations

from pathmdn_verify import ops
from pathmdn_verify.ops.impls import BUILT_IN, registered
from pathmdn_verify.core import engine
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import OpRecord
from pathmdn_verify.core.registry import Context, Result, register
from pathmdn_verify.core.search import search
from pathmdn_verify.core.strategies import BWD_MAX_T
from pathmdn_verify.platform import setup


_DECLARED: set[tuple[str, str]] = set()     # (impl, op) whose checks are registered


def declare(op: OpRecord) -> OpRecord:
    """Register every check of op (its passes, decode and conventions; `verify mutants` judges its mutants), adding it to the op table
    first when it is not there (an op of a plug-in module)."""
    if (op.impl, op.name) in _DECLARED:
        return op
    _DECLARED.add((op.impl, op.name))
    if op.impl == BUILT_IN and ops.OPS.get(op.name) is not op:
        ops.add(op)
    for pass_ in op.passes:
        for dtype in op.dtypes:
            for regime, fields in op.regimes.items():
                _declare_pass(op, pass_, dtype, regime, fields)
    if op.decode:
        for dtype in op.dtypes:
            for regime in op.decode.regimes:
                _declare_decode(op, dtype, regime)
    for p in op.probes:
        _declare_probe(op, p)
    return op


def _saved(op: OpRecord, case, dtype: str, pass_: str):
    """What --save-failing writes, and the `verify compare` arguments that replay it (naming the implementation)."""
    tensors, args = engine.saved_inputs(op, case, dtype, pass_)
    if op.impl != BUILT_IN:

        args += ["--impl", next((i.spec for i in registered((op.impl,)) if i.spec), op.impl)]
    return tensors, args


def not_offered(op: OpRecord, pass_: str, dtype: str | None) -> Result | None:
    """A skip of kind unsupported when the op's implementation does not offer this pass or dtype."""
    why = op.offered(pass_, dtype) if op.offered else None
    return Result("skip", message=why, kind="unsupported") if why else None


def _with_dot(op: OpRecord, run):
    """run, its result saying which fp32 dot format its budget assumed (details["fp32_dot"]: the implementation's
    declared one, or the run's --fp32-dot for fla's Triton kernels)."""
    def with_dot(ctx: Context) -> Result:
        result = run(ctx)
        result.details["fp32_dot"] = Precision.of_op(op, "fp32", ctx.fp32_dot).dot
        return result
    return with_dot


def _declare_pass(op: OpRecord, pass_: str, dtype: str, regime: str, fields: dict) -> None:
    cid = op.check_id(pass_, dtype, regime)

    def run(ctx: Context) -> Result:
        if why := not_offered(op, pass_, dtype):
            return why
        setup.prepare(ctx)
        strategy = op.cases(fields, ctx.profile, BWD_MAX_T[ctx.profile] if pass_ == "bwd" else None)
        return search(strategy, lambda case: engine.probe(op, case, dtype, pass_, ctx), ctx, cid,
                      max_examples=op.examples and op.examples[ctx.profile], explicit=ops.explicit_cases(cid, ctx.profile),
                      saved=lambda case: _saved(op, case, dtype, pass_))
    what = (f"outputs ({', '.join(op.outputs)})" if len(op.outputs) > 1 else "forward output") if pass_ == "fwd" \
        else "gradients"
    register(cid, f"{op.impl} {op.title} {what} in {dtype}, regime {regime}, within c={op.budget_factor[pass_]:g} x "
                  f"the same-dtype implementation's error", _with_dot(op, run))


def _declare_decode(op: OpRecord, dtype: str, regime: str) -> None:
    cid = op.check_id("decode", dtype, regime)

    def run(ctx: Context) -> Result:
        if why := not_offered(op, "decode", dtype):
            return why
        setup.prepare(ctx)
        return search(op.decode.cases(op.regimes[regime], ctx.profile),
                      lambda case: engine.decode_probe(op, case, dtype, ctx), ctx, cid,
                      explicit=ops.explicit_cases(cid, ctx.profile))
    register(cid, f"{op.impl} {op.name} decode cache (use_cache=True) in {dtype}, regime {regime}", _with_dot(op, run))


def _declare_probe(op: OpRecord, p) -> None:
    def run(ctx: Context) -> Result:
        setup.prepare(ctx)
        try:
            return engine.convention_result(op, p, ctx)
        except UsageError:
            raise
        except Exception as exc:        # a skip (pathmdn_verify.core.errors.verdict_of), else the runner's to judge
            result = Result.raised(exc)
            if result.status != "skip":
                raise
            return result
    register(op.convention_id(p.name), p.description, _with_dot(op, run))


for _op in ops.BUILT_IN:
    declare(_op)
