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


def cu_seqlens_tensor(cu_seqlens: tuple[int, ...] | None) -> torch.Tensor | None:
    """A case's cu_seqlens as the kernels take it (int32), or None (dense)."""
    return None if cu_seqlens is None else torch.tensor(cu_seqlens, dtype=torch.int32)


def floats_as(inputs: dict, dtype: torch.dtype) -> dict:
    """The same inputs with every floating tensor converted to dtype (integer tensors and None kept)."""
    return {k: (x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x)
            for k, x in inputs.items()}


def as_oracle(inputs: dict) -> dict:
    """The same values in float64 (exact: every dtype here embeds in float64)."""
    return floats_as(inputs, torch.float64)


VALUE_PATTERNS = ("ones", "one_hot", "seeded")     # simplest first: hypothesis shrinks toward the first


def patterned(seeded: torch.Tensor, pattern: str, scale_exp: int) -> torch.Tensor:
    """A free input tensor [..., T, H, D] by value pattern, times 2^scale_exp: `seeded` itself (drawn from the
    case's seed), all ones, or one-hot rows (token t has its 1 at coordinate t mod D).

    >>> patterned(torch.zeros(1, 3, 1, 2), "one_hot", 1)[0, :, 0].tolist()
    [[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]]
    """
    if pattern == "seeded":
        x = seeded
    elif pattern == "ones":
        x = torch.ones_like(seeded)
    elif pattern == "one_hot":
        T, D = seeded.shape[-3], seeded.shape[-1]
        x = torch.nn.functional.one_hot(torch.arange(T) % D, D).to(seeded)[:, None, :].expand_as(seeded)
    else:
        raise ValueError(f"unknown value pattern {pattern!r}; known: {VALUE_PATTERNS}")
    return x * 2.0 ** scale_exp if scale_exp else x


def linear_draws(case, gen):
    """For the linear-attention ops (MDN, GDN; case has B, T, H, Dk, Dv, and HV value heads where it has them):
    q, k [B, T, H, Dk] with unit rows (as an l2-normalising kernel would make them) and v [B, T, HV, Dv] in
    float64, drawn from gen in this order, and u(lo, hi): uniform gates [B, T, HV] drawn from gen when called."""
    B, T, H = case.B, case.T, case.H
    HV = getattr(case, "HV", None) or H
    q = torch.randn(B, T, H, case.Dk, generator=gen, dtype=torch.float64)
    k = torch.randn(B, T, H, case.Dk, generator=gen, dtype=torch.float64)
    v = torch.randn(B, T, HV, case.Dv, generator=gen, dtype=torch.float64)
    return (q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True), v,
            lambda lo, hi: lo + (hi - lo) * torch.rand(B, T, HV, generator=gen, dtype=torch.float64))
