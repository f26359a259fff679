"""What every layer comparison needs: import the layer, build it with seeded parameters, take its parameters in
float64 for the literal, run it so that its own exceptions are findings, and judge tensors under the kernel
budget rule (pathmdn_verify.core.budget: error against the float64 literal <= c x the same-dtype literal's error, or the
rounding floor where that is larger)."""
from __future__ import annotations

import importlib
import math

import torch

from pathmdn_verify.core.budget import Verdict, verdict, worst
from pathmdn_verify.core.errors import is_interpreter_gap, missing_dependency
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.registry import Result
from pathmdn_verify.layers import history
from pathmdn_verify.layers.table import INSTALL, LayerCase
from pathmdn_verify.layers.kv_cache import OPERATIONS, new_cache


class LayerRaised(Exception):
    """The layer under test raised: a finding (a failing check of kind exception), never a check error."""


class LayerMissing(Exception):
    """The kernel package offers no such layer (flash-linear-attention not installed, or an older tree)."""


class LayerLacks(Exception):
    """The built layer lacks what the options it was asked for call for (a parameter, a convolution width): the
    option was swallowed or ignored, a failure."""


class LayerUnsupported(Exception):
    """The tree lacks what the comparison needs (an option, a mode, a module that runs here), by its declared
    history (pathmdn_verify.layers.history): the check is unsupported, with the reason."""


def layer_class(case: LayerCase):
    rec = case.record
    try:
        module = importlib.import_module(rec.module)
    except ModuleNotFoundError as exc:
        raise LayerMissing(f"{rec.module} cannot be imported ({exc}); {INSTALL}") from exc
    if not hasattr(module, rec.cls):
        raise LayerMissing(f"{rec.module} has no {rec.cls}")
    return getattr(module, rec.cls)


def precision(case: LayerCase) -> Precision:
    return Precision.of(case.dtype, case.ctx.fp32_dot)


def build(case: LayerCase, seed: int, **sizes) -> torch.nn.Module:
    """The layer with the variant's arguments and `sizes`, its parameters drawn from `seed` (the same on every
    machine: torch's CPU generator), in the case's dtype on the run's device, in eval mode.  An argument the
    constructor refuses by its signature (no such parameter, no **kwargs) is LayerUnsupported; one it swallows
    builds a layer without it, which the literal (taking every option as asked) then judges."""
    cls = layer_class(case)
    refused = refused_options(cls, case.kwargs)
    if refused:
        raise LayerUnsupported(f"{cls.__name__}'s constructor takes no {', '.join(refused)} (by its signature)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = call(cls, **sizes, **case.kwargs)      # a constructor that raises is the layer's finding
    short_conv_runs(case, layer)
    return layer.to(device=case.ctx.device, dtype=precision(case).torch_dtype).eval()


def refused_options(cls, kwargs: dict) -> list[str]:
    """The keyword arguments cls's constructor cannot take by its signature."""
    import inspect
    params = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return []
    names = {p.name for p in params}
    return sorted(k for k in kwargs if k not in names)


def short_conv_runs(case: LayerCase, layer: torch.nn.Module) -> None:
    """LayerUnsupported when the built layer holds a ShortConvolution whose width this tree's triton fallback for
    causal-conv1d cannot run (history modules.short_conv: power-of-2 widths only from 2025-06-05 until
    2025-06-15).  What needs causal-conv1d itself is found by the call that reaches it (`call`)."""
    if case.ctx.device != "cpu":
        return
    widths = sorted({m.kernel_size[0] for m in layer.modules() if type(m).__name__ == "ShortConvolution"})
    odd = [w for w in widths if w & (w - 1)]
    if odd and history.value("modules.short_conv") == "triton pow2":
        raise LayerUnsupported(f"this tree's ShortConvolution runs power-of-2 widths only without causal-conv1d, "
                               f"the layer's is {odd[0]} (history modules.short_conv: any width from b48a2451, "
                               "2025-06-15)")


def params64(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The layer's parameters (state_dict names) as float64 CPU tensors: what the literal is built from."""
    return {n: p.detach().to("cpu", torch.float64) for n, p in layer.state_dict().items()}


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs) where fn is the layer under test: its exception becomes LayerRaised, except the CPU
    interpreter's own gap (pathmdn_verify.core.errors.is_interpreter_gap), which the runner makes a skip, and a
    call that reaches an optional dependency that is not installed (core.errors.missing_dependency: causal-conv1d
    in older trees), which is LayerUnsupported: only the calls that use it, never the whole layer."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        if is_interpreter_gap(exc):
            raise
        missing = missing_dependency(exc)
        if missing is not None:
            raise LayerUnsupported(f"this call needs {missing}") from exc
        raise LayerRaised(f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc


def judge(case: LayerCase, tensors: list[tuple], c: float, what: str = "", details: dict | None = None) -> Result:
    """One Result over (name, layer's tensor, float64 literal, same-dtype literal) tuples: the worst verdict
    decides; every tensor's verdict goes in details["tensors"]."""
    prec = precision(case)
    scale = max(float(t[2].abs().max()) for t in tensors if t[2].numel())
    vs: list[Verdict] = [verdict(n, out.detach().to("cpu", torch.float64), truth, same.detach().to("cpu", torch.float64),
                                 prec, c, scale) for n, out, truth, same in tensors]
    w = worst(vs)
    ok = w.ratio <= 1
    return Result("pass" if ok else "fail", w.measured, w.budget, (what + ": " if what else "") + w.summary(),
                  details={**(details or {}), "tensors": [v.as_json() for v in vs]},
                  kind=None if ok else w.kind, measure=w.decided_by)


def combine(results: list[Result], what: str, details: dict) -> Result:
    """The worst of several judged Results (by measured / budget), every one's tensors in details."""
    ratio = lambda r: r.measured / r.budget if r.budget else math.inf
    w = max(results, key=ratio)
    return Result(w.status, w.measured, w.budget, f"{what}: {w.message}", kind=w.kind, measure=w.measure,
                  details={**details, "tensors": [t for r in results for t in r.details["tensors"]]})


def padded_mask(T: int, pad: int, left: bool, interior: bool) -> torch.Tensor:
    """A [2, T] attention_mask: `pad` tokens of left padding in row 0 and/or of interior padding in row 1."""
    m = torch.ones(2, T, dtype=torch.long)
    if left:
        m[0, :pad] = 0
    if interior:
        m[1, T // 2:T // 2 + pad] = 0
    return m


SWAP, BEAM = (1, 0), (2, 0, 0, 3)    # cache_ops' reorders: the 2 prompts swapped; of 4 rows, row 1 dropped, row 0 doubled


def cache_ops(case: LayerCase, prompts, draw, step, truths, crop: bool, c: float, n: int, cache=None) -> Result:
    """Generation's cache operations against decoding the transformed batch from scratch.  Prefill the 2 prompts
    (float64 values of the dtype, [2, T0, hidden]) with a fla Cache, then, decoding n new tokens per row after
    each: reorder_cache(SWAP); batch_repeat_interleave(2) (several return sequences per prompt);
    reorder_cache(BEAM) (a beam step); crop to T0 + 1 tokens.  Each decoded output against truths(history) (the
    literal's full forward of each row's token history [rows, t, hidden] -> (truth, same-dtype) outputs).
    crop False: the layer's cache holds a recurrent or convolution state it cannot roll back, so crop must
    refuse (NotImplementedError), never decode silently on.  An operation the layer raises on ends the sequence:
    the outputs so far are judged and the check fails, naming it.  draw(rows, n): new tokens; step(tokens,
    cache, length): the layer's output on tokens [rows, k, hidden] (float64 values) with the cache, `length`
    the history length after them; cache: the empty cache to use (default: the tree's Cache where it defines the
    operations, else the harness's: pathmdn_verify.layers.kv_cache.new_cache)."""
    which = "given"
    if cache is None:
        cache, which = new_cache(OPERATIONS)
    hist = prompts
    keep = prompts.shape[1] + 1
    tensors, notes = [], []

    def decode(name):
        nonlocal hist
        new = draw(hist.shape[0], n)
        o = torch.cat([step(new[:, j:j + 1], cache, hist.shape[1] + j + 1) for j in range(n)], 1)
        hist = torch.cat([hist, new], 1)
        truth, same = truths(hist)
        tensors.append((f"o after {name}", o, truth[:, -n:], same[:, -n:]))

    def reorder(rows):
        nonlocal hist
        call(cache.reorder_cache, torch.tensor(rows, device=case.ctx.device))
        hist = hist[list(rows)]

    def repeat():
        nonlocal hist
        call(cache.batch_repeat_interleave, 2)
        hist = hist.repeat_interleave(2, 0)

    def cut():
        nonlocal hist
        call(cache.crop, keep)
        hist = hist[:, :keep]
    operations = [(f"reorder {list(SWAP)}", lambda: reorder(SWAP)), ("repeat x2", repeat),
                  (f"reorder {list(BEAM)}", lambda: reorder(BEAM))] + ([(f"crop to {keep}", cut)] if crop else [])
    raised, doing = None, "the prefill"
    try:
        step(prompts, cache, prompts.shape[1])
        for doing, operation in operations:
            operation()
            decode(doing)
    except LayerRaised as exc:
        raised = f"{doing} (then decoding) raised {exc}"
    if raised is None and not crop:
        try:
            cache.crop(keep)
        except NotImplementedError as exc:
            notes.append(f"crop refused as declared ({exc})")
        else:
            raised = f"crop({keep}) of a cache with a recurrent or convolution state did not refuse"
    if not tensors:
        raise LayerRaised(raised)
    res = judge(case, tensors, c, f"T0={prompts.shape[1]}, {n} decoded after each operation",
                {"crop": crop, "cache": which})
    if raised is not None:
        res.message += f"; then {raised}"
        res.status, res.kind = "fail", res.kind or "exception"
    if notes:
        res.message += "; " + "; ".join(notes)
    return res
