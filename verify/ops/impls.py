"""Implementations of the ops: the built-in one is fla (the records of this package bind fla's kernels); anyone's
own kernel is registered with `implement`, which binds it to the op's record under its own name, so that every
check, boundary case, budget and command of the op applies to it.

An implementation declares what it offers, and what it does not offer is `unsupported`, never a failure:
    passes, dtypes   the checks of another pass or dtype are skips that say so;
    optional inputs  the ones its function takes (inspect.signature): a case with an optional input present
                     that the function does not take (cu_seqlens: varlen; g: a gate; S0/M0: an initial state)
                     is not run, with the reason;
    gqa              query heads grouped over fewer key heads (q's heads != k's heads);
    grouped_values   value heads grouped over fewer key heads (GDN: v's heads != k's heads);
    head_dims        the head dims it takes (None: any);
    fp32_dot         the precision of its fp32 products: "ieee" (PyTorch, cuBLAS without TF32) or "tf32" (Triton's
                     default tl.dot on NVIDIA GPUs): the budget is the same-dtype implementation's error in that
                     arithmetic, so a kernel is judged by what its arithmetic allows.
"""
from __future__ import annotations

import dataclasses
import inspect
import sys
from dataclasses import dataclass
from typing import Callable

from pathmdn_verify.core.ids import DTYPES, NAME, PASSES
from pathmdn_verify.core.records import OpRecord

BUILT_IN = "fla"
DOTS = ("ieee", "tf32")


@dataclass(frozen=True)
class Implementation:
    """One implementation of one op, as registered (`implement`); `record` is the op record bound to it."""
    name: str
    op: str
    fn: Callable
    fp32_dot: str
    passes: tuple[str, ...]
    dtypes: tuple[str, ...]
    takes: frozenset[str]               # the op's optional inputs the function takes
    optional: frozenset[str]            # the op's optional inputs
    gqa: bool = True
    grouped_values: bool = True
    head_dims: tuple[int, ...] | None = None
    decode: Callable | None = None
    spec: str | None = None             # how a fresh process finds it again (--impl SPEC): module[:attr] or entry point
    module: str | None = None           # the module whose code registered it (None: the main script)
    version: str | None = None          # for the expected-failure list: "<name> <version>"
    record: OpRecord | None = None

    def unsupported(self, x: dict) -> str | None:
        """Why this implementation does not take the inputs x (canonical names), or None when it does."""
        given = sorted(n for n, t in x.items() if t is not None and n in self.optional and n not in self.takes)
        if given:
            return f"{self.name}'s {self.op} takes no {', '.join(given)}"
        q, k, v = x.get("q"), x.get("k"), x.get("v")
        if not self.gqa and q is not None and k is not None and q.shape[2] != k.shape[2]:
            return f"{self.name}'s {self.op} does not offer GQA (query heads {q.shape[2]}, key heads {k.shape[2]})"
        if not self.grouped_values and k is not None and v is not None and v.shape[2] != k.shape[2]:
            return (f"{self.name}'s {self.op} does not offer grouped value heads (value heads {v.shape[2]}, key "
                    f"heads {k.shape[2]})")
        if self.head_dims is not None and q is not None:
            dims = {q.shape[-1], v.shape[-1]} if v is not None else {q.shape[-1]}
            if not dims <= set(self.head_dims):
                return f"{self.name}'s {self.op} takes head dims {self.head_dims}, not {sorted(dims)}"
        return None


IMPLS: dict[tuple[str, str], Implementation] = {}     # (impl name, op name) -> registered implementation


def implement(base: OpRecord, fn: Callable, *, name: str, fp32_dot: str, passes: tuple[str, ...] | None = None,
              dtypes: tuple[str, ...] | None = None, gqa: bool = True, grouped_values: bool = True,
              head_dims: tuple[int, ...] | None = None, decode: Callable | None = None, spec: str | None = None,
              version: str | None = None) -> Implementation:
    """Register fn as implementation `name` of the op whose built-in record is `base`.  fn takes the op's
    canonical inputs by name and `scale`, and returns the record's outputs.  A bad declaration is a ValueError
    here, never a failing check later."""
    op = base.name
    if not isinstance(name, str) or not NAME.fullmatch(name) or name == BUILT_IN:
        raise ValueError(f"implementation name {name!r}: lower-case letters, digits and _, starting with a letter, "
                         f"not {BUILT_IN!r} (the built-in implementation)")
    if fp32_dot not in DOTS:
        raise ValueError(f"fp32_dot={fp32_dot!r}: say how fn's fp32 products round, one of {DOTS} (PyTorch's matmul "
                         "is ieee; Triton's tl.dot on NVIDIA GPUs is tf32 unless given input_precision='ieee')")
    if not callable(fn):
        raise ValueError(f"{name}: fn is not callable")
    passes = tuple(passes or tuple(p for p in base.passes))
    dtypes = tuple(dtypes or base.dtypes)
    for what, got, known in (("passes", passes, base.passes), ("dtypes", dtypes, DTYPES)):
        bad = [g for g in got if g not in known]
        if bad:
            raise ValueError(f"{name}: {what} {bad} not among the op's {known}")
    params = _parameters(fn)
    lacking = [n for n in (*base.required, "scale") if params is not None and n not in params]
    if lacking:
        raise ValueError(f"{name}: fn must take the op's inputs {base.required} and scale by name; it lacks "
                         f"{', '.join(lacking)}")
    takes = frozenset(base.optional if params is None else (n for n in base.optional if n in params))
    impl = Implementation(name, op, fn, fp32_dot, passes, dtypes, takes, frozenset(base.optional), gqa, grouped_values,
                          None if head_dims is None else tuple(head_dims), decode, spec, _caller_module(), version)
    key = (name, op)
    if key in IMPLS and IMPLS[key].fn is not fn:
        raise ValueError(f"implementation {name!r} of {op} is already registered (by {IMPLS[key].spec or 'a module'})")
    impl = dataclasses.replace(impl, record=bind(base, impl))
    IMPLS[key] = impl
    return impl


def _caller_module() -> str | None:
    """The module whose code called implement (the first frame outside this toolkit); None for the main script."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("pathmdn_verify"):
        frame = frame.f_back
    name = frame.f_globals.get("__name__") if frame is not None else None
    return None if name in (None, "__main__") else name


def _parameters(fn) -> set[str] | None:
    """The names fn takes (None when it takes **kwargs: then every input)."""
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in ps):
        return None
    return {p.name for p in ps if p.kind is not p.VAR_POSITIONAL}


def bind(base: OpRecord, impl: Implementation) -> OpRecord:
    """The op's record with impl's kernel and declarations: its own check ids (kernel.<impl>.<op>...), its dot
    format for the budgets, no fla-specific parts (stages, mutants, package lines, refusals)."""
    takes = impl.takes

    def kernel(scale=None, **x):
        return impl.fn(**{n: t for n, t in x.items() if n not in base.optional or n in takes}, scale=scale)

    def decode_kernel(scale=None, **x):
        return impl.decode(**{n: t for n, t in x.items() if n not in base.optional or n in takes}, scale=scale)

    # without impl.decode its decode checks exist and are skips (`offered`): they never call the kernel
    decode = base.decode and dataclasses.replace(base.decode, kernel=decode_kernel)
    return dataclasses.replace(
        base, impl=impl.name, kernel=kernel, dot=impl.fp32_dot, decode=decode,
        conventions=dataclasses.replace(base.conventions, dtypes=DTYPES),
        offered=lambda pass_, dtype: _offered(impl, pass_, dtype), unsupported=impl.unsupported,
        stages={}, mutants=(), not_reached={}, package=(), refusal=None, report=None, adapt_inputs=None)


def _offered(impl: Implementation, pass_: str, dtype: str) -> str | None:
    if pass_ in PASSES and pass_ not in impl.passes and not (pass_ == "decode" and impl.decode is not None):
        return f"{impl.name}'s {impl.op} offers no {pass_} pass"
    if dtype is not None and dtype not in impl.dtypes:
        return f"{impl.name}'s {impl.op} offers no {dtype}"
    return None


def registered(names: tuple[str, ...] | None = None) -> list[Implementation]:
    """The registered implementations (of the given names), in registration order."""
    return [i for i in IMPLS.values() if names is None or i.name in names]
