"""Helpers that the input builders of every op share (the builders themselves live with their op's record,
verify/ops/).

Tensors are produced in float64 from a seeded generator and then rounded to the requested dtype;
`as_oracle` gives the rounded values back in float64 so that a comparison measures the kernel, not the
rounding of its inputs.
"""
from __future__ import annotations

from dataclasses import asdict

import torch


def case_label(case) -> str:
    """The fields of a case dataclass that differ from the defaults, plus T and seed: enough to rebuild it."""
    default = type(case)()
    return " ".join(f"{k}={v}" for k, v in asdict(case).items() if k in ("T", "seed") or v != getattr(default, k))


def on_device(inputs: dict, device) -> dict:
    """The same inputs with every tensor moved to device (None kept)."""
    return {n: (x.to(device) if isinstance(x, torch.Tensor) else x) for n, x in inputs.items()}


def floats_as(inputs: dict, dtype: torch.dtype) -> dict:
    """The same inputs with every floating tensor converted to dtype (integer tensors and None kept)."""
    return {k: (x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x)
            for k, x in inputs.items()}


def as_oracle(inputs: dict) -> dict:
    """The same values in float64 (exact: every dtype here embeds in float64)."""
    return floats_as(inputs, torch.float64)


def linear_draws(case, gen):
    """For the linear-attention ops (MDN, GDN; case has B, T, H, Dk, Dv): q, k with unit rows (as an
    l2-normalising kernel would make them) and v [B, T, H, D] in float64, drawn from gen in this order, and
    u(lo, hi): uniform gates [B, T, H] drawn from gen when called."""
    B, T, H = case.B, case.T, case.H
    q = torch.randn(B, T, H, case.Dk, generator=gen, dtype=torch.float64)
    k = torch.randn(B, T, H, case.Dk, generator=gen, dtype=torch.float64)
    v = torch.randn(B, T, H, case.Dv, generator=gen, dtype=torch.float64)
    return (q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True), v,
            lambda lo, hi: lo + (hi - lo) * torch.rand(B, T, H, generator=gen, dtype=torch.float64))
