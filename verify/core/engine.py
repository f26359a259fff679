"""The comparison engine: run one kernel op, its float64 oracle and its same-dtype implementation on the same
inputs and judge every output or gradient under the budget rule (pathmdn_verify.core.budget, with the op's budget
factor c).  The kernel check family (pathmdn_verify.checks.kernel_checks), `verify compare`, localize, the sanitizer,
bisect and the report all measure through here; nothing here registers a check.

Each declared convention is measured here too (`convention_result`): the kernel must agree with the oracle
under the declared convention (within its forward budget) and disagree with the alternative by more than
10x that budget.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from pathmdn_verify.core import contract, hooks
from pathmdn_verify.core.budget import Budget, OracleFailed, Verdict, budget, judged, verdict, worst
from pathmdn_verify.core.errors import KernelUnavailable, UsageError, VariantUnsupported
from pathmdn_verify.core.inputs import as_oracle, floats_as, on_device
from pathmdn_verify.core.metrics import rel_err
from pathmdn_verify.core.precision import UNIT_ROUNDOFF, Precision
from pathmdn_verify.core.records import OpRecord, as_tuple, scale_of
from pathmdn_verify.core.registry import Context, Result
from pathmdn_verify.core.search import Probe


def call_kernel(fn, *args, **kwargs):
    """fn(*args, **kwargs), an implementation's code: a kernel package it cannot use is a usage error."""
    try:
        return fn(*args, **kwargs)
    except KernelUnavailable as exc:
        raise UsageError(str(exc)) from exc


def grads_of(fn, leaves: dict, upstream, returned=as_tuple) -> dict:
    """Gradients of sum_i <out_i, u_i> with respect to every leaf, u = upstream(outputs of fn); an output an
    option turned off (None) takes no upstream gradient.  returned(what fn returns) -> the outputs (the return
    contract, for a kernel)."""
    live = {n: t.detach().clone().requires_grad_() for n, t in leaves.items()}
    outs = returned(fn(**live))
    pairs = [(o, u.to(o.dtype)) for o, u in zip(outs, upstream(outs)) if o is not None]
    torch.autograd.backward([o for o, _ in pairs], [u for _, u in pairs])
    return {n: torch.zeros_like(t) if t.grad is None else t.grad for n, t in live.items()}   # unused: zero


def _upstream(like: torch.Tensor | None, dtype, seed: int, strided: bool = False) -> torch.Tensor | None:
    """A random upstream gradient shaped like `like` (None for an output that is None); strided: every other
    element of a tensor twice as long in its last dim, a view that is not contiguous (a layer's gradient
    arriving through a slice or a transpose), the same values on every call."""
    if like is None:
        return None
    gen = torch.Generator().manual_seed(seed + 7919)
    if strided:
        wide = torch.randn(*like.shape[:-1], 2 * like.shape[-1], generator=gen, dtype=torch.float64)
        return wide.to(dtype).to(like.device)[..., ::2]
    return torch.randn(like.shape, generator=gen, dtype=torch.float64).to(dtype).to(like.device)


def reference_device(op: OpRecord, ctx: Context, device: str) -> str:
    """Where op's oracle and same-dtype implementation run: --references cpu or device, or under auto the
    record's choice (op.references: "cpu", or "device": the kernel's device)."""
    return place_references(op.references, ctx, device)


def place_references(auto: str, ctx: Context, device: str) -> str:
    """--references cpu or device, or under auto the choice `auto` ("cpu", or "device": `device`)."""
    choice = auto if ctx.references == "auto" else ctx.references
    return "cpu" if choice == "cpu" else device


@dataclass(frozen=True)
class Expected:
    """One tensor a pass judges: its float64 answer and its budget, computed without the kernel (None, None: an
    output an option turns off)."""
    name: str             # an output's name, or "d" + an input's for a gradient
    oracle: torch.Tensor | None
    budget: Budget | None


def upstream(op: OpRecord, outs, prec: Precision, seed: int, strided: bool = False) -> list[torch.Tensor | None]:
    """The backward's upstream gradients u_i for the outputs outs (shapes only; the same values for kernel,
    oracle and the same-dtype implementation), in the kernel dtype, from the case's seed (strided: views that
    are not contiguous)."""
    return [_upstream(o, prec.torch_dtype, seed + i, strided) for i, o in enumerate(outs)]


def grad_leaves(op: OpRecord, x: dict) -> list[str]:
    """The inputs whose gradients the backward judges: op.grad_inputs that x holds."""
    return [n for n in op.grad_inputs if x.get(n) is not None]


def expectations(op: OpRecord, pass_: str, x: dict, prec: Precision, seed: int, ref: str | None = None,
                 shapes: list | None = None, strided: bool = False) -> list[Expected]:
    """fwd: each output of op; bwd: the gradient of every input in grad_leaves, of sum_i <out_i, u_i> (upstream,
    strided or not); each with its float64 answer and its budget (pathmdn_verify.core.budget), computed on ref
    (default: x's device).  shapes, a list, gets the shapes of the op's outputs (the return contract's; None for an
    output an option turns off)."""
    shapes = [] if shapes is None else shapes
    c = op.budget_factor[pass_]
    s = scale_of(x)
    oracle = _guarded("float64 oracle", lambda **a: op.oracle(**a, scale=s))
    oracle_terms = _guarded("float64 oracle", lambda **a: op.terms(**a, scale=s))
    same_dtype = _guarded("same-dtype implementation", lambda **a: op.same_dtype(**a, prec=prec, scale=s))
    ref = ref or x[op.required[0]].device.type
    x64 = on_device(as_oracle(x), ref)
    x32 = on_device(floats_as(x, torch.float32), ref)
    if pass_ == "fwd":
        with torch.no_grad():
            with hooks.phase("oracle", ref):      # and the summed |terms| of the budget's floor, where the op has them
                expected, terms = oracle_terms(**x64) if op.terms else (as_tuple(oracle(**x64)), {})
            with hooks.phase("same_dtype", ref):
                same = as_tuple(same_dtype(**x32))
        shapes += [None if o is None else o.shape for o in expected]
        scale = max(float(o.abs().max()) if o is not None and o.numel() else 0.0 for o in expected)
        return [Expected(n, r64, None if r64 is None else budget(r64, r, prec, c, scale, terms.get(n)))
                for n, r64, r in zip(op.outputs, expected, same, strict=True)]
    ups = lambda outs: upstream(op, outs, prec, seed, strided)
    leaves = grad_leaves(op, x)
    with hooks.phase("oracle", ref):
        g_o = grads_of(lambda **kw: oracle(**{**x64, **kw}), {n: x64[n] for n in leaves}, ups,
                       lambda raw: shapes.extend(None if o is None else o.shape for o in as_tuple(raw))
                       or as_tuple(raw))
        terms = op.grad_terms(ups, scale=s, **x64) if op.grad_terms else {}
    with hooks.phase("same_dtype", ref):
        g_r = grads_of(lambda **kw: same_dtype(**{**x32, **kw}), {n: x32[n] for n in leaves}, ups)
    scale = max(float(g.abs().max()) if g.numel() else 0.0 for g in g_o.values())
    # a gradient's summands are each rounded once by an fp32 accumulator (budget.py)
    floor = lambda n: (terms[n], UNIT_ROUNDOFF["fp32"]) if n in terms else ()
    return [Expected("d" + n, g_o[n], budget(g_o[n], g_r[n], prec, c, scale, *floor(n))) for n in leaves]


def kernel_outputs(op: OpRecord, pass_: str, x: dict, prec: Precision, seed: int,
                   returned: list | None = None, strided: bool = False) -> list[torch.Tensor | None]:
    """What the kernel gives for the tensors `expectations` lists, in the same order.  What it returns is held to
    the op's return contract first (pathmdn_verify.core.contract: how many, dtype, device); returned, a list, gets
    those outputs (their shapes are checked against the oracle's by the caller)."""
    s = scale_of(x)
    dev = x[op.required[0]].device.type
    kernel = lambda **a: op.kernel(**a, scale=s)
    returned = [] if returned is None else returned
    check = lambda raw: returned.extend(contract.outputs(op, raw, prec.torch_dtype, dev, x=x)) or tuple(returned)  # noqa: E731
    with hooks.phase("kernel", dev):
        if pass_ == "fwd":
            with torch.no_grad():
                return list(check(call_kernel(kernel, **x)))
        leaves = grad_leaves(op, x)
        g_k = call_kernel(kernel_grads, op, lambda **kw: kernel(**{**x, **kw}), {n: x[n] for n in leaves},
                          lambda outs: upstream(op, outs, prec, seed, strided), check)
    return [g_k[n] for n in leaves]


def measure(op: OpRecord, pass_: str, x: dict, prec: Precision, seed: int, ref: str | None = None,
            strided: bool = False) -> list[Verdict]:
    """fwd: judge each output of op (an output that an option turns off is None in kernel and oracle alike);
    bwd: judge the gradient of every present input in op.grad_inputs, for one random upstream gradient (in the
    kernel dtype, the same values for kernel, oracle and the same-dtype implementation; strided: a view that is
    not contiguous).  The kernel runs first: a variant it does not offer stops before the oracle's cost.
    ref: the device of the oracle and the same-dtype implementation (default: the kernel's); the kernel's
    tensors are judged there."""
    returned, shapes = [], []
    outs = kernel_outputs(op, pass_, x, prec, seed, returned, strided)
    dev = x[op.required[0]].device.type
    expected = expectations(op, pass_, x, prec, seed, ref or dev, shapes, strided)
    contract.shapes(op, returned, shapes, prec.torch_dtype, dev, x=x)
    return [_absent(e.name, out, e.oracle) or judged(e.name, out.to(ref or dev), e.oracle, e.budget)
            for e, out in zip(expected, outs, strict=True) if out is not None or e.oracle is not None]


def _absent(name: str, out, expected) -> Verdict | None:
    """A failing verdict when exactly one of the kernel's and the oracle's output is None (an option that should
    turn the output on or off), else None."""
    if (out is None) == (expected is None):
        return None
    return Verdict(name, math.inf, math.inf, 1.0, 1.0, 0.0, 0.0,
                   error=f"the kernel returned {'None' if out is None else 'a tensor'} where the oracle returns "
                         f"{'None' if expected is None else 'a tensor'}")


def _guarded(what: str, fn):
    """fn, with any exception it raises turned into OracleFailed naming the inputs' shapes."""
    def call(**x):
        try:
            return fn(**x)
        except Exception as exc:
            shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in x.items() if isinstance(t, torch.Tensor))
            raise OracleFailed(f"the {what} raised on inputs {shapes}: {type(exc).__name__}: {exc}"
                               .splitlines()[0]) from exc
    return call


def kernel_grads(op: OpRecord, fn, leaves: dict, upstream, returned=as_tuple) -> dict:
    """grads_of for the kernel; what the implementation's record calls its own refusal (`op.refusal`: fla's
    missing backward) is a variant it does not offer."""
    try:
        return grads_of(fn, leaves, upstream, returned)
    except UsageError:
        raise
    except Exception as exc:
        reason = op.refusal(exc) if op.refusal else None
        if reason:
            raise VariantUnsupported(reason) from exc
        raise


def case_inputs(op: OpRecord, case, dtype, device: str) -> dict:
    """op's inputs of case; VariantUnsupported when the implementation does not take them (op.unsupported)."""
    x = op.inputs(case, dtype, device)
    x = call_kernel(op.adapt_inputs, x) if op.adapt_inputs else x     # it may import the kernel package
    why = op.unsupported(x) if op.unsupported else None
    if why:
        raise VariantUnsupported(why)
    return x


def probe(op: OpRecord, case, dtype: str, pass_: str, ctx: Context) -> Probe:
    """One evaluation of a kernel check: the worst tensor verdict, the case and every tensor's verdict (under
    --configs all, of the worst config round: `_rounds`)."""
    prec = Precision.of_op(op, dtype, ctx.fp32_dot)
    x = case_inputs(op, case, prec.torch_dtype, ctx.device)
    ref = reference_device(op, ctx, ctx.device)
    strided = getattr(case, "strided_upstream", False)      # a case field of ops whose structure varies it
    return _rounds(hooks.every_config(lambda: measure(op, pass_, x, prec, case.seed, ref, strided)), case.label())


def measure_decode(op: OpRecord, x: dict, prec: Precision, ref: str | None = None) -> list[Verdict]:
    """The decode pass: judge the record's decode output (op.decode) on x; ref as in `measure`."""
    d = op.decode
    dev = x[op.required[0]].device.type
    ref = ref or dev
    with hooks.phase("kernel", dev):
        [out] = contract.outputs(op, call_kernel(d.kernel, **x, scale=scale_of(x)), prec.torch_dtype, dev, (d.output,))
    with hooks.phase("oracle", ref):
        expected = d.oracle(**on_device(as_oracle(x), ref))
    with hooks.phase("same_dtype", ref):
        same = d.same_dtype(**on_device(floats_as(x, torch.float32), ref), prec=prec)
    contract.shapes(op, (out,), (expected.shape,), prec.torch_dtype, dev, (d.output,))
    return [verdict(d.output, out.to(ref), expected, same, prec, op.budget_factor["decode"])]


def decode_probe(op: OpRecord, case, dtype: str, ctx: Context) -> Probe:
    prec = Precision.of_op(op, dtype, ctx.fp32_dot)
    x = case_inputs(op, case, prec.torch_dtype, ctx.device)
    ref = reference_device(op, ctx, ctx.device)
    return _rounds(hooks.every_config(lambda: measure_decode(op, x, prec, ref)), case.label())


def _rounds(rounds: list[list[Verdict]], label: str) -> Probe:
    """The Probe of the worst round; with several rounds (--configs all) the label names the rounds that
    failed and that passed, so a config-dependent failure says which configs."""
    worsts = [worst(vs) for vs in rounds]
    r = max(range(len(rounds)), key=lambda i: worsts[i].ratio)
    details = {"tensors": [v.as_json() for v in rounds[r]]}
    if len(rounds) > 1:
        failed = [i for i, w in enumerate(worsts) if w.ratio > 1]
        details["config_rounds"] = {"rounds": len(rounds), "failed": failed, "worst": r}
        if failed and len(failed) < len(rounds):
            label += (f" [--configs all: fails in config rounds {failed}, passes in the other "
                      f"{len(rounds) - len(failed)} of {len(rounds)}; round r runs config r mod n of each kernel]")
    return Probe(worsts[r], label, details)


def saved_inputs(op: OpRecord, case, dtype: str, pass_: str) -> tuple[dict, list[str]]:
    """What `--save-failing` writes for a failing case: the op's inputs as `verify compare` loads them, and
    the compare arguments that replay the check (the upstream gradient of bwd comes from the case's seed)."""
    x = {n: t for n, t in op.inputs(case, Precision.of(dtype, "ieee").torch_dtype, "cpu").items() if t is not None}
    return x, ["--op", op.name, "--dtype", dtype, "--pass", pass_, "--seed", str(case.seed)]


def convention_result(op: OpRecord, p, ctx: Context) -> Result:
    """In fp32 where the implementation takes it (the smallest budget), else in its first dtype."""
    offered = [d for d in op.dtypes if not (op.offered and op.offered("fwd", d))]
    if not offered:
        raise VariantUnsupported(op.offered("fwd", op.dtypes[0]))
    prec = Precision.of_op(op, "fp32" if "fp32" in offered else offered[0], ctx.fp32_dot)
    x = case_inputs(op, p.case, prec.torch_dtype, ctx.device)
    if p.kind in ("no_effect", "refused"):
        return option_result(op, p, x)
    x64, x32, s = as_oracle(x), floats_as(x, torch.float32), scale_of(x)
    i = op.outputs.index(p.output)
    oracle = lambda scale, **a: op.oracle(**a, scale=scale)                                   # noqa: E731
    same_dtype = lambda scale, **a: op.same_dtype(**a, prec=prec, scale=scale)                # noqa: E731
    meaning = p.meaning or (lambda fn, a, scale: fn(**a, scale=scale))
    outs = contract.outputs(op, call_kernel(p.given, op, x, s) if p.given else
                            call_kernel(op.kernel, **x, scale=None if p.kernel_scale_none else s), prec.torch_dtype,
                            ctx.device, x=x)
    expected = as_tuple(meaning(oracle, x64, s))
    contract.shapes(op, outs, [None if e is None else e.shape for e in expected], prec.torch_dtype, ctx.device, x=x)
    out, declared = outs[i], expected[i]
    other = as_tuple(p.alternative(op, x64, s) if p.alternative else op.oracle(**x64, scale=s))[i]
    same = as_tuple(meaning(same_dtype, x32, s))[i]
    v = verdict(p.output, out, declared, same, prec, op.budget_factor["fwd"])
    other_ratio = rel_err(out, other) / v.budget_rel
    ok = v.ratio <= 1 and (other_ratio > 10 or not p.discriminates)
    return Result("pass" if ok else "fail", v.measured, v.budget,
                  f"declared convention: {v.summary()}; alternative ({p.what_else}): rel error "
                  f"{rel_err(out, other):.2e} = {other_ratio:.0f}x the relative budget -> "
                  + ("declared convention confirmed" if ok else "DECLARED CONVENTION NOT CONFIRMED"),
                  details={"tensors": [v.as_json()], "alternative_ratio": other_ratio if math.isfinite(other_ratio) else None},
                  kind=None if ok else "over_budget", measure=v.decided_by)


def option_result(op: OpRecord, p, x: dict) -> Result:
    """A probe of an entry point's option (ConventionProbe kinds): "no_effect" passes when the kernel's outputs
    with the option given (p.given) are the same bits as without it; "refused" when p.given raises an error
    matching p.what_else (the kernel's own outputs are not computed)."""
    s = scale_of(x)
    given = ", ".join(p.options)
    if p.kind == "refused":
        try:
            call_kernel(p.given, op, x, s)
        except (UsageError, VariantUnsupported):      # a tree whose entry point lacks the option: not offered there
            raise
        except Exception as exc:
            said = f"{type(exc).__name__}: {exc}".splitlines()[0]
            ok = re.search(p.what_else, said) is not None
            return Result("pass" if ok else "fail", message=f"{given} given: raised {said} -> "
                          + ("refused as declared" if ok else f"RAISED, BUT NOT AS DECLARED ({p.what_else})"),
                          kind=None if ok else "exception")
        return Result("fail", message=f"{given} given: the implementation took it (declared refused: "
                                      f"{p.what_else}); vary it instead", kind="over_budget")
    plain = as_tuple(call_kernel(op.kernel, **x, scale=s))
    other = as_tuple(call_kernel(p.given, op, x, s))
    differ = [n for n, a, b in zip(op.outputs, plain, other) if not _same_bits(a, b)]
    return Result("fail" if differ else "pass", message=f"{given} given: " + (
        f"{', '.join(differ)} differ from the call without it (declared no effect)" if differ else
        f"every output ({', '.join(op.outputs)}) the same bits as without it"), kind="over_budget" if differ else None)


def _same_bits(a, b) -> bool:
    """Both None, or tensors of one dtype and shape with equal values (NaN equal to NaN)."""
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a.nan_to_num(0.5), b.nan_to_num(0.5))) \
        and bool(torch.equal(a.isnan(), b.isnan()))
