"""Validation of user-supplied kernel inputs (`verify compare`): one function per concern, each raising
UsageError with one line that names the tensor and the problem; each op's validation (its record's
error_inputs, verify/ops/) composes them.  Layouts and domains are the canonical
conventions (docs/design.md section 3): [B, T, H, D] tensors, [B, T, H] gates.
"""
from __future__ import annotations

import torch

from pathmdn_verify.core.errors import UsageError

# |norm(w_t) - 1| allowed: fla uses w as given (no re-normalisation); a unit vector stored in fp32 is
# within 1e-7 of norm 1, one normalised in bf16 arithmetic within ~1e-2 is not what the kernel assumes.
W_NORM_TOL = 1e-3


def keys(x: dict, required: tuple[str, ...], optional: tuple[str, ...], op: str) -> None:
    """Every required tensor present, none unknown."""
    missing = [n for n in required if x.get(n) is None]
    unknown = sorted(set(x) - set(required) - set(optional))
    needs = f"{op} takes {', '.join(required)}" + (f" and optionally {', '.join(optional)}" if optional else "")
    if missing:
        raise UsageError(f"missing tensor {', '.join(missing)} ({needs})")
    if unknown:
        raise UsageError(f"unknown tensor {', '.join(unknown)} ({needs})")
    for n, t in x.items():     # an optional input may be an option's value (fla's modules: an activation, eps)
        if t is not None and not isinstance(t, torch.Tensor) and (n in required or not isinstance(t, OPTION_VALUES)):
            raise UsageError(f"{n}: a {type(t).__name__}, not a tensor")


OPTION_VALUES = (bool, int, float, str)


def shape(name: str, t: torch.Tensor | None, expected: tuple[int, ...], layout: str) -> None:
    """t has exactly the expected shape (rank included); layout names the dimensions for the message."""
    if t is not None and tuple(t.shape) != tuple(expected):
        raise UsageError(f"{name}: shape {tuple(t.shape)} (rank {t.dim()}), expected {layout} = {tuple(expected)}")


def rank(name: str, t: torch.Tensor, n: int, layout: str) -> None:
    if t.dim() != n:
        raise UsageError(f"{name}: rank {t.dim()} (shape {tuple(t.shape)}), expected rank {n} {layout}")


def tokens(T: int) -> None:
    if T < 1:
        raise UsageError(f"q: T = {T} tokens; the kernels and the oracles need at least one")


def heads(HQ: int, H: int) -> None:
    if H == 0 or HQ % H:
        raise UsageError(f"q has HQ = {HQ} heads, not a multiple of the H = {H} heads of k and v")


def finite(x: dict) -> None:
    for n, t in x.items():
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            bad = ~torch.isfinite(t)
            if bad.any():
                first = tuple(int(i) for i in bad.nonzero()[0])
                raise UsageError(f"{n}: {int(t.isnan().sum())} NaN and {int(t.isinf().sum())} Inf values "
                                 f"(first at index {first})")


def unit_norm(name: str, w: torch.Tensor, tol: float = W_NORM_TOL) -> None:
    dev = (w.double().norm(dim=-1) - 1).abs()
    if dev.numel() and float(dev.max()) > tol:
        worst = tuple(int(i) for i in (dev == dev.max()).nonzero()[0])
        raise UsageError(f"{name}: rows must have norm 1 within {tol:g} (the kernel uses w as given); "
                         f"|norm - 1| = {float(dev.max()):.3g} at index {worst}")


def interval(name: str, t: torch.Tensor | None, lo: float, hi: float, lo_open: bool, hi_open: bool) -> None:
    """Every value of t in the interval from lo to hi (open or closed at each end)."""
    if t is None:
        return
    ok = (t > lo if lo_open else t >= lo) & (t < hi if hi_open else t <= hi)
    if not bool(ok.all()):
        bad = t[~ok]
        span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise UsageError(f"{name}: {bad.numel()} values outside {span} (min {float(t.min()):.4g}, "
                         f"max {float(t.max()):.4g})")


def cu_seqlens(c: torch.Tensor | None, B: int, T: int) -> None:
    if c is None:
        return
    if c.dim() != 1 or c.is_floating_point() or c.numel() < 2:
        raise UsageError(f"cu_seqlens: must be a 1-D integer tensor [N+1], got {c.dtype} of shape {tuple(c.shape)}")
    v = c.tolist()
    if B != 1 or v[0] != 0 or v[-1] != T or any(b < a for a, b in zip(v, v[1:])):
        raise UsageError(f"cu_seqlens: {v} must rise from 0 to T = {T}, with batch size 1 (B = {B})")


def linear_qkv(x: dict, grouped_values: bool = False) -> tuple[int, int, int, int, int]:
    """q, k [B, T, H, Dk]; v [B, T, H, Dv], or with grouped_values [B, T, HV, Dv] with HV a multiple of H
    -> (B, T, H, Dk, Dv)."""
    q, k, v = x["q"], x["k"], x["v"]
    for n, t in (("q", q), ("k", k), ("v", v)):
        rank(n, t, 4, "[B, T, H, D]")
    B, T, H, Dk = k.shape
    Dv = v.shape[3]
    shape("q", q, k.shape, "the shape of k [B, T, H, Dk]")
    HV = v.shape[2] if grouped_values and v.shape[2] % H == 0 else H
    shape("v", v, (B, T, HV, Dv), "[B, T, HV, Dv] (B, T of k; HV a multiple of k's H)" if grouped_values
          else "[B, T, H, Dv] (B, T, H of k)")
    tokens(T)
    return B, T, H, Dk, Dv
