"""Canaries for the interpreter fidelity layer (verify/platform/fidelity.py, docs/design.md section 8).

env.interpreter.<part>: a tiny Triton kernel, run under the layer on the CPU (or natively with
--device cuda), against the GPU behaviour computed exactly here.  Each fails when its part is off or
when Triton changes underneath.  env.interpreter.upstream_bug.<part> (CPU only) runs the same kernel on
the RAW interpreter (fidelity.bypassed()) and passes while the upstream bug is still there; when it
fails, upstream has changed and the patch can probably go (its own canary says whether it still fits).

Importing this module defines no kernel and sets nothing: kernels are built on first use, after the
layer is active.
"""
from __future__ import annotations

import contextlib
import math
import os
from fractions import Fraction

from pathmdn_verify.core.bits import (
    bf16_rne,
    f32_bits,
    f32_rne,
    f32_from_bits,
    round_tf32_half_away,
    truncate_tf32,
)
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import Context, Result, check, rejects, within

_KERNELS: dict = {}


# ------------------------------------------------------------------------------------------------
# set-up

def _setup(ctx: Context):
    """Activate the layer on cpu (ctx.fp32_dot gives the mode); on cuda require a native GPU run.
    Returns (torch, device string)."""
    from pathmdn_verify.platform import fidelity
    if ctx.device == "cpu":
        if fidelity.is_active():
            installed = fidelity._state["installed"]
            fidelity.activate(fp32_dot=ctx.fp32_dot, parts=installed)   # only switches the fp32 mode
        else:
            fidelity.activate(fp32_dot=ctx.fp32_dot)
        import torch
        return torch, "cpu"
    if ctx.device == "cuda":
        if fidelity.is_active() or os.environ.get("TRITON_INTERPRET") == "1":
            raise UsageError("--device cuda runs Triton natively, but the interpreter is on in this process")
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: torch sees no CUDA device")
        return torch, "cuda"
    raise UsageError(f"unknown device {ctx.device!r}")


def _k():
    """The canary kernels, defined once, after _setup (so that they are interpreted on cpu)."""
    if _KERNELS:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                   PREC: tl.constexpr):
        rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
        if PREC == "default":
            c = tl.dot(a, b)
        elif PREC == "no_tf32":
            c = tl.dot(a, b, allow_tf32=False)
        else:
            c = tl.dot(a, b, input_precision=PREC)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)

    @triton.jit
    def cast_kernel(x_ptr, y_ptr, N: tl.constexpr, DST: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(y_ptr + r, tl.load(x_ptr + r).to(DST))

    @triton.jit
    def double_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(o_ptr + r, tl.load(x_ptr + r, mask=r < n) * 2, mask=r < n)

    @triton.jit
    def index_kernel(o_ptr, N: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros([N], dtype=tl.int32)
        for i in range(pid * 2, pid * 2 + 2):      # range() over a program_id-derived value
            acc += i
        tl.store(o_ptr + pid * N + tl.arange(0, N), acc)

    @triton.jit
    def bf16_arith_kernel(x_ptr, y_ptr, o_ptr, N: tl.constexpr, OP: tl.constexpr):
        r = tl.arange(0, N)
        x = tl.load(x_ptr + r)
        y = tl.load(y_ptr + r)
        if OP == 3:
            tl.store(o_ptr, tl.sum(x, 0))                  # a bf16 reduction
        else:
            if OP == 0:
                o = x + y
            elif OP == 1:
                o = x * y
            elif OP == 2:
                o = tl.where(x < y, x, y)                  # a bf16 comparison
            elif OP == 4:
                o = -x
            elif OP == 5:
                o = x - y
            elif OP == 6:
                o = tl.maximum(x, y)
            elif OP == 7:
                o = x * 0.3                                # a Python float constant (builder.get_bf16)
            elif OP == 8:
                o = x * 1e-7
            elif OP == 9:
                o = x * y + x                              # contracted to fma.rn.bf16 on sm_90
            else:
                o = x - x * y
            tl.store(o_ptr + r, o)

    globals()["alias_exp"] = tl.exp                           # a module-level alias, like `exp = tl.exp`

    @triton.jit
    def alias_kernel(x_ptr, o_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(o_ptr + r, alias_exp(tl.load(x_ptr + r)))    # noqa: F821 (defined just above)

    @triton.jit
    def loop_kernel(o_ptr, n, N: tl.constexpr):
        acc = tl.zeros([N], dtype=tl.int64)
        for i in range(N):                                 # the GPU's induction variable is an int32 tensor
            acc += i.to(tl.int64) * 3
        for j in tl.range(0, n, 2):                        # also with a runtime bound
            acc += j.to(tl.int64)
        tl.store(o_ptr + tl.arange(0, N), acc)

    @triton.jit
    def fp32_fma_kernel(x_ptr, y_ptr, z_ptr, o_ptr, N: tl.constexpr, OP: tl.constexpr):
        r = tl.arange(0, N)
        x = tl.load(x_ptr + r)
        y = tl.load(y_ptr + r)
        z = tl.load(z_ptr + r)
        if OP == 0:
            o = x * y - z                                  # fma.rn.f32 on sm_90: the product unrounded
        elif OP == 1:
            o = z + x * y                                  # the product on the right: fused as well
        elif OP == 2:
            o = tl.where(x > -1e30, x * y, 0.0) - z        # through a select: the product rounded first
        else:
            o = tl.fma(x, y, -z)                           # explicit: one rounding
        tl.store(o_ptr + r, o)

    _KERNELS.update(dot=dot_kernel, cast=cast_kernel, double=double_kernel, index=index_kernel,
                    bf16_arith=bf16_arith_kernel, loop=loop_kernel, alias=alias_kernel, fp32_fma=fp32_fma_kernel,
                    triton=triton, tl=tl)
    return _KERNELS


def _raw(ctx: Context):
    """Context manager for the raw interpreter (cpu only)."""
    from pathmdn_verify.platform import fidelity
    return fidelity.bypassed()


def _launch(ctx: Context, raw: bool, kernel, grid, *args) -> None:
    """kernel[grid](*args), on the raw interpreter when raw (the upstream_bug canaries)."""
    with _raw(ctx) if raw else contextlib.nullcontext():
        kernel[grid](*args)


def _wrong_outputs(ctx: Context, raw: bool, kernel, grid, args: tuple, out, want) -> tuple[int | None, str]:
    """Launch; (entries of out differing from want, "") or (None, the exception) when it raised."""
    try:
        _launch(ctx, raw, kernel, grid, *args)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return int((out.cpu() != want).sum().item()), ""


def _runs_right(wrong: int | None, err: str, what: str) -> Result:
    """fail when the launch raised, else every output must be right."""
    if wrong is None:
        return Result("fail", message=f"{what} raised {err[:200]}")
    return within(wrong, 0, f"{what}, wrong outputs")


# ------------------------------------------------------------------------------------------------
# cast test values (their exact bf16 roundings: pathmdn_verify.core.bits.bf16_rne)

# fp32 values -> where a correct (RNE) and a truncating cast differ, plus the edge cases
_F32_CAST_CASES = [
    f32_from_bits(0x3F808000),  # 1 + 2^-8: tie, lower neighbour even -> 1.0 (truncation agrees)
    f32_from_bits(0x3F818000),  # 1 + 3*2^-8: tie, upper neighbour even -> 1 + 2^-6 (truncation: 1 + 2^-7)
    f32_from_bits(0x3F808001),  # just above a tie -> up
    f32_from_bits(0xBF808001),  # negative, just above a tie -> away from zero
    f32_from_bits(0x3F7FFFFF),  # 1 - 2^-24 -> 1.0 (carry into the exponent)
    f32_from_bits(0x7F7FFFFF),  # FLT_MAX -> inf (above bf16 max + half ulp)
    f32_from_bits(0x7F7F7FFF),  # just below the overflow threshold -> bf16 max
    f32_from_bits(0x00018000),  # subnormal tie -> even
    f32_from_bits(0x00028000),  # subnormal tie -> up to even
    f32_from_bits(0x807FFFFF),  # largest negative subnormal -> -2^-126 (carry into normal)
    1.0 / 3.0, -math.pi, 1e-30, 65504.0, 0.0, -0.0,
]
_SPECIALS = [math.inf, -math.inf, math.nan]


# ------------------------------------------------------------------------------------------------
# bf16 dot

def _bf16_dot_error(ctx: Context, raw: bool = False) -> tuple[float, dict]:
    torch, dev = _setup(ctx)
    k = _k()
    M = N = 16 if dev == "cpu" else ctx.pick(64, 64, 128)
    K = 32 if dev == "cpu" else ctx.pick(64, 128, 256)
    g = torch.Generator().manual_seed(ctx.seed)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    b = torch.randn(K, N, generator=g).to(torch.bfloat16)
    c = torch.empty(M, N, dtype=torch.float32, device=dev)
    _launch(ctx, raw, k["dot"], (1,), a.to(dev), b.to(dev), c, M, N, K, "default")
    exact = a.double() @ b.double()
    bound = a.double().abs() @ b.double().abs()
    err = ((c.cpu().double() - exact).abs() / bound).max().item()
    return err, {"M": M, "N": N, "K": K, "max_abs_result": exact.abs().max().item()}


@check("env.interpreter.bf16_dot",
       "bf16 tl.dot equals the float64 product of the bf16 operands up to fp32 accumulation")
def bf16_dot(ctx: Context) -> Result:
    err, det = _bf16_dot_error(ctx)
    budget = det["K"] * 2.0 ** -24          # fp32 accumulation of K exact products, elementwise vs |A||B|
    r = within(err, budget, "bf16 dot, max |C - A@B| / (|A|@|B|)")
    r.details.update(det)
    return r


@check("env.interpreter.upstream_bug.bf16_dot",
       "raw interpreter still multiplies bf16 bit patterns in tl.dot (triton#11584): patch bf16_dot needed",
       devices=("cpu",))
def upstream_bf16_dot(ctx: Context) -> Result:
    err, det = _bf16_dot_error(ctx, raw=True)
    r = rejects(err, 1e-2, "raw interpreter bf16 dot vs exact")
    r.message += (" (bug still present: keep patch bf16_dot)" if r.status == "pass"
                  else " (raw interpreter now right: patch bf16_dot can go)")
    r.details.update(det)
    return r


# ------------------------------------------------------------------------------------------------
# casts to and from bf16

def _cast_mismatches(ctx: Context, raw: bool = False) -> tuple[int, dict]:
    """fp32 -> bf16 (default rounding, the GPU's cvt.rn): bit-exact against bf16_rne."""
    torch, dev = _setup(ctx)
    k = _k()
    vals = _F32_CAST_CASES + _SPECIALS
    n = 32
    x = torch.zeros(n, dtype=torch.float32)
    x[:len(vals)] = torch.tensor(vals, dtype=torch.float32)
    y = torch.empty(n, dtype=torch.bfloat16, device=dev)
    _launch(ctx, raw, k["cast"], (1,), x.to(dev), y, n, k["tl"].bfloat16)
    got = y.cpu().float().tolist()
    bad = []
    for i, v in enumerate(x.tolist()):
        want = v if math.isnan(v) or math.isinf(v) else bf16_rne(v)
        same = (math.isnan(want) and math.isnan(got[i])) or (want == got[i] and
                                                              math.copysign(1, want) == math.copysign(1, got[i]))
        if not same:
            bad.append({"x_bits": hex(f32_bits(v)), "want": want, "got": got[i]})
    torch_agrees = all((math.isnan(a) and math.isnan(b)) or a == b for a, b in
                       zip(x.to(torch.bfloat16).float().tolist(), [v if math.isnan(v) or math.isinf(v) else bf16_rne(v)
                                                                   for v in x.tolist()]))
    return len(bad), {"cases": len(vals), "mismatches": bad[:8], "torch_cpu_rne_agrees": torch_agrees}


@check("env.interpreter.bf16_round",
       "fp32 -> bf16 cast rounds to nearest even (ties, carries, overflow, subnormals) bit-exactly")
def bf16_round(ctx: Context) -> Result:
    bad, det = _cast_mismatches(ctx)
    r = within(bad, 0, f"fp32->bf16 cast, values differing from round-to-nearest-even (of {det['cases']})")
    r.details.update(det)
    return r


@check("env.interpreter.upstream_bug.bf16_round",
       "raw interpreter still truncates fp32 -> bf16 casts: patch bf16_round needed", devices=("cpu",))
def upstream_bf16_round(ctx: Context) -> Result:
    bad, det = _cast_mismatches(ctx, raw=True)
    r = rejects(bad, 0, "raw interpreter fp32->bf16 cast, values differing from RNE")
    r.message += (" (bug still present: keep patch bf16_round)" if r.status == "pass"
                  else " (raw interpreter now rounds: patch bf16_round can go)")
    r.details.update(det)
    return r


@check("env.interpreter.bf16_cast_other",
       "fp64 -> bf16 and int32 -> bf16 round once to nearest even; bf16 -> int32 truncates the bf16 value")
def bf16_cast_other(ctx: Context) -> Result:
    torch, dev = _setup(ctx)
    k = _k()
    tl = k["tl"]
    bad = []
    # fp64 -> bf16: 1 + 2^-8 + 2^-40 rounds UP (a float32 detour would make it a tie and round down)
    f64 = [1 + 2.0 ** -8 + 2.0 ** -40, -(1 + 3 * 2.0 ** -8 - 2.0 ** -40), 1.0 / 3.0, 1e300, 1e-300, -2.5, 3.0e38]
    f64 += [0.0] * (16 - len(f64))
    i32 = [257, 259, 16777217, -33554435, 123456789, -7, 0, 2 ** 31 - 1] + [1] * 8
    bfv = [-2.5, 300.0, 0.99609375, -0.5, 1e9, -3.75, 65280.0, 2.0 ** 30] + [0.0] * 8
    for src, dst, vals, want in [
        (torch.float64, torch.bfloat16, f64, [bf16_rne(v) for v in f64]),
        (torch.int32, torch.bfloat16, i32, [bf16_rne(v) for v in i32]),
        (torch.bfloat16, torch.int32, bfv, [int(bf16_rne(v)) for v in bfv]),
    ]:
        x = torch.tensor(vals, dtype=src).to(dev)
        y = torch.empty(16, dtype=dst, device=dev)
        k["cast"][(1,)](x, y, 16, tl.bfloat16 if dst == torch.bfloat16 else tl.int32)
        got = y.cpu().double().tolist()
        for v, w_, g_ in zip(vals, want, got):
            if float(w_) != g_:
                bad.append({"cast": f"{src}->{dst}", "x": v, "want": w_, "got": g_})
    r = within(len(bad), 0, "fp64/int32 -> bf16 and bf16 -> int32 casts, wrong values (of 48)")
    r.details["mismatches"] = bad[:8]
    return r


# ------------------------------------------------------------------------------------------------
# autotuning without a driver

def _autotuned(k):
    """A fresh Autotuner over double_kernel (fresh, so no cached choice from an earlier call)."""
    triton = k["triton"]
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    return triton.autotune(configs=configs, key=["n"])(k["double"]), configs


def _autotune_run(ctx: Context, raw: bool = False):
    torch, dev = _setup(ctx)
    k = _k()
    kern, configs = _autotuned(k)
    n = 100
    x = torch.arange(n, dtype=torch.float32, device=dev)
    o = torch.zeros(n, dtype=torch.float32, device=dev)
    grid = lambda meta: (k["triton"].cdiv(n, meta["BLOCK"]),)   # noqa: E731
    try:
        _launch(ctx, raw, kern, grid, x, o, n)
    except Exception as exc:  # reported, never hidden
        return None, f"{type(exc).__name__}: {exc}", configs
    wrong = int((o != 2 * x).sum().item())
    return (wrong, kern.best_config), "", configs


@check("env.interpreter.autotune",
       "an autotuned kernel with 3 configs runs (cpu: picks the first config without timing)")
def autotune(ctx: Context) -> Result:
    out, err, configs = _autotune_run(ctx)
    if out is None:
        return Result("fail", message=f"autotuned launch raised {err}")
    wrong, best = out
    picked_first = best.kwargs == configs[0].kwargs
    if ctx.device == "cpu" and not picked_first:
        return Result("fail", 1.0, 0.0, f"autotuner picked {best.kwargs}, not the first config {configs[0].kwargs}")
    r = within(wrong, 0, f"autotuned launch (config {best.kwargs}), wrong outputs")
    r.details["best_config"] = dict(best.kwargs)
    return r


@check("env.interpreter.upstream_bug.autotune",
       "raw interpreter's autotuner still needs a driver to benchmark: patch autotune needed", devices=("cpu",))
def upstream_autotune(ctx: Context) -> Result:
    out, err, _ = _autotune_run(ctx, raw=True)
    if out is None:
        return Result("pass", message=f"raw autotuner still raises {err[:160]} (keep patch autotune)")
    return Result("fail", message=f"raw autotuner ran without a driver (wrong outputs {out[0]}, "
                                  f"config {out[1].kwargs}): patch autotune can go")


# ------------------------------------------------------------------------------------------------
# fp32 dot: TF32 truncation, and the dots that ask for ieee

def _fp32_dot(ctx: Context, prec: str, raw: bool = False, env: dict | None = None):
    """Run an fp32 dot with the given precision; return distances (max |C - model| / (|A|@|B|)) to
    the three models: operands truncated to TF32, operands rounded to TF32, exact (ieee)."""
    torch, dev = _setup(ctx)
    k = _k()
    M = N = 16 if dev == "cpu" else ctx.pick(64, 64, 128)
    K = 32 if dev == "cpu" else ctx.pick(64, 128, 128)    # one fp32 block: 128x256 overflows shared memory
    g = torch.Generator().manual_seed(ctx.seed + 1)
    a = torch.randn(M, K, generator=g)
    b = torch.randn(K, N, generator=g)
    c = torch.empty(M, N, dtype=torch.float32, device=dev)
    saved = {name: os.environ.get(name) for name in (env or {})}
    os.environ.update(env or {})
    try:
        _launch(ctx, raw, k["dot"], (1,), a.to(dev), b.to(dev), c, M, N, K, prec)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    bound = a.double().abs() @ b.double().abs()
    got = c.cpu().double()
    dist = {name: ((got - fa(a).double() @ fb(b).double()).abs() / bound).max().item()
            for name, fa, fb in (("tf32_trunc", truncate_tf32, truncate_tf32),
                                 ("tf32_round", round_tf32_half_away, round_tf32_half_away),
                                 ("ieee", lambda t: t, lambda t: t))}
    return dist, K


def _nearest(dist: dict) -> str:
    return min(dist, key=dist.get)


@check("env.interpreter.tf32_dot",
       "fp32 tl.dot at default precision matches operands truncated to TF32 (cpu --fp32-dot ieee: exact)")
def tf32_dot(ctx: Context) -> Result:
    dist, K = _fp32_dot(ctx, "default")
    want = "ieee" if (ctx.device == "cpu" and ctx.fp32_dot == "ieee") else "tf32_trunc"
    budget = K * 2.0 ** -24
    r = within(dist[want], budget, f"fp32 dot (default precision) vs {want} model")
    if r.status == "pass" and _nearest(dist) != want:
        r = Result("fail", dist[want], budget, f"fp32 dot is nearest the {_nearest(dist)} model, not {want}")
    r.details.update(dist)
    r.details["K"] = K
    return r


@check("env.interpreter.tf32_dot_ieee_honoured",
       "fp32 tl.dot with input_precision ieee / tf32x3 / allow_tf32=False (and TRITON_F32_DEFAULT=ieee) is exact")
def tf32_dot_ieee_honoured(ctx: Context) -> Result:
    runs = {p: _fp32_dot(ctx, p)[0] for p in ("ieee", "tf32x3", "no_tf32")}
    if ctx.device == "cpu":          # the default comes from the environment (compiled kernels cache it)
        runs["env_default"] = _fp32_dot(ctx, "default", env={"TRITON_F32_DEFAULT": "ieee"})[0]
    K = 32 if ctx.device == "cpu" else ctx.pick(64, 128, 128)
    worst_name = max(runs, key=lambda p: runs[p]["ieee"])
    budget = K * 2.0 ** -24
    r = within(runs[worst_name]["ieee"], budget, f"fp32 dots that ask for ieee, worst ({worst_name}) vs exact")
    r.details.update({p: d["ieee"] for p, d in runs.items()})
    r.details["tf32_trunc_distance_of_ieee"] = runs["ieee"]["tf32_trunc"]
    return r


@check("env.interpreter.upstream_bug.tf32",
       "raw interpreter still computes default-precision fp32 dots exactly (no TF32): patch tf32 needed",
       devices=("cpu",))
def upstream_tf32(ctx: Context) -> Result:
    dist, K = _fp32_dot(ctx, "default", raw=True)
    r = rejects(dist["tf32_trunc"], K * 2.0 ** -24, "raw interpreter fp32 dot vs TF32-truncation model")
    r.message += (" (raw is not TF32: keep patch tf32)" if r.status == "pass"
                  else " (raw interpreter now emulates TF32: patch tf32 can go)")
    r.details.update(dist)
    return r


# ------------------------------------------------------------------------------------------------
# fp32 accumulation order of tl.dot

def _dot_order_run(ctx: Context, raw: bool = False):
    """Rows of A hold one 1 (at column i mod K) and K-1 entries 2^-24; B is all ones.  Exact row sum
    1 + 31 * 2^-24 rounds (tie, to even) to 1 + 2^-19 in fp32; an fp32 accumulation gets anything from
    1 to 1 + 2^-19 depending on where the 1 sits in its order.  Returns (got, exact) as float lists."""
    torch, dev = _setup(ctx)
    k = _k()
    M = N = 16
    K = 32
    a = torch.full((M, K), 2.0 ** -24)
    a[torch.arange(M), torch.arange(M) % K] = 1.0
    b = torch.ones(K, N)
    c = torch.empty(M, N, dtype=torch.float32, device=dev)
    _launch(ctx, raw, k["dot"], (1,), a.to(dev), b.to(dev), c, M, N, K, "ieee")
    exact = f32_from_bits(f32_bits(1 + (K - 1) * 2.0 ** -24))     # rounded once to float32
    return c.cpu().flatten().tolist(), exact, K


@check("env.interpreter.dot_order",
       "fp32 tl.dot accumulation: cpu: float64 in a fixed order, rounded once (the same bits on every "
       "machine); gpu: within fp32 accumulation of the exact sum")
def dot_order(ctx: Context) -> Result:
    got, exact, K = _dot_order_run(ctx)
    if ctx.device == "cpu":
        r = within(sum(g != exact for g in got), 0, f"dot entries differing from the once-rounded exact sum (of {len(got)})")
    else:
        r = within(max(abs(g - exact) for g in got), K * 2.0 ** -24, "dot entries, max |C - exact|")
    r.details.update({"distinct_values": sorted(set(got)), "exact_rounded": exact})
    return r


@check("env.interpreter.upstream_bug.dot_order",
       "raw interpreter's fp32 dot is numpy's sgemm (order set by the BLAS and CPU): keep dot_order",
       devices=("cpu",))
def upstream_dot_order(ctx: Context) -> Result:
    got, exact, _ = _dot_order_run(ctx, raw=True)
    wrong = sum(g != exact for g in got)
    r = rejects(wrong, 0, "raw interpreter dot entries differing from the once-rounded exact sum")
    r.message += (" (the BLAS's fp32 order shows: keep dot_order)" if r.status == "pass" else
                  " (this BLAS happens to match here; dot_order still fixes the order on other machines)")
    r.details["distinct_values"] = sorted(set(got))
    return r


# ------------------------------------------------------------------------------------------------
# tensor.__index__ under numpy >= 2.4

def _index_run(ctx: Context, raw: bool = False):
    torch, dev = _setup(ctx)
    k = _k()
    P, N = 4, 16
    o = torch.zeros(P * N, dtype=torch.int32, device=dev)
    want = torch.arange(P, dtype=torch.int32).repeat_interleave(N) * 4 + 1
    return _wrong_outputs(ctx, raw, k["index"], (P,), (o, N), o, want)


@check("env.interpreter.numpy_index",
       "range() over a program_id-derived tensor runs (tensor.__index__; numpy >= 2.4 crash fix)")
def numpy_index(ctx: Context) -> Result:
    return _runs_right(*_index_run(ctx), "range(program_id ...) loop")


@check("env.interpreter.upstream_bug.numpy_index",
       "raw interpreter's tensor.__index__ still fails under numpy >= 2.4 (triton#9171): patch numpy_index needed",
       devices=("cpu",))
def upstream_numpy_index(ctx: Context) -> Result:
    import numpy as np
    wrong, err = _index_run(ctx, raw=True)
    if wrong is None:
        return Result("pass", message=f"raw interpreter still raises {err[:120]} with numpy {np.__version__} "
                                      "(keep patch numpy_index)")
    return Result("fail", float(wrong), 0.0,
                  f"raw interpreter ran range(program_id) with numpy {np.__version__} "
                  f"(wrong outputs {wrong}): patch numpy_index is not needed here")


# ------------------------------------------------------------------------------------------------
# loop induction variables are tensors

def _loop_run(ctx: Context, raw: bool = False):
    torch, dev = _setup(ctx)
    k = _k()
    n, N = 7, 16
    o = torch.zeros(N, dtype=torch.int64, device=dev)
    return _wrong_outputs(ctx, raw, k["loop"], (1,), (o, n, N), o, 3 * sum(range(N)) + sum(range(0, n, 2)))


@check("env.interpreter.loop_index",
       "the variable of a range() / tl.range() loop is an integer tensor (i.to(tl.int64) works, as on the GPU)")
def loop_index(ctx: Context) -> Result:
    return _runs_right(*_loop_run(ctx), "loops using i.to(tl.int64)")


@check("env.interpreter.upstream_bug.loop_index",
       "raw interpreter's loop variables are still Python ints (i.to raises): patch loop_index needed",
       devices=("cpu",))
def upstream_loop_index(ctx: Context) -> Result:
    wrong, err = _loop_run(ctx, raw=True)
    if wrong is None and "attribute 'to'" in err:
        return Result("pass", message=f"raw interpreter still raises {err[:120]} (keep patch loop_index)")
    if wrong is None:
        return Result("error", message=f"raw interpreter raised something else: {err[:200]}")
    return Result("fail", float(wrong), 0.0, "raw interpreter's loop variables are tensors: patch loop_index can go")


# ------------------------------------------------------------------------------------------------
# module-level aliases of tl builtins; torch.cpu.device

def _alias_run(ctx: Context, raw: bool = False):
    torch, dev = _setup(ctx)
    k = _k()
    x = torch.linspace(-2, 2, 16)
    o = torch.zeros(16, device=dev)
    try:
        _launch(ctx, raw, k["alias"], (1,), x.to(dev), o, 16)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return ((o.cpu().double() - x.double().exp()).abs() / x.double().exp()).max().item(), ""


@check("env.interpreter.tl_alias",
       "a module-level alias of a tl builtin (alias_exp = tl.exp, as a fork's op.py) works in a kernel")
def tl_alias(ctx: Context) -> Result:
    err, msg = _alias_run(ctx)
    if err is None:
        return Result("fail", message=f"kernel calling a module-level alias of tl.exp raised {msg[:200]}")
    return within(err, 2.0 ** -20, "alias_exp(x) vs exp(x), max relative error")


@check("env.interpreter.upstream_bug.tl_alias",
       "raw interpreter still leaves module-level aliases of tl builtins unbound: keep tl_alias", devices=("cpu",))
def upstream_tl_alias(ctx: Context) -> Result:
    err, msg = _alias_run(ctx, raw=True)
    if err is None:
        return Result("pass", message=f"raw interpreter still raises {msg[:120]} (keep tl_alias)")
    return Result("fail", err, 0.0, "raw interpreter binds module-level aliases now: tl_alias can go")


@check("env.interpreter.torch_cpu_device",
       "torch.cpu.device(index) is a device context (a fork's custom_device_ctx on the CPU)", devices=("cpu",))
def torch_cpu_device(ctx: Context) -> Result:
    torch, _ = _setup(ctx)
    try:
        for index in (None, 0):
            with torch.cpu.device(index):
                pass
    except Exception as exc:
        return Result("fail", message=f"torch.cpu.device raised {type(exc).__name__}: {exc}")
    return Result("pass", message="torch.cpu.device(None) and (0) enter and exit")


@check("env.interpreter.upstream_bug.torch_cpu_device",
       "torch still has no torch.cpu.device of its own: keep torch_cpu_device", devices=("cpu",))
def upstream_torch_cpu_device(ctx: Context) -> Result:
    from pathmdn_verify.platform import fidelity
    torch, _ = _setup(ctx)
    own = getattr(torch.cpu, "device", None)
    if own is None or own is fidelity._CpuDevice:
        return Result("pass", message=f"torch {torch.__version__} has no torch.cpu.device (keep torch_cpu_device)")
    return Result("fail", message=f"torch {torch.__version__} has torch.cpu.device: torch_cpu_device can go")


# ------------------------------------------------------------------------------------------------
# bf16 arithmetic: elementwise ops emulated, the rest refused on the cpu; exact on the GPU

_ARITH_OPS = {0: "x + y", 1: "x * y", 2: "where(x < y, x, y)", 3: "sum(x)", 4: "-x", 5: "x - y",
              6: "maximum(x, y)", 7: "x * 0.3", 8: "x * 1e-7", 9: "x * y + x", 10: "x - x * y"}
EMULATED = ("x + y", "x * y", "where(x < y, x, y)", "-x", "x - y", "maximum(x, y)",        # part bf16_arith
            "x * y + x", "x - x * y")
SCALAR = ("x * 0.3", "x * 1e-7")                                                      # part bf16_scalar
REFUSED = ("sum(x)",)                                                                 # part bf16_guard


def _bf16_arith(ctx: Context, raw: bool = False) -> dict:
    """Run each op; per op: 'refused' (guard error), 'right' (equals the GPU's bf16 result bit for bit:
    the exact result rounded once to nearest even) or 'wrong' / 'raised ...'."""
    torch, dev = _setup(ctx)
    k = _k()
    n = 16
    g = torch.Generator().manual_seed(ctx.seed + 2)
    x = torch.randn(n, generator=g).to(torch.bfloat16)
    y = torch.randn(n, generator=g).to(torch.bfloat16)
    xi = torch.randint(-8, 9, (n,), generator=g).to(torch.bfloat16)   # sums of these are exact in any order
    xs, ys = [Fraction(v) for v in x.double().tolist()], [Fraction(v) for v in y.double().tolist()]
    # a Python float constant is built as APFloat(bf16, std::to_string(float32(c))): six decimals
    c03, c1e7 = bf16_rne(Fraction("0.300000")), 0.0
    want = {0: [bf16_rne(a + b) for a, b in zip(xs, ys)], 1: [bf16_rne(a * b) for a, b in zip(xs, ys)],
            2: [float(min(a, b)) for a, b in zip(xs, ys)], 3: [float(xi.double().sum())],
            4: [float(-a) for a in xs], 5: [bf16_rne(a - b) for a, b in zip(xs, ys)],
            6: [float(max(a, b)) for a, b in zip(xs, ys)], 7: [bf16_rne(a * Fraction(c03)) for a in xs],
            8: [float(a * Fraction(c1e7)) for a in xs],
            9: [bf16_rne(a * b + a) for a, b in zip(xs, ys)], 10: [bf16_rne(a - a * b) for a, b in zip(xs, ys)]}
    out = {}
    for op, expected in want.items():
        o = torch.zeros(n, dtype=torch.bfloat16, device=dev)
        src = xi if op == 3 else x
        try:
            _launch(ctx, raw, k["bf16_arith"], (1,), src.to(dev), y.to(dev), o, n, op)
        except Exception as exc:
            out[_ARITH_OPS[op]] = "refused" if "Bf16ArithmeticNotEmulated" in repr(exc) else f"raised {exc!r}"[:200]
            continue
        got = o.cpu().double().tolist()[:len(expected)]
        out[_ARITH_OPS[op]] = "right" if got == expected else f"wrong (got {got[:3]}, want {expected[:3]})"
    return out


def _bf16_verdict(ctx: Context, ops: tuple, what: str) -> Result:
    """On the GPU every op is exact; on the cpu the emulated ones must be exact, the refused ones refused."""
    out = _bf16_arith(ctx)
    ok = ("refused",) if ctx.device == "cpu" and ops == REFUSED else ("right",)
    bad = {op: out[op] for op in ops if out[op] not in ok}
    r = within(len(bad), 0, f"bf16 {what} not {' / '.join(ok)} (of {len(ops)})")
    r.details.update({op: out[op] for op in ops})
    return r


@check("env.interpreter.bf16_arith",
       "bf16 add/sub/mul/max/compare/neg and x*y+z (one fma): the exact result rounded to nearest even, bit for bit")
def bf16_arith(ctx: Context) -> Result:
    return _bf16_verdict(ctx, EMULATED, "elementwise ops")


@check("env.interpreter.bf16_scalar",
       "bf16 tensor times a Python float: the constant is the bf16 of its six-decimal print, product rounded once")
def bf16_scalar(ctx: Context) -> Result:
    return _bf16_verdict(ctx, SCALAR, "tensor-scalar ops")


# the instruction each emulated op must compile to for an H200 (sm_90), as bf16_arith emulates it
_BF16_PTX = {0: {"add.bf16"}, 1: {"mul.bf16"}, 4: {"sub.bf16"}, 5: {"sub.bf16"}, 7: {"mul.bf16"},
             9: {"fma.rn.bf16"}, 10: {"fma.rn.bf16"}}


def sm90_instructions() -> dict[str, list[str]]:
    """The bf16 instructions each emulated op compiles to for an H200 (sm_90): PTX built by Triton's own
    compiler, no GPU needed.  Runs in a process without the interpreter (see bf16_lowering)."""
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    k = _k()
    signature = {"x_ptr": "*bf16", "y_ptr": "*bf16", "o_ptr": "*bf16", "N": "constexpr", "OP": "constexpr"}
    seen = {}
    for op in _BF16_PTX:
        src = ASTSource(fn=k["bf16_arith"], signature=signature, constexprs={"N": 16, "OP": op})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
        seen[_ARITH_OPS[op]] = sorted(set(re.findall(r"\b(?:add|sub|mul|fma)(?:\.rn)?\.bf16\b", ptx)))
    return seen


@check("env.interpreter.bf16_lowering",
       "Triton still compiles the emulated bf16 ops for sm_90 to the emulated instructions (PTX built on the "
       "cpu): add/sub/mul.bf16, and fma.rn.bf16 for a product feeding an add", devices=("cpu",))
def bf16_lowering(ctx: Context) -> Result:
    """Compiled in a fresh process without TRITON_INTERPRET: the interpreter's launches patch triton.language
    in the process that ran them, and on another machine (the H200 host's CPU) compiling after them failed
    inside the code generator ('block_argument' object has no attribute 'dtype')."""
    import json
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", "import json; from pathmdn_verify.checks.fidelity_canaries import "
                           "sm90_instructions as f; print(json.dumps(f()))"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return Result("error", message="compiling the bf16 canary kernel for sm_90 failed: "
                      + proc.stderr.strip()[-1500:], kind="check_error")
    seen = json.loads(proc.stdout.splitlines()[-1])
    bad = {_ARITH_OPS[op]: seen[_ARITH_OPS[op]] for op, want in _BF16_PTX.items() if set(seen[_ARITH_OPS[op]]) != want}
    r = within(len(bad), 0, f"emulated bf16 ops compiled to other instructions (of {len(_BF16_PTX)})")
    r.details.update(seen)
    return r


@check("env.interpreter.bf16_guard",
       "bf16 reductions: exact on the GPU (integer data); on the cpu refused loudly (never a silent wrong value)")
def bf16_guard(ctx: Context) -> Result:
    return _bf16_verdict(ctx, REFUSED, "reductions")


@check("env.interpreter.upstream_bug.bf16_arith",
       "raw interpreter still computes bf16 arithmetic on the uint16 bit patterns: keep bf16_arith / bf16_guard",
       devices=("cpu",))
def upstream_bf16_arith(ctx: Context) -> Result:
    out = _bf16_arith(ctx, raw=True)
    ops = EMULATED + REFUSED
    wrong = sum(1 for op in ops if out[op] != "right")
    r = rejects(wrong, 0, f"raw interpreter bf16 ops not right (of {len(ops)})")
    r.message += (" (bug still present: keep bf16_arith and bf16_guard)" if r.status == "pass"
                  else " (raw interpreter now right: bf16_arith / bf16_guard can go)")
    r.details.update({op: out[op] for op in ops})
    return r


@check("env.interpreter.upstream_bug.bf16_scalar",
       "raw interpreter still lacks builder.get_bf16 (bf16 times a Python float raises): keep bf16_scalar",
       devices=("cpu",))
def upstream_bf16_scalar(ctx: Context) -> Result:
    out = _bf16_arith(ctx, raw=True)
    raised = [op for op in SCALAR if "get_bf16" in out[op]]
    if len(raised) == len(SCALAR):
        return Result("pass", message="raw interpreter still raises AttributeError get_bf16 (keep bf16_scalar)")
    return Result("fail", message=f"raw interpreter now builds bf16 constants ({out}): bf16_scalar may go")


# ------------------------------------------------------------------------------------------------
# fp32 multiply-add contraction: x*y +- z is one fma.rn.f32 on the GPU (Triton's enable_fp_fusion)

_FMA_OPS = {0: "x * y - z", 1: "z + x * y", 2: "where(., x * y, 0) - z", 3: "fma(x, y, -z)"}
_FUSED = {0: True, 1: True, 2: False, 3: True}        # which the GPU computes with the product unrounded


def _fma_inputs(torch, seed: int):
    """x = y = 1 + 2^-13 first (x*y - 1 is 2^-12 + 2^-26 fused, 2^-12 with the product rounded), then random
    values whose products are not exact in fp32."""
    g = torch.Generator().manual_seed(seed + 5)
    x = torch.cat([torch.tensor([1 + 2 ** -13]), torch.randn(15, generator=g)]).float()
    y = torch.cat([torch.tensor([1 + 2 ** -13]), torch.randn(15, generator=g)]).float()
    z = torch.cat([torch.tensor([1.0]), torch.randn(15, generator=g)]).float()
    return x, y, z


def _fma_want(x, y, z, op: int, fused: bool) -> list[float]:
    """Each element's fp32 result, exactly: fused, x*y +- z rounded once; else the product rounded first."""
    out = []
    for a, b, c in zip(*(map(Fraction, t.double().tolist()) for t in (x, y, z))):
        p = a * b if fused else Fraction(f32_rne(a * b))
        out.append(f32_rne(c + p if op == 1 else p - c))
    return out


def _fp32_fma(ctx: Context, raw: bool = False) -> dict:
    """Per op: 'fused' / 'rounded' (which exact result came back, bit for bit) or what else happened."""
    torch, dev = _setup(ctx)
    x, y, z = _fma_inputs(torch, ctx.seed)
    out = {}
    for op, what in _FMA_OPS.items():
        o = torch.zeros(16, dtype=torch.float32, device=dev)
        try:
            _launch(ctx, raw, _k()["fp32_fma"], (1,), x.to(dev), y.to(dev), z.to(dev), o, 16, op)
        except Exception as exc:
            out[what] = f"raised {exc!r}"[:200]
            continue
        got = o.cpu().double().tolist()
        out[what] = next((name for name, fused in (("fused", True), ("rounded", False))
                          if got == _fma_want(x, y, z, op, fused)), f"neither (got {got[:2]})")
    return out


@check("env.interpreter.fp32_fma",
       "fp32 x*y - z and z + x*y are one fused multiply-add (the product unrounded) as the GPU computes them by "
       "default, a product through a select is rounded first, tl.fma rounds once: bit for bit")
def fp32_fma(ctx: Context) -> Result:
    out = _fp32_fma(ctx)
    want = {what: "fused" if _FUSED[op] else "rounded" for op, what in _FMA_OPS.items()}
    bad = {what: got for what, got in out.items() if got != want[what]}
    r = within(len(bad), 0, f"fp32 multiply-adds not as the GPU computes them (of {len(want)})")
    r.details.update(out)
    return r


@check("env.interpreter.upstream_bug.fp32_fma",
       "raw interpreter still rounds an fp32 product before the add it feeds: keep fp32_fma", devices=("cpu",))
def upstream_fp32_fma(ctx: Context) -> Result:
    out = _fp32_fma(ctx, raw=True)
    unfused = sum(1 for op, what in _FMA_OPS.items() if _FUSED[op] and out[what] == "rounded")
    r = rejects(unfused, 0, "raw interpreter fp32 multiply-adds with the product rounded first")
    r.message += (" (bug still present: keep fp32_fma)" if r.status == "pass"
                  else " (raw interpreter now fuses: fp32_fma can go)")
    r.details.update(out)
    return r


def sm90_fp32_instructions() -> dict[str, list[str]]:
    """The fp32 instructions each canary op compiles to for an H200 (sm_90): PTX built by Triton's own compiler,
    no GPU needed.  Runs in a process without the interpreter (see bf16_lowering)."""
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    k = _k()
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "o_ptr": "*fp32", "N": "constexpr",
                 "OP": "constexpr"}
    seen = {}
    for op, what in _FMA_OPS.items():
        src = ASTSource(fn=k["fp32_fma"], signature=signature, constexprs={"N": 16, "OP": op})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
        seen[what] = sorted(set(re.findall(r"\b(?:fma\.rn|mul\.rn|mul|add|sub|add\.rn|sub\.rn)\.f32\b", ptx)))
    return seen


@check("env.interpreter.fp32_fma_lowering",
       "Triton still compiles the canary's fp32 multiply-adds for sm_90 as fp32_fma emulates them (PTX built on the "
       "cpu): fma.rn.f32 for a product feeding an add or subtract, a rounded mul.f32 through a select",
       devices=("cpu",))
def fp32_fma_lowering(ctx: Context) -> Result:
    import json
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", "import json; from pathmdn_verify.checks.fidelity_canaries import "
                           "sm90_fp32_instructions as f; print(json.dumps(f()))"], capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        return Result("error", message="compiling the fp32 canary kernel for sm_90 failed: "
                      + proc.stderr.strip()[-1500:], kind="check_error")
    seen = json.loads(proc.stdout.splitlines()[-1])
    bad = {what: seen[what] for op, what in _FMA_OPS.items() if ("fma.rn.f32" in seen[what]) != _FUSED[op]}
    r = within(len(bad), 0, f"fp32 multiply-adds compiled otherwise than emulated (of {len(_FMA_OPS)})")
    r.details.update(seen)
    return r


# ------------------------------------------------------------------------------------------------
# bounds: every address a launch touches lies in one of its tensor arguments

_BOUNDS_KERNELS: dict = {}


def _bounds_kernels():
    if not _BOUNDS_KERNELS:
        import triton
        import triton.language as tl

        @triton.jit
        def shifted_copy(x_ptr, o_ptr, load_shift, add_shift, limit, N: tl.constexpr):
            """o[r] = x[load_shift + r] for r < limit, then o[add_shift + r] += 1 atomically for r < limit."""
            r = tl.arange(0, N)
            m = r < limit
            tl.store(o_ptr + r, tl.load(x_ptr + load_shift + r, mask=m, other=0.0), mask=m)
            tl.atomic_add(o_ptr + add_shift + r, tl.full([N], 1.0, tl.float32), mask=m, sem="relaxed")

        _BOUNDS_KERNELS["copy"] = shifted_copy
    return _BOUNDS_KERNELS


def _bounds_run(ctx: Context, raw: bool = False) -> dict:
    """shifted_copy on 32-element tensors that are views of 64-element numpy buffers (so an out-of-bounds
    access lands in memory this canary owns, never in the heap): in bounds (shifts 0); out of bounds by 16
    elements but masked off (limit 16); a load of x[32:48]; an atomic add to o[32:48]; a load of x[32:48] where
    x and o are the two halves of one buffer (an access past x that lands in o, another argument of the launch).
    Per case: "ran" or the exception's type, and whether the buffers' hidden tails (the neighbour: o) were
    written."""
    import numpy as np
    torch, _ = _setup(ctx)
    kern = _bounds_kernels()["copy"]
    out = {}
    for name, load_shift, add_shift, limit in (("inside", 0, 0, 32), ("masked", 16, 16, 16), ("load", 16, 0, 32),
                                               ("atomic", 0, 16, 32), ("neighbour", 16, 0, 32)):
        xb, ob = np.arange(64, dtype=np.float32), np.zeros(64, dtype=np.float32)
        x, o = torch.from_numpy(xb[:32]), torch.from_numpy(ob[:32])
        tail_written = lambda: bool(ob[32:].any())
        if name == "neighbour":          # two storages side by side: past x's end is o
            x, o = torch.from_numpy(xb[:32]), torch.from_numpy(xb[32:])
            tail_written = lambda: not np.array_equal(xb, np.arange(64, dtype=np.float32))
        try:
            _launch(ctx, raw, kern, (1,), x, o, load_shift, add_shift, limit, 32)
            status = "ran"
        except Exception as exc:
            cause = exc
            while cause.__cause__ is not None:
                cause = cause.__cause__
            status = type(cause).__name__
        out[name] = {"status": status, "tail_written": tail_written()}
    return out


@check("env.interpreter.bounds",
       "an out-of-bounds load / atomic of a launch raises OutOfBoundsAccess before touching memory, also where it "
       "lands in another argument's storage; in-bounds and masked-off accesses run", devices=("cpu",))
def bounds(ctx: Context) -> Result:
    out = _bounds_run(ctx)
    want = {"inside": {"status": "ran", "tail_written": False}, "masked": {"status": "ran", "tail_written": False},
            "load": {"status": "OutOfBoundsAccess", "tail_written": False},
            "atomic": {"status": "OutOfBoundsAccess", "tail_written": False},
            "neighbour": {"status": "OutOfBoundsAccess", "tail_written": False}}
    bad = {k: v for k, v in out.items() if v != want[k]}
    if bad:
        return Result("fail", float(len(bad)), 0.0, f"bounds: {bad} (expected {want})", details=out)
    return Result("pass", 0.0, 0.0, "in bounds and masked off ran; 16 elements past the end raised "
                  "OutOfBoundsAccess with nothing written", details=out, measure="problems")


@check("env.interpreter.upstream_bug.bounds",
       "raw interpreter still reads and writes past a launch's tensors unchecked: keep bounds", devices=("cpu",))
def upstream_bounds(ctx: Context) -> Result:
    out = _bounds_run(ctx, raw=True)["atomic"]
    if out == {"status": "ran", "tail_written": True}:
        return Result("pass", message="raw interpreter wrote 16 elements past the end of a tensor without a "
                                      "word (keep bounds)")
    return Result("fail", message=f"raw interpreter now checks bounds ({out}): bounds may go")


# ------------------------------------------------------------------------------------------------
# lang_cache: tl's builtins found once, not on every launch

def _tl_builtins() -> list:
    """What tl, tl.math and tl.tensor hold now (a launch binds their builtins and must put these back)."""
    import triton.language as tl
    return [(m, dict(vars(m))) for m in (tl, tl.math, tl.tensor)]


def _restored(before: list) -> bool:
    """Whether every attribute _tl_builtins saw is the same object again."""
    return all(vars(m).get(k) is v for m, b in before for k, v in b.items())


def _lang_cache_run(ctx: Context) -> dict:
    """Launch the bounds canary's kernel three times; count inspect.getmembers calls during the last two,
    compare its outputs, and check that tl, tl.math and tl.tensor hold their own builtins again afterwards."""
    import inspect

    import numpy as np
    import triton.language as tl
    torch, _ = _setup(ctx)
    kern = _bounds_kernels()["copy"]
    modules = (tl, tl.math, tl.tensor)
    before = _tl_builtins()
    calls = [0]
    original = inspect.getmembers

    def counting(obj, *a, **kw):
        calls[0] += obj in modules or obj is tl.core
        return original(obj, *a, **kw)
    outs = []
    for i in range(3):
        x, o = torch.arange(32, dtype=torch.float32), torch.zeros(32, dtype=torch.float32)
        if i:
            inspect.getmembers = counting
        try:
            _launch(ctx, False, kern, (1,), x, o, 0, 0, 32, 32)
        finally:
            inspect.getmembers = original
        outs.append(o.numpy().copy())
    return {"getmembers_after_first": calls[0], "right": all(np.array_equal(v, np.arange(32) + 1) for v in outs),
            "restored": _restored(before)}


@check("env.interpreter.lang_cache",
       "a launch after the first finds tl's builtins without inspect.getmembers, computes the same, and leaves "
       "tl's builtins restored", devices=("cpu",))
def lang_cache(ctx: Context) -> Result:
    out = _lang_cache_run(ctx)
    ok = out == {"getmembers_after_first": 0, "right": True, "restored": True}
    return Result("pass" if ok else "fail", float(out["getmembers_after_first"]), 0.0,
                  f"lang_cache: {out} (want no getmembers after the first launch, right outputs, builtins restored)",
                  details=out, kind=None if ok else "over_budget", measure="problems")


# ------------------------------------------------------------------------------------------------
# np_dtypes: the numpy dtype of a Triton type from a table

def _np_dtypes_run(ctx: Context) -> dict:
    """The installed _get_np_dtype against the original on every scalar type of the original's table, as a
    scalar, a block, a pointer and a block of pointers (twice each: the table's first fill and its reuse)."""
    import triton.language as tl
    from triton.runtime import interpreter

    from pathmdn_verify.platform import fidelity
    _setup(ctx)
    original = fidelity._originals.get((interpreter, "_get_np_dtype"))
    names = ("int1", "float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
             "int64", "uint64", "bfloat16", "float8e5", "float8e5b16", "float8e4nv", "float8e4b8", "float8e4b15")
    types = [t for n in names for t in (getattr(tl, n), tl.block_type(getattr(tl, n), [2, 4]), tl.pointer_type(getattr(tl, n)),
                                        tl.block_type(tl.pointer_type(getattr(tl, n)), [4]))]
    patched = interpreter._get_np_dtype
    wrong = [str(t) for t in types + types if original is None or patched(t) != original(t)]
    return {"installed": original is not None and patched is not original, "types": len(types), "wrong": wrong}


@check("env.interpreter.np_dtypes",
       "the table-backed _get_np_dtype is installed and gives the original's numpy dtype for every Triton type",
       devices=("cpu",))
def np_dtypes(ctx: Context) -> Result:
    out = _np_dtypes_run(ctx)
    ok = out["installed"] and not out["wrong"]
    return Result("pass" if ok else "fail", float(len(out["wrong"]) + (not out["installed"])), 0.0,
                  f"np_dtypes: {out}", details=out, kind=None if ok else "over_budget", measure="problems")


# ------------------------------------------------------------------------------------------------
# lazy_types: tuple and block type names and tl.tuple types built when read

def _lazy_types_run(ctx: Context) -> dict:
    """Tuple types (of scalars, constexprs, blocks, pointers, a nested tuple type; with and without field
    names), block types and tl.tuples built through the installed constructors, read against what each
    original constructor stores (run on a subclass where that attribute is a plain one)."""
    import triton.language as tl

    from pathmdn_verify.platform import fidelity
    _setup(ctx)
    core = tl.core
    originals = {c: fidelity._originals.get((c, "__init__")) for c in (core.tuple_type, core.block_type, core.tuple)}
    installed = all(o not in (None, fidelity._INHERITED) and c.__init__ is not o for c, o in originals.items())
    if not installed:
        return {"installed": False, "cases": 0, "wrong": []}

    def original(cls, attr, *args):
        built = object.__new__(type(f"plain_{cls.__name__}", (cls,), {attr: None}))
        originals[cls](built, *args)
        return built

    tuples = [([tl.float32], None), ([core.constexpr_type(64), core.constexpr_type(16)], None),
              ([tl.block_type(tl.bfloat16, [64, 16]), tl.pointer_type(tl.float32)], ["a", "b"]),
              ([core.tuple_type([tl.int32, tl.int64]), core.constexpr_type(1.5)], ["x", ""]), ([], None)]
    blocks = [(tl.float32, [16]), (tl.bfloat16, [64, 16]), (tl.pointer_type(tl.int64), [2, 4, 8]),
              (tl.float32, core.tuple([core.constexpr(4), core.constexpr(8)]))]
    values = [[core.constexpr(3), core.constexpr(5)], [core.constexpr(1.5)], []]
    wrong = [f"tuple_type {o.name}" for t, f in tuples
             if core.tuple_type(list(t), f).name != (o := original(core.tuple_type, "name", list(t), f)).name]
    wrong += [f"block_type {o.name}" for e, sh in blocks
              if (n := core.block_type(e, sh)).name != (o := original(core.block_type, "name", e, sh)).name
              or n.shape != o.shape or n.numel != o.numel]
    wrong += [f"tuple {o.type}" for v in values
              if (n := core.tuple(v)).type != (o := original(core.tuple, "type", v)).type or str(n.type) != str(o.type)]
    return {"installed": True, "cases": len(tuples) + len(blocks) + len(values), "wrong": wrong}


@check("env.interpreter.lazy_types",
       "tuple and block types are built without their names, tl.tuples without their types, and read the values "
       "the original constructors give", devices=("cpu",))
def lazy_types(ctx: Context) -> Result:
    out = _lazy_types_run(ctx)
    ok = out["installed"] and not out["wrong"]
    return Result("pass" if ok else "fail", float(len(out["wrong"]) + (not out["installed"])), 0.0,
                  f"lazy_types: {out}", details=out, kind=None if ok else "over_budget", measure="problems")


# ------------------------------------------------------------------------------------------------
# device_calls: a helper's builtins bound once per launch

_HELPER_KERNELS: dict = {}


def _helper_kernels():
    if not _HELPER_KERNELS:
        import triton
        import triton.language as tl

        @triton.jit
        def add_exp(x):
            return x + tl.exp(x * 0.0)          # x + 1 through a builtin the helper's module binds

        globals()["canary_add_exp"] = add_exp      # a kernel finds its helpers among its module's globals

        @triton.jit
        def five_calls(x_ptr, o_ptr, N: tl.constexpr):
            r = tl.arange(0, N)
            acc = tl.load(x_ptr + r)
            for _ in tl.static_range(5):
                acc = canary_add_exp(acc)      # noqa: F821 (defined just above)
            tl.store(o_ptr + r, acc)

        _HELPER_KERNELS["five_calls"] = five_calls
    return _HELPER_KERNELS


def _device_calls_run(ctx: Context) -> dict:
    """Two launches of a kernel that calls a @triton.jit helper five times: the builtins are bound (the
    interpreter's _patch_lang) once for the launch and once for the helper's first call in it, so 4 times
    in all (12 when every call binds them); the outputs are x + 5; tl's builtins are restored afterwards."""
    import numpy as np
    from triton.runtime import interpreter
    torch, _ = _setup(ctx)
    kern = _helper_kernels()["five_calls"]
    before = _tl_builtins()
    calls = [0]
    original = interpreter._patch_lang

    def counting(fn):
        calls[0] += 1
        return original(fn)
    outs = []
    interpreter._patch_lang = counting
    try:
        for _ in range(2):
            x, o = torch.arange(8, dtype=torch.float32), torch.zeros(8, dtype=torch.float32)
            _launch(ctx, False, kern, (1,), x, o, 8)
            outs.append(o.numpy().copy())
    finally:
        interpreter._patch_lang = original
    return {"bindings": calls[0], "right": all(np.array_equal(v, np.arange(8) + 5.0) for v in outs),
            "restored": _restored(before)}


@check("env.interpreter.device_calls",
       "a kernel's @triton.jit helper binds its module's builtins once per launch, computes the same, and tl's "
       "builtins are restored after", devices=("cpu",))
def device_calls(ctx: Context) -> Result:
    out = _device_calls_run(ctx)
    ok = out == {"bindings": 4, "right": True, "restored": True}
    return Result("pass" if ok else "fail", float(abs(out["bindings"] - 4) + (not out["right"]) + (not out["restored"])), 0.0,
                  f"device_calls: {out} (want 4 bindings over 2 launches of 5 helper calls, right outputs, "
                  "builtins restored)", details=out, kind=None if ok else "over_budget", measure="problems")


# ------------------------------------------------------------------------------------------------
# a tl.dot of a bf16 and an fp32 operand: refused alike by the interpreter and by the compiler's frontend, so that
# the interpreter's refusal of such code (fla's PaTH before 721a205a given fp32 w, beta) is never stricter than the
# GPU; a same-dtype dot, accepted by both, is the control that the two refusals are not of anything at all

_COMPILE_DOT = """
import sys, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def dot(a_ptr, b_ptr, c_ptr):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
    tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b))

made = []
src = ASTSource.make_ir
def make_ir(self, *a, **k):
    out = src(self, *a, **k)
    made.append(True)
    return out
ASTSource.make_ir = make_ir
try:
    triton.compile(ASTSource(dot, signature={"a_ptr": "*bf16", "b_ptr": "*" + sys.argv[1], "c_ptr": "*fp32"},
                             constexprs={}), target=GPUTarget("cuda", 90, 32))
except Exception as exc:
    if not made:                     # refused before the IR: the frontend's verdict
        print("refused", f"{type(exc).__name__}: {exc}".splitlines()[-1][:200])
        raise SystemExit
print("accepted")                   # the IR was made (a later stage may need a GPU toolchain: not our question)
"""


def _compiled_dot(b_dtype: str) -> str:
    """What Triton's compiler frontend (AST -> TTIR for an sm_90 target, no GPU needed) says of a tl.dot of a bf16
    and a b_dtype operand, in a fresh process with the interpreter off."""
    import subprocess
    import sys
    import tempfile
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory(prefix="verify_dot_") as tmp:     # @triton.jit reads its source from a file
        script = os.path.join(tmp, "mixed_dot.py")
        with open(script, "w") as f:
            f.write(_COMPILE_DOT)
        out = subprocess.run([sys.executable, script, b_dtype], capture_output=True, text=True, env=env, timeout=300)
    lines = out.stdout.strip().splitlines()
    return lines[-1] if lines else f"no verdict (exit {out.returncode}): {out.stderr.strip()[-200:]}"


def _interpreted_dot(ctx: Context, b_dtype) -> str:
    torch, dev = _setup(ctx)
    kern = _k()["dot"]
    a = torch.ones(16, 16, dtype=torch.bfloat16, device=dev)
    b = torch.ones(16, 16, dtype=b_dtype, device=dev)
    c = torch.zeros(16, 16, dtype=torch.float32, device=dev)
    try:
        _launch(ctx, False, kern, (1,), a, b, c, 16, 16, 16, "default")
    except Exception as exc:
        from pathmdn_verify.core.errors import innermost_error
        return "refused " + innermost_error(exc)[:200]
    return "accepted"


@check("env.interpreter.mixed_dot_refused",
       "a tl.dot of a bf16 and an fp32 operand is refused by the interpreter and by Triton's compiler frontend alike "
       "(a bf16 x bf16 dot, the control, accepted by both)", devices=("cpu",))
def mixed_dot_refused(ctx: Context) -> Result:
    torch, _ = _setup(ctx)
    seen = {"interpreter": _interpreted_dot(ctx, torch.float32), "compiler": _compiled_dot("fp32"),
            "interpreter_control": _interpreted_dot(ctx, torch.bfloat16), "compiler_control": _compiled_dot("bf16")}
    ok = (seen["interpreter"].startswith("refused") and seen["compiler"].startswith("refused")
          and seen["interpreter_control"] == seen["compiler_control"] == "accepted")
    return Result("pass" if ok else "fail", message="; ".join(f"{k}: {v}" for k, v in seen.items()), details=seen,
                  kind=None if ok else "over_budget")
