"""pathmdn-verify: verify PaTH attention, FoX, Momentum DeltaNet and Gated DeltaNet kernels against float64
oracles, under budgets set by what each kernel's arithmetic allows.

This module is the public API; everything else in the package is internal.

    import pathmdn_verify as pv

    pv.op_specs()                 the ops, each with its canonical call (inputs, layouts, outputs, passes, dtypes)
    pv.implement(op, fn, name=..., fp32_dot=...)   register your implementation of an op (or the decorator
    pv.implementation(op, name=..., fp32_dot=...)  form); what it does not offer is declared, never failed
    pv.check(name)                run its checks, each in a worker process: a list of CheckResult
    pv.declare_op(record)         add a new op and declare its checks: the one way to add an op
    pv.OpRecord(...)              a new op's record and its parts, each refused when malformed: Conventions,
                                  ConventionProbe, Fixed, Decode, Structure, Mutant; Stage and Precision (localize's
                                  stages); scale_of, BUDGET_FACTOR_BLOCKWISE / _SEQUENTIAL, UsageError (bad input)
    pv.op_record(name)            an op's record, whose callables a new op may build on

Plug-ins: an installed package names a module (or an Implementation) in the entry-point group
"pathmdn_verify"; `verify all --impl NAME` and `pytest --verify-impl NAME` then verify it.  Importing this
module is cheap: the names above load what they need on first use.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["BUDGET_FACTOR_BLOCKWISE", "BUDGET_FACTOR_SEQUENTIAL", "CheckResult", "ConventionProbe", "Conventions",
           "Decode", "Fixed", "Mutant", "OpRecord", "OpSpec", "Precision", "Stage", "Structure", "UsageError", "check",
           "declare_op", "implement", "implementation", "op_record", "op_specs", "scale_of"]

# An op author's names, loaded on first use (importing this module stays cheap): name -> the module that defines it.
_LAZY = {**dict.fromkeys(("OpRecord", "Conventions", "ConventionProbe", "Decode", "Fixed", "Structure", "scale_of",
                          "BUDGET_FACTOR_BLOCKWISE", "BUDGET_FACTOR_SEQUENTIAL"), "pathmdn_verify.core.records"),
         "Precision": "pathmdn_verify.core.precision", "UsageError": "pathmdn_verify.core.errors",
         "Mutant": "pathmdn_verify.platform.mutation", "Stage": "pathmdn_verify.stages"}


@dataclass(frozen=True)
class OpSpec:
    """An op as an implementation sees it: the canonical call its function must have."""
    name: str
    title: str
    required: tuple[str, ...]         # inputs always given, by name
    optional: tuple[str, ...]         # inputs that may be None; a function that does not take one declares that
    outputs: tuple[str, ...]          # what the function returns (a tuple when several), each of the oracle's
    #                                   shape on the inputs' device, in the dtype checked but the fp32_outputs
    fp32_outputs: tuple[str, ...]     # the outputs always in float32 (final states)
    grad_inputs: tuple[str, ...]      # the backward pass judges the gradient of each present one
    passes: tuple[str, ...]
    dtypes: tuple[str, ...]
    layout: str                       # shapes, dtypes and meaning of each input; what it returns

    @property
    def signature(self) -> str:
        args = ", ".join([*self.required, *(f"{n}=None" for n in self.optional), "scale=None"])
        out = self.outputs[0] if len(self.outputs) == 1 else f"({', '.join(self.outputs)})"
        return f"{self.name}({args}) -> {out}"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: status pass | fail | xfail | skip | error; kind says why it did not pass."""
    id: str
    status: str
    kind: str | None
    measured: float | None
    budget: float | None
    message: str
    repro: str
    cached: bool = False            # reused from the verdict cache (the check did not run again)


def op_specs() -> dict[str, OpSpec]:
    """name -> OpSpec of every op an implementation can implement."""
    from pathmdn_verify.ops import OPS
    return {n: OpSpec(n, r.title, r.required, r.optional, r.outputs, r.fp32_outputs, r.grad_inputs, r.passes,
                      ("bf16", "fp32"), r.layout) for n, r in OPS.items()}


def implement(op: str, fn, *, name: str, fp32_dot: str, passes=None, dtypes=None, gqa: bool = True,
              grouped_values: bool = True, head_dims=None, decode=None, version: str | None = None):
    """Register fn as implementation `name` of `op` (a name of op_specs()) and declare its checks
    (kernel.<name>.<op>.<pass>.<dtype>.<regime>, ...).  fn(**inputs, scale) takes the op's canonical inputs by
    name; the optional inputs it does not take by name are variants it does not offer.  fp32_dot: "ieee" or
    "tf32", how its fp32 products round (PyTorch: ieee; Triton's tl.dot on an NVIDIA GPU: tf32).  passes, dtypes:
    what it offers (default: all of the op's); gqa, grouped_values, head_dims: the shapes it takes.  A bad
    declaration raises ValueError.  Returns the Implementation."""
    from pathmdn_verify.checks.kernel_checks import declare
    from pathmdn_verify.ops import OPS, impls
    if op not in OPS:
        raise ValueError(f"no op {op!r}; the ops are {', '.join(OPS)}")
    impl = impls.implement(OPS[op], fn, name=name, fp32_dot=fp32_dot, passes=passes, dtypes=dtypes, gqa=gqa,
                           grouped_values=grouped_values, head_dims=head_dims, decode=decode, version=version)
    declare(impl.record)
    return impl


def implementation(op: str, **declared):
    """implement() as a decorator: `@implementation("path_attn", name="mine", fp32_dot="ieee")`; returns the
    function itself, which carries the registration (`fn.implementations`)."""
    def register(fn):
        fn.implementations = (*getattr(fn, "implementations", ()), implement(op, fn, **declared))
        return fn
    return register


def check(name: str, *, profile: str = "quick", device: str | None = None, seed: int = 0, select: str | None = None,
          examples: int | None = None, workers: str = "auto", cache: bool = True,
          cache_dir: str | None = None) -> list[CheckResult]:
    """Run the checks of implementation `name` (its kernel checks; -k expression `select` narrows them) as
    `verify kernels --impl name` does: each in a worker process (a kernel that crashes costs only its check,
    kind crashed), verdicts reused from the verdict cache (cache=False: none; cache_dir: its folder, else
    $VERIFY_CACHE_DIR or beside Triton's cache), the expected-failure list applied.  The workers import the module
    that registered the implementation; one registered at run time (inside a function) needs workers="0": its
    checks then run in this process, without isolation or verdict cache."""
    from pathmdn_verify.run.session import RunOptions, Session
    session = Session(RunOptions(prefixes=(f"kernel.{name}.",), patterns=(select,) if select else (), impls=(name,),
                                 device=device, profile=profile, seeds=(seed,), workers=workers, examples=examples,
                                 cache=cache, cache_dir=cache_dir))
    return [CheckResult(o.id, o.result.status, o.result.kind, o.result.measured, o.result.budget, o.result.message,
                        o.repro, "cached" in o.result.details) for o in session.run().outcomes]


def declare_op(record):
    """Add a new op (an OpRecord) to the op table and declare its checks (kernel.<impl>.<op>.<pass>.<dtype>.<regime>,
    its decode regimes and conventions): the one way to add an op, from a plug-in module named by
    $VERIFY_EXTRA_CHECKS so that every command's workers load it.  Returns the record."""
    from pathmdn_verify.checks.kernel_checks import declare
    from pathmdn_verify.core.records import OpRecord
    if not isinstance(record, OpRecord):
        raise TypeError(f"declare_op takes an OpRecord, not {type(record).__name__}")
    return declare(record)


def op_record(name: str):
    """The OpRecord of op `name` in the op table (a built-in op's, or one declare_op added): its callables (kernel,
    oracle, same_dtype, make_inputs, cases, error_inputs) are what a new op may build on."""
    from pathmdn_verify.ops import OPS
    if name not in OPS:
        raise ValueError(f"no op {name!r}; the ops are {', '.join(OPS)}")
    return OPS[name]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
