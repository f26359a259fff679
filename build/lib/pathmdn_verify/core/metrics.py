"""Error measures shared by every comparison: normwise relative error and max absolute error."""
from __future__ import annotations

import torch


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref||_F / ||ref||_F in float64 (inf when x is non-finite where ref is finite).

    >>> rel_err(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    0.0
    """
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    if x.shape != ref.shape:
        raise ValueError(f"shape mismatch {tuple(x.shape)} vs {tuple(ref.shape)}")
    if not torch.isfinite(x[torch.isfinite(ref)]).all():
        return float("inf")
    den = torch.linalg.vector_norm(ref)
    num = torch.linalg.vector_norm(x - ref)
    if den == 0:
        return float(num)
    return float(num / den)


def max_abs(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| in float64 (inf when x is non-finite where ref is finite)."""
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(x[torch.isfinite(ref)]).all():
        return float("inf")
    if x.numel() == 0:
        return 0.0
    return float((x - ref).abs().max())
