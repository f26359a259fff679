"""Versions and device facts recorded in every JSON result and report."""
from __future__ import annotations

import importlib.metadata as md
import platform

from verify.errors import UsageError

PACKAGES = {"numpy": "numpy", "torch": "torch", "triton": "triton", "sympy": "sympy",
            "mpmath": "mpmath", "hypothesis": "hypothesis", "fla": "fla-core"}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name, dist in PACKAGES.items():
        try:
            out[name] = md.version(dist)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def resolve_device(requested: str | None) -> str:
    """cuda when available unless told otherwise; asking for cuda without a GPU is an error."""
    import torch
    has_cuda = torch.cuda.is_available()
    if requested is None:
        return "cuda" if has_cuda else "cpu"
    if requested == "cuda" and not has_cuda:
        raise UsageError("--device cuda requested but torch sees no CUDA GPU on this machine")
    return requested


def describe(device: str) -> dict:
    import torch
    import importlib.util
    spec = importlib.util.find_spec("fla")
    info = {"device": device, "platform": platform.platform(), "cpu_count": _cpu_count(),
            "fla_origin": None if spec is None else spec.origin}
    if device == "cuda":
        info["device_name"] = torch.cuda.get_device_name(0)
    else:
        info["device_name"] = platform.processor() or platform.machine()
    return info


def _cpu_count():
    import os
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
