"""Bytecode for a Python that writes none.

Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, -B) and the packages were installed without it (torch
has no .pyc in its __pycache__: an image built so), every process compiles what it imports from source, in
every run: the parent, the fork server and each worker compile torch, dynamo, transformers and fla again.
There the `verify` command keeps the bytecode its processes compile in a folder of its own, as Python itself
does under PYTHONPYCACHEPREFIX (sys.pycache_prefix), and later runs read it back; nothing is written beside
the sources.  Python checks each .pyc against its source's size and modification time as always, so an edited
module is compiled again.  $VERIFY_BYTECODE_DIR names the folder, or is `off`.
"""
from __future__ import annotations

import importlib.util
import os
import sys

ENV = "VERIFY_BYTECODE_DIR"
PROBE = "torch"          # the package whose missing bytecode says that the image was installed without any
_kept: list[str] = []    # the folder enable() set, while it is this process's


def folder() -> str | None:
    """$VERIFY_BYTECODE_DIR (None for `off`), else `verify-bytecode` beside Triton's on-disk cache, as the verdict
    cache: $TRITON_CACHE_DIR's folder, else $TRITON_HOME (or ~)/.triton."""
    from pathmdn_verify.platform import timing
    given = os.environ.get(ENV)
    if given:
        return None if given == "off" else os.path.abspath(given)
    return os.path.join(os.path.dirname(os.path.abspath(timing.disk_cache_dir())), "verify-bytecode")


def uncompiled(module: str | None = None) -> bool:
    """Whether this process compiles `module` from source each time: it writes no bytecode, reads none from a
    folder of the user's (PYTHONPYCACHEPREFIX), and `module`'s source has no .pyc in its __pycache__."""
    if not sys.dont_write_bytecode or sys.pycache_prefix is not None:
        return False
    spec = importlib.util.find_spec(module or PROBE)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    return not os.path.exists(importlib.util.cache_from_source(spec.origin))     # no prefix: its __pycache__


def enable(module: str | None = None) -> str | None:
    """Where `module` is uncompiled, write and read bytecode in folder() from now on.  The folder, or None (the
    process is left as it was)."""
    if kept():
        return _kept[0]
    where = folder() if uncompiled(module) else None
    if where is not None:
        sys.pycache_prefix, sys.dont_write_bytecode = where, False
        _kept[:] = [where]
    return where


def kept() -> bool:
    """Whether enable() made this process keep its bytecode in its folder (and nothing has changed that since)."""
    return bool(_kept) and sys.pycache_prefix == _kept[0] and not sys.dont_write_bytecode


def server_environ() -> dict[str, str | None]:
    """The variables a Python this process starts needs to keep bytecode in the same folder (None: unset it):
    PYTHONPYCACHEPREFIX, and no PYTHONDONTWRITEBYTECODE.  Empty where enable() did nothing."""
    return {"PYTHONPYCACHEPREFIX": _kept[0], "PYTHONDONTWRITEBYTECODE": None} if kept() else {}


def interpreter_flags(flags: list[str]) -> list[str]:
    """The command-line flags a Python this process starts gets from multiprocessing (this process's own, as
    subprocess._args_from_interpreter_flags makes them), less -B where enable() keeps bytecode: with it the
    fork server would not write the bytecode of what it imports (torch, dynamo)."""
    return [f for f in flags if f != "-B"] if kept() else flags


def note(module: str | None = None) -> str | None:
    """The header's line about bytecode: the folder where enable() keeps it, or, where $VERIFY_BYTECODE_DIR is off
    and every process compiles what it imports from source, that and its remedy."""
    module = module or PROBE
    if kept():
        return (f"bytecode: Python writes none here (PYTHONDONTWRITEBYTECODE or -B) and {module} has none, so this "
                f"run's processes keep what they compile in {_kept[0]} (${ENV}: another folder, or off)")
    if not uncompiled(module):
        return None
    spec = importlib.util.find_spec(module)
    site = os.path.dirname(os.path.dirname(spec.origin))
    return (f"note: Python writes no bytecode here (PYTHONDONTWRITEBYTECODE or -B) and {module} has none, so every "
            f"process compiles what it imports from source; once: python -m compileall -q {site}")
