"""Running a selection of checks: workers (runner.py), the terminal, the expected-failure list, the sanitizer; and
what every process that runs checks loads first (`load_checks`): the check families, the implementations
installed as plug-ins, and those a run names with --impl.

Implementations are found three ways: the built-in fla; installed packages' entry points of the group
`pathmdn_verify` (each names a module, whose import registers implementations with pathmdn_verify.implement, or
an object: an Implementation, a list of them, or a function returning them); and --impl SPEC, where SPEC is a
registered name, `module[:attr]` or `path/to/file.py[:attr]` (the same objects).  The run's specs reach its
workers through $VERIFY_IMPLS.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import dataclasses
import json
import os
import sys
import traceback
import types
from pathlib import Path

from pathmdn_verify.core.errors import UsageError

# Comma-separated modules that register extra checks when imported (tests plant checks that crash, hang or raise a
# fatal CUDA error this way): every process that runs checks, the reporting one and each worker, imports them.
EXTRA_CHECKS_ENV = "VERIFY_EXTRA_CHECKS"
IMPLS_ENV = "VERIFY_IMPLS"            # JSON list of the run's --impl specs, for its workers
ENTRY_POINTS = "pathmdn_verify"       # the entry-point group of implementation plug-ins
_loaded: dict[str, tuple[str, ...]] = {}     # spec -> the implementation names it registered


def load_checks() -> None:
    """Register every check family, the modules named by $VERIFY_EXTRA_CHECKS, the installed implementation
    plug-ins and the specs of $VERIFY_IMPLS, and declare the checks of every registered implementation."""
    from pathmdn_verify import checks
    from pathmdn_verify.checks import kernel_checks
    from pathmdn_verify.ops import impls
    checks.load_all()
    for name in filter(None, os.environ.get(EXTRA_CHECKS_ENV, "").split(",")):
        importlib.import_module(name)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        _load(ep.value, lambda ep=ep: ep.load(), default_spec=ep.name,
              where=f"the installed plug-in {ep.name} (entry point {ENTRY_POINTS}: {ep.value})")
    for spec in json.loads(os.environ.get(IMPLS_ENV, "[]")):
        load_impl(spec)
    for impl in impls.registered():
        kernel_checks.declare(impl.record)


def load_impl(spec: str) -> tuple[str, ...]:
    """The implementation names a --impl SPEC stands for, loading it first when it is a module or file; a
    UsageError (one line) when it names nothing this process can load."""
    from pathmdn_verify.ops import impls
    if spec == impls.BUILT_IN or any(i.name == spec for i in impls.registered()):
        return (spec,)
    module, _, attr = spec.partition(":") if not _windows_drive(spec) else (spec, "", "")
    if module.endswith(".py") or os.sep in module:
        path = Path(module).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"--impl {spec}: no such file {path}")
        names = _load(spec, lambda: _from_file(path, attr), default_spec=f"{path}{':' + attr if attr else ''}",
                      where=f"--impl {spec}")
    elif not module.replace(".", "").replace("_", "").isalnum():
        raise UsageError(f"--impl {spec}: neither a registered implementation nor module[:attr] nor file.py[:attr]")
    else:
        names = _load(spec, lambda: _from_module(module, attr, spec), default_spec=spec, where=f"--impl {spec}")
    if not names:
        raise UsageError(f"--impl {spec}: registers no implementation (call pathmdn_verify.implement(op, fn, "
                         "name=..., fp32_dot=...) in it, or name an object that is one: file.py:attr)")
    return names


def _windows_drive(spec: str) -> bool:
    return len(spec) > 2 and spec[1] == ":" and spec[2] in "\\/"


def _from_module(module: str, attr: str, spec: str):
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            from pathmdn_verify.ops import impls
            known = ", ".join([impls.BUILT_IN, *sorted({i.name for i in impls.registered()})])
            raise UsageError(f"--impl {spec}: no implementation of that name ({known}) and no module {module!r} "
                             "on sys.path (give a file path, path/to/file.py:attr, or install the package)") from exc
        raise
    return _attribute(mod, attr, spec)


def _from_file(path: Path, attr: str):
    """Import a file as a module: a file inside a package (folders with __init__.py) by its dotted name, with the
    package's parent put on sys.path (so that it imports its package's other modules); a lone file by itself."""
    top, parts = path.parent, [path.stem]
    while (top / "__init__.py").is_file():
        parts.insert(0, top.name)
        top = top.parent
    if str(top) not in sys.path:
        sys.path.insert(0, str(top))
    return _attribute(importlib.import_module(".".join(parts)), attr, str(path))


def _attribute(mod, attr: str, spec: str):
    if not attr:
        return mod
    if not hasattr(mod, attr):
        raise UsageError(f"--impl {spec}: {mod.__name__} has no attribute {attr!r}")
    return getattr(mod, attr)


def _load(key: str, load, default_spec: str, where: str) -> tuple[str, ...]:
    """Load a plug-in once per process; the names of the implementations it registered or names.  Whatever goes
    wrong in its code (a syntax error, a bad declaration, an import that fails) is a UsageError: one line saying
    where (`where`, then the file and line of the plug-in's own code that raised) and what."""
    from pathmdn_verify.ops import impls
    if key in _loaded:
        return _loaded[key]
    before = set(impls.IMPLS)
    try:
        obj = load()
        named = _implementations(obj, default_spec)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"{where}: {_plug_in_error(exc)}") from exc
    if isinstance(obj, types.ModuleType):      # imported before (by the caller's own code): what it registered then
        named += [i for i in impls.registered() if i.module == obj.__name__]
    for i in named:
        impls.IMPLS.setdefault((i.name, i.op), i)
    for k in [k for k in impls.IMPLS if k not in before]:    # how a fresh process finds it again: where it came from
        if impls.IMPLS[k].spec is None:
            impls.IMPLS[k] = dataclasses.replace(impls.IMPLS[k], spec=default_spec)
    names = tuple(dict.fromkeys([k[0] for k in impls.IMPLS if k not in before] + [i.name for i in named]))
    _loaded[key] = names
    return names


def _plug_in_error(exc: BaseException) -> str:
    """An exception raised by a plug-in's code, in one line: what, and the last place in code that is not this
    toolkit's (a syntax error: the offending line)."""
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__} at {exc.filename}:{exc.lineno}: {exc.msg}"
    toolkit = str(Path(__file__).resolve().parent.parent)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(toolkit)
              and "importlib" not in f.filename]
    at = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}{at}"


def _implementations(obj, where: str) -> list:
    """The implementations a plug-in object names: a module names none (its import registered them), an
    Implementation itself, a list of them, a function made by pathmdn_verify.implementation its own, another
    function what it returns."""
    from pathmdn_verify.ops.impls import Implementation
    if obj is None or isinstance(obj, types.ModuleType):
        return []
    if isinstance(obj, Implementation):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [i for o in obj for i in _implementations(o, where)]
    if hasattr(obj, "implementations"):
        return list(obj.implementations)
    if callable(obj):
        return _implementations(obj(), where)
    raise UsageError(f"{where}: names a {type(obj).__name__}, not an implementation (pathmdn_verify.implement)")
