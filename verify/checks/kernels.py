"""kernel.<impl>.<op>.<pass>.<dtype>.<regime>: production kernels against the float64 oracles.

Each check runs a hypothesis search over cases of one regime (verify.strategies), climbing the
error/budget ratio, under the budget rule of verify.budget.  The constants c (how many times the
same-dtype PyTorch reference's error a kernel may make) are stated per family below, with the reason.
"""
from __future__ import annotations

import torch

from kernels import fla_ops
from references import mdn as MDN
from references import path_attn as P
from verify import lowprec
from verify.budget import Verdict, judge, worst
from verify.errors import UsageError
from verify.inputs import MdnCase, PathCase, as_oracle, floats_as, mdn_inputs, path_inputs
from verify.metrics import rel_err
from verify.precision import Precision
from verify.registry import Context, Result, register
from verify.search import Probe, search
from verify.strategies import BWD_MAX_T, FOX_REGIMES, MDN_REGIMES, PATH_REGIMES, mdn_cases, path_cases

# c per family.  Forward passes: the kernel performs the same rounded operations as the reference
# (same block size, same operand formats) in a different order of accumulation, so its error should be
# of the same size: c = 4 leaves a factor 2 for ordering and 2 for the spread between random inputs.
# Backward passes chain several rounded stages (recomputed logits, dP, the UT-transform backward),
# each of which can round where the reference does not: c = 8.
C = {"fwd": 4.0, "bwd": 8.0, "decode": 4.0}
# A token-by-token recurrence (fla's fused_recurrent MDN) is a different algorithm class from the
# chunkwise reference: its rounding errors accumulate over T sequential state updates instead of
# within one chunk, so the same constant would judge the algorithm, not the implementation.  Measured
# before choosing: over 20 seeds at T <= 160 its fp32 error reached 10 u normwise and 9x the chunkwise
# reference's max-abs error (deta); c doubles for this family.  Bugs of the kind the checks exist for
# (wrong coefficient, dropped state, wrong gate) give errors of order 1.
C_SEQUENTIAL = {"fwd": 8.0, "bwd": 16.0}


def prepare(ctx: Context) -> None:
    """On the CPU, install the interpreter fidelity layer before any kernel module is imported, and
    make fla pick the H200's tile sizes."""
    if ctx.device == "cpu":
        from verify import fidelity
        fidelity.prepare_cpu_kernels(ctx.fp32_dot)


def call_kernel(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except fla_ops.KernelUnavailable as exc:
        raise UsageError(str(exc)) from exc


def _tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def grads_of(fn, leaves: dict, upstream: list) -> dict:
    """Gradients of sum_i <out_i, upstream_i> with respect to every leaf."""
    live = {n: t.detach().clone().requires_grad_() for n, t in leaves.items()}
    outs = _tuple(fn(**live))
    torch.autograd.backward(list(outs), [u.to(o.dtype) for o, u in zip(outs, upstream)])
    return {n: torch.zeros_like(t) if t.grad is None else t.grad for n, t in live.items()}   # unused: zero


def _upstream(like: torch.Tensor, dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + 7919)
    return torch.randn(like.shape, generator=gen, dtype=torch.float64).to(dtype).to(like.device)


def compare(pass_: str, names: list[str], kernel_fn, oracle_fn, ref_fn, x: dict, prec: Precision,
            c: float, seed: int, float_names: tuple[str, ...], terms_fn=None) -> list[Verdict]:
    """fwd: judge each output; bwd: judge the gradient of every present input in float_names, for one
    random upstream gradient (in the kernel dtype, the same values for kernel, oracle and reference).
    terms_fn(**float64 inputs) -> {output name: magnitude of the terms summed into it} (verify.budget)."""
    x64 = as_oracle(x)
    x32 = floats_as(x, torch.float32)
    with torch.no_grad():
        oracle = _tuple(oracle_fn(**x64))
    if pass_ == "fwd":
        with torch.no_grad():
            outs, ref = _tuple(call_kernel(kernel_fn, **x)), _tuple(ref_fn(**x32))
        scale = max(float(o.abs().max()) if o.numel() else 0.0 for o in oracle)
        terms = terms_fn(**x64) if terms_fn else {}
        return [judge(n, o, r64, r, prec, c, scale, terms.get(n)) for n, o, r64, r in zip(names, outs, oracle, ref)]
    ups = [_upstream(o, prec.torch_dtype, seed + i) for i, o in enumerate(oracle)]
    leaves = [n for n in float_names if x.get(n) is not None]
    g_k = call_kernel(grads_of, lambda **kw: kernel_fn(**{**x, **kw}), {n: x[n] for n in leaves}, ups)
    g_o = grads_of(lambda **kw: oracle_fn(**{**x64, **kw}), {n: x64[n] for n in leaves}, ups)
    g_r = grads_of(lambda **kw: ref_fn(**{**x32, **kw}), {n: x32[n] for n in leaves}, ups)
    scale = max(float(g.abs().max()) if g.numel() else 0.0 for g in g_o.values())
    return [judge("d" + n, g_k[n], g_o[n], g_r[n], prec, c, scale) for n in leaves]


# --------------------------------------------------------------------------------------------- PaTH


def _path_probe(case: PathCase, dtype: str, pass_: str, ctx: Context, fox: bool) -> Probe:
    prec = Precision.of(dtype, ctx.fp32_dot)
    x = path_inputs(case, prec.torch_dtype, ctx.device)
    scale = case.D ** -0.5
    if fox:
        conv = fla_ops.FOX_CONVENTIONS
        x = {n: x[n] for n in ("q", "k", "v", "g", "cu_seqlens")}
        kernel = lambda **a: fla_ops.forgetting_attn(**a, scale=scale)
        oracle = lambda **a: P.fox_attn(**a, scale=scale, gate_scaled=conv.gate_scaled)
        ref = lambda **a: lowprec.fox_attn(**a, prec=prec, scale=scale, gate_scaled=conv.gate_scaled)
        floats = ("q", "k", "v", "g")
    else:
        conv = fla_ops.PATH_CONVENTIONS
        kernel = lambda **a: fla_ops.path_attn(**a, scale=scale)
        oracle = lambda **a: P.path_attn(**a, scale=scale, gate_scaled=conv.gate_scaled)
        ref = lambda **a: lowprec.path_attn(**a, prec=prec, scale=scale, gate_scaled=conv.gate_scaled)
        floats = ("q", "k", "v", "w", "beta", "g")
    verdicts = compare(pass_, ["o"], kernel, oracle, ref, x, prec, C[pass_], case.seed, floats)
    return Probe(worst(verdicts), case.label(), {"tensors": [v.summary() for v in verdicts]})


def _register_path(op: str, regimes: dict, fox: bool) -> None:
    for pass_ in ("fwd", "bwd"):
        for dtype in ("bf16", "fp32"):
            for regime, fields in regimes.items():
                cid = f"kernel.fla.{op}.{pass_}.{dtype}.{regime}"

                def run(ctx: Context, fields=fields, pass_=pass_, dtype=dtype, cid=cid) -> Result:
                    prepare(ctx)
                    strategy = path_cases(fields, ctx.profile, gated=True if fox else None,
                                          max_T=BWD_MAX_T[ctx.profile] if pass_ == "bwd" else None)
                    return search(strategy, lambda case: _path_probe(case, dtype, pass_, ctx, fox), ctx, cid)
                what = "forward output" if pass_ == "fwd" else "gradients"
                register(cid, f"fla {op} {what} in {dtype}, regime {regime}, within c={C[pass_]:g} x torch-{dtype} error",
                         run)


_register_path("path_attn", PATH_REGIMES, fox=False)
_register_path("forgetting_attn", FOX_REGIMES, fox=True)


def _decode_probe(case: PathCase, dtype: str, ctx: Context) -> Probe:
    prec = Precision.of(dtype, ctx.fp32_dot)
    x = path_inputs(case, prec.torch_dtype, ctx.device)
    x64 = as_oracle(x)
    out = call_kernel(fla_ops.path_attn_cache, **x)
    oracle = P.decode_cache(x64["k"], x64["w"], x64["beta"])
    ref = lowprec.decode_keys(x["k"].float(), x["w"].float(), x["beta"].float(), prec)
    v = judge("k_cache", out, oracle, ref, prec, C["decode"])
    return Probe(v, case.label(), {})


for _dtype in ("bf16", "fp32"):
    for _regime in ("beta_uniform", "beta_near2"):
        _cid = f"kernel.fla.path_attn.decode.{_dtype}.{_regime}"

        def _run_decode(ctx, dtype=_dtype, regime=_regime, cid=_cid):
            prepare(ctx)
            return search(path_cases(PATH_REGIMES[regime], ctx.profile, gated=False, varlen=False),
                          lambda case: _decode_probe(case, dtype, ctx), ctx, cid)
        register(_cid, f"fla path_attn decode cache (use_cache=True) in {_dtype}, regime {_regime}", _run_decode)


# ---------------------------------------------------------------------------------------------- MDN

MDN_OPS = {"mdn_chunk16": 16, "mdn_chunk32": 32, "mdn_chunk64": 64, "mdn_recurrent": None}
MDN_DOT = "ieee"    # fla's MDN is PyTorch code: its fp32 matmuls are IEEE (torch's default), not Triton TF32 dots


def _mdn_c(chunk, pass_: str) -> float:
    return (C if chunk else C_SEQUENTIAL)[pass_]


def _mdn_probe(case: MdnCase, dtype: str, pass_: str, chunk, ctx: Context) -> Probe:
    prec = Precision.of(dtype, MDN_DOT)
    x = mdn_inputs(case, prec.torch_dtype, ctx.device)
    kernel = lambda **a: fla_ops.mdn(**a, chunk=chunk)
    oracle = lambda **a: MDN.recurrence(**a)
    ref = lambda **a: lowprec.mdn(**a, prec=prec)
    terms = lambda **a: {"o": MDN.recurrence(**a, abs_output=True)[0]}
    floats = ("q", "k", "v", "log_alpha", "log_mu", "beta", "eta", "S0", "M0")
    verdicts = compare(pass_, ["o", "S_T", "M_T"], kernel, oracle, ref, x, prec, _mdn_c(chunk, pass_), case.seed,
                       floats, terms)
    return Probe(worst(verdicts), case.label(), {"tensors": [v.summary() for v in verdicts]})


for _op, _chunk in MDN_OPS.items():
    _conv = fla_ops.MDN_RECURRENT_CONVENTIONS if _chunk is None else fla_ops.MDN_CONVENTIONS
    for _pass in ("fwd", "bwd"):
        for _dtype in _conv.dtypes:
            for _regime, _fields in MDN_REGIMES.items():
                _cid = f"kernel.fla.{_op}.{_pass}.{_dtype}.{_regime}"

                def _run_mdn(ctx, fields=_fields, pass_=_pass, dtype=_dtype, chunk=_chunk, cid=_cid):
                    prepare(ctx)
                    max_T = BWD_MAX_T[ctx.profile] if pass_ == "bwd" else None
                    return search(mdn_cases(fields, ctx.profile, max_T),
                                  lambda case: _mdn_probe(case, dtype, pass_, chunk, ctx), ctx, cid)
                what = "output and final states" if _pass == "fwd" else "gradients"
                register(_cid, f"fla {_op} {what} in {_dtype}, regime {_regime}, "
                               f"within c={_mdn_c(_chunk, _pass):g} x torch-{_dtype}",
                         _run_mdn)


# ------------------------------------------------------------------------------------- conventions
# Each declared convention is measured: the kernel must agree with the oracle under the declared
# convention (within its forward budget) and disagree with the alternative by more than 10x that budget.


def _convention_check(cid: str, description: str, make):
    """make(ctx) -> (kernel output, oracle under the declared convention, oracle under the alternative,
    same-dtype reference, Precision, what the alternative is)."""
    def run(ctx: Context) -> Result:
        prepare(ctx)
        out, declared, other, ref, prec, alternative = make(ctx)
        v = judge("o", out, declared, ref, prec, C["fwd"])
        other_ratio = rel_err(out, other) / v.budget_rel
        ok = v.ratio <= 1 and other_ratio > 10
        return Result("pass" if ok else "fail", v.measured, v.budget,
                      f"declared convention: {v.summary()}; alternative ({alternative}): rel error "
                      f"{rel_err(out, other):.2e} = {other_ratio:.0f}x the relative budget -> "
                      + ("declared convention confirmed" if ok else "DECLARED CONVENTION NOT CONFIRMED"))
    register(cid, description, run)


def _path_convention(fox: bool, what: str):
    def make(ctx):
        prec = Precision.of("fp32", ctx.fp32_dot)
        case = PathCase(T=64, D=16, Dv=32, gate="mixed", seed=3)   # Dv != D: shows a K/V head-dim mix-up
        x = path_inputs(case, prec.torch_dtype, ctx.device)
        x64, x32 = as_oracle(x), floats_as(x, torch.float32)
        conv = fla_ops.FOX_CONVENTIONS if fox else fla_ops.PATH_CONVENTIONS
        s = case.D ** -0.5
        if fox:
            x, x64, x32 = ({n: d[n] for n in ("q", "k", "v", "g", "cu_seqlens")} for d in (x, x64, x32))
            out = call_kernel(fla_ops.forgetting_attn, **x, scale=None if what == "scale" else s)
            oracle = lambda scale, gs: P.fox_attn(**x64, scale=scale, gate_scaled=gs)
            ref = lowprec.fox_attn(**x32, prec=prec, scale=s, gate_scaled=conv.gate_scaled)
        else:
            out = call_kernel(fla_ops.path_attn, **x, scale=None if what == "scale" else s)
            oracle = lambda scale, gs: P.path_attn(**x64, scale=scale, gate_scaled=gs)
            ref = lowprec.path_attn(**x32, prec=prec, scale=s, gate_scaled=conv.gate_scaled)
        if what == "gate":
            return (out, oracle(s, conv.gate_scaled), oracle(s, not conv.gate_scaled), ref, prec,
                    f"gate_scaled={not conv.gate_scaled}")
        return out, oracle(s, conv.gate_scaled), oracle(1.0, conv.gate_scaled), ref, prec, "scale=None means 1"
    return make


for _op, _fox in (("path_attn", False), ("forgetting_attn", True)):
    _convention_check(f"kernel.fla.{_op}.convention.gate_scaled",
                      f"measures whether fla {_op} multiplies the log forget gate by the attention scale",
                      _path_convention(_fox, "gate"))
    _convention_check(f"kernel.fla.{_op}.convention.scale_default",
                      f"measures that fla {_op} with scale=None uses 1/sqrt(D)", _path_convention(_fox, "scale"))


def _mdn_convention(what: str):
    def make(ctx):
        prec = Precision.of("fp32", MDN_DOT)
        case = MdnCase(T=40, Dk=16, Dv=16, seed=5)
        x = mdn_inputs(case, torch.float32, ctx.device)
        x64 = as_oracle(x)
        s = case.Dk ** -0.5
        out = call_kernel(fla_ops.mdn, **x, scale=None)[0]
        ref = lowprec.mdn(**floats_as(x, torch.float32), prec=prec, scale=s)[0]
        declared = MDN.recurrence(**x64, scale=s)[0]
        if what == "residual":
            return out, declared, MDN.recurrence(**x64, p=x64["k"], scale=s)[0], ref, prec, "p_t = k_t (no alpha)"
        return out, declared, MDN.recurrence(**x64, scale=1.0)[0], ref, prec, "scale=None means 1"
    return make


_convention_check("kernel.fla.mdn_recurrent.convention.residual_alpha_k",
                  "measures that fla's MDN residual uses p_t = alpha_t k_t by default (use_p_times_alpha)",
                  _mdn_convention("residual"))
_convention_check("kernel.fla.mdn_recurrent.convention.scale_default",
                  "measures that fla's MDN with scale=None uses 1/sqrt(Dk)", _mdn_convention("scale"))
