"""What code a check depends on: the source files its kernel's call graph reaches, found from the objects the
kernel is entered by (its roots: an entry-point function, a layer class, a user's function), so that a verdict can
be reused while those files are unchanged (pathmdn_verify.run.cache).

`reach(roots, within)` follows every name a function's code (and its nested code, defaults and closure) refers to
in its globals, every method and base of a class, the function under a decorator (__wrapped__, Triton's
JITFunction / Autotuner / Heuristics .fn), and for a module referred to, its file and the names the code takes from
it; it keeps the objects defined in files under `within` (the kernel package's folder, a user's package).  A file
reached is one whose code the kernel may run: a superset of what one example executes, never less than the call
graph, and found in milliseconds from the loaded objects (tracing the calls instead doubled a check's time).
A root that is a module stands for every file of its package."""
from __future__ import annotations

import dis
import functools
import hashlib
import importlib
import importlib.util
import inspect
import types
from pathlib import Path


def _file(obj) -> str | None:
    try:
        f = inspect.getsourcefile(obj)
    except (TypeError, OSError):
        return None
    return str(Path(f).resolve()) if f else None


def _unwrapped(obj):
    """The Python function under decorators: functools.wraps' __wrapped__, Triton's .fn chain."""
    seen = set()
    while id(obj) not in seen:
        seen.add(id(obj))
        nxt = getattr(obj, "__wrapped__", None) or (getattr(obj, "fn", None) if not inspect.isfunction(obj) else None)
        if nxt is None or nxt is obj:
            return obj
        obj = nxt
    return obj


def _codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def reach(roots, within: list[Path]) -> set[str]:
    """The source files under `within` that the roots' call graph reaches (absolute paths)."""
    dirs = [str(Path(w).resolve()) for w in within]
    inside = lambda f: f is not None and any(f == d or f.startswith(d + "/") for d in dirs)  # noqa: E731
    files: set[str] = set()
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            f = _file(obj)
            if inside(f):
                files.add(f)
            continue
        if isinstance(obj, functools.partial):
            todo += [obj.func, *obj.args, *obj.keywords.values()]
            continue
        if isinstance(obj, (dict, list, tuple, set, frozenset)):       # a table of functions the code picks from
            todo += list(obj.values() if isinstance(obj, dict) else obj)
            continue
        fn = _unwrapped(obj)
        if fn is not obj:
            todo.append(fn)
        if inspect.isclass(obj):
            f = _file(obj)
            if inside(f):
                files.add(f)
                todo += [b for b in obj.__bases__]
                todo += [v for v in vars(obj).values()]
            continue
        if isinstance(obj, (staticmethod, classmethod)):
            todo.append(obj.__func__)
            continue
        if isinstance(obj, property):
            todo += [obj.fget, obj.fset, obj.fdel]
            continue
        if not inspect.isfunction(fn):
            continue
        f = _file(fn)
        if not inside(f):
            continue
        files.add(f)
        names = {n for c in _codes(fn.__code__) for n in c.co_names}
        todo += _imported(fn, names)          # `import` / `from ... import` inside the function
        for n in names:
            if n in fn.__globals__:
                v = fn.__globals__[n]
                todo.append(v)
                if isinstance(v, types.ModuleType):       # module.attr: the attributes the code names
                    todo += [getattr(v, a) for a in names if hasattr(v, a)]
        todo += list(fn.__defaults__ or ()) + [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
        todo += list((fn.__kwdefaults__ or {}).values())
    return files


def _imported(fn, names: set[str]) -> list:
    """The modules a function imports in its own body (IMPORT_NAME, relative ones resolved against its package),
    and the names it takes from them."""
    out = []
    for code in _codes(fn.__code__):
        level = 0
        for ins in dis.get_instructions(code):
            if ins.opname == "LOAD_CONST" and isinstance(ins.argval, int):
                level = ins.argval
            elif ins.opname == "IMPORT_NAME":
                try:
                    name = importlib.util.resolve_name("." * level + ins.argval, fn.__globals__.get("__package__"))
                    module = importlib.import_module(name)
                except (ImportError, ValueError, TypeError):
                    continue
                out.append(module)
                out += [getattr(module, a) for a in names if hasattr(module, a)]
    return out


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def package_files(module: types.ModuleType) -> set[str]:
    """Every .py file of a module's package folder."""
    top = Path(_file(module)).parent
    return {str(p.resolve()) for p in top.rglob("*.py") if "__pycache__" not in p.parts}


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def top_folder(obj) -> Path:
    """The folder of the top package holding obj's source file (its own folder for a lone file)."""
    folder = Path(_file(_unwrapped(obj))).parent
    while (folder / "__init__.py").is_file() and (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return folder


def fla_reach(*entries) -> set[str]:
    """The files of the fla package that the call graph of its entry points reaches (each entry a function
    returning the entry point, as the adapters find it)."""
    import fla
    return reach([e() for e in entries], [Path(_file(fla)).parent])


def fla_files() -> set[str]:
    """Every .py file of the fla package (what a check of the whole package, a canary, depends on)."""
    import fla
    return package_files(fla)
