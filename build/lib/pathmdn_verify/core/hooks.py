"""What the platform lends the pure core while a check runs, as plain functions it may replace (`install`):

    phase(name, device)   a context manager charging the body's time to `name` (kernel, oracle, same_dtype)
    every_config(fn)      the rounds an evaluation runs in: [fn()], or one per tile config (--configs all)
    last_example()        the tile configs the last hypothesis example ran, for a failing case's record

Outside a run (a test of the core, a script) they are no-ops; pathmdn_verify.platform.setup installs the
platform's (pathmdn_verify.platform.timing, .configs).  The core calls them through this module, so that it
imports nothing of the platform.
"""
from __future__ import annotations

import contextlib


def phase(name: str, device: str):
    return contextlib.nullcontext()


def every_config(fn) -> list:
    return [fn()]


def last_example() -> dict:
    return {}


NAMES = ("phase", "every_config", "last_example")


def install(**hooks) -> None:
    """Replace the named hooks (each a function with the signature above)."""
    unknown = set(hooks) - set(NAMES)
    if unknown:
        raise ValueError(f"no hook named {sorted(unknown)}")
    globals().update(hooks)
