"""How fla is imported: its re-exporting packages lazily, and a checkout whose fla/__init__.py cannot run here
without that __init__.

fla, fla.ops, fla.layers and fla.models have __init__s that only import their subpackages and re-export
names (fla.ops/__init__.py imports every op: 5 of a check worker's 6 s start on this 2-core CPU, while a
check needs one op).  Each such package is registered as a *lazy package* (:func:`lazy_package`): importing
a submodule (`import fla.ops.path_attn`) runs that submodule only; the first use of any other name
(`from fla.ops import chunk_gla`, `fla.layers.__all__`) runs the package's __init__ in full, so nothing it
defines is lost, only deferred.  A package qualifies only when its __init__ does nothing but that
(:func:`deferrable`: imports, assignments to plain names, function definitions, calls of those
functions, docstrings; no assignment into another module or os.environ) and imports only what is installed
(a missing module is the tree's import error, reported at once); any other is imported normally.

A checkout whose fla/__init__.py cannot run here (it imports the model zoo, fla.layers / fla.models, which
need `transformers`; or fla-core 0.6's extend_path would pull in another fla's zoo) gets a `fla` whose
__init__ is never executed: fla.ops.* and fla.utils import from the checkout and the model zoo is never
loaded.  Nothing here imports fla or the toolkit (pathmdn_verify.platform.kernel_root and pathmdn_verify.kernels.fla_ops call it).
"""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path

MODEL_ZOO = ("layers", "models")     # the model zoo's subpackages: importing them runs transformers
SHIM_MARK = "__verify_init_not_executed__"     # attribute of a shimmed `fla`: why its __init__ did not run
LAZY_MARK = "__verify_lazy_init__"             # attribute of a lazy package whose __init__ has not run yet
LAZY = ("fla", "fla.ops", "fla.layers", "fla.models")     # the re-exporting packages (module docstring)


def read_version(init: Path) -> str | None:
    """__version__ as fla/__init__.py assigns it (read, not imported)."""
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", init.read_text(errors="replace"), re.MULTILINE)
    return found.group(1) if found else None


def _top_level_imports(body: list) -> list[tuple[str, int]]:
    """(module, line) of every import that runs unconditionally at module level: inside if / else too, not
    inside try (a guarded import is the package's own business) nor inside functions."""
    found = []
    for node in body:
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "fla" + ("." + node.module if node.module else "")
                found.append((base, node.lineno))
                if not node.module:                  # from . import layers
                    found += [(f"fla.{a.name}", node.lineno) for a in node.names]
            elif node.module:
                found.append((node.module, node.lineno))
        elif isinstance(node, ast.If):
            found += _top_level_imports(node.body) + _top_level_imports(node.orelse)
    return found


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def init_obstacle(root: Path | str) -> str | None:
    """Why ROOT/fla/__init__.py cannot run here although the tree has kernels (fla/ops): an unconditional
    import of the model zoo (fla.layers / fla.models) while transformers is not installed, or of any other
    module that is not installed, or (fla-core 0.6's `extend_path`) a tree without the model zoo while another
    fla directory on sys.path has one (flash-linear-attention installed: its layers would run on this tree's
    ops); None when it can run (or the tree has no fla/ops: nothing to rescue, the
    import error then names the cause)."""
    pkg = Path(root) / "fla"
    if not (pkg / "ops").is_dir():
        return None
    try:
        tree = ast.parse((pkg / "__init__.py").read_text(errors="replace"))
    except SyntaxError:
        return None                                  # let the import report it
    for module, line in _top_level_imports(tree.body):
        words = module.split(".")
        if words[0] == "fla":
            if len(words) > 1 and words[1] in MODEL_ZOO and not _findable("transformers"):
                return f"fla/__init__.py:{line} imports the model zoo ({module}), which needs transformers (not installed)"
        elif not _findable(words[0]):
            return f"fla/__init__.py:{line} imports {module} (not installed)"
    text = (pkg / "__init__.py").read_text(errors="replace")
    if "extend_path" in text:         # fla-core 0.6: the model zoo comes from any other fla directory on sys.path
        for zoo in MODEL_ZOO:
            if not (pkg / zoo).is_dir():
                other = next((Path(p) / "fla" / zoo for p in sys.path if p and (Path(p) / "fla" / zoo).is_dir()
                              and (Path(p) / "fla").resolve() != pkg.resolve()), None)
                if other is not None:
                    return (f"fla/__init__.py extends fla's path to {other.parent}, whose {zoo} would import "
                            "against this tree's ops")
    return None


def deferrable(init: Path) -> bool:
    """Whether a package __init__ only imports and names things (module docstring), and imports no module
    outside fla that is missing (its import error is the tree's to report at once): then running it later, on
    the first use of a name it defines, changes nothing but when it runs."""
    try:
        tree = ast.parse(init.read_text(errors="replace"))
    except SyntaxError:
        return False                                   # imported normally: the import reports it
    missing = [m for m, _ in _top_level_imports(tree.body) if m.split(".")[0] != "fla" and not _findable(m.split(".")[0])]
    return not missing and _only_reexports(tree)


def _only_reexports(tree: ast.Module) -> bool:
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}

    def plain(nodes) -> bool:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Pass)):
                continue
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                if all(isinstance(t, ast.Name) for t in targets):
                    continue
                return False
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue                               # a docstring
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name) and node.value.func.id in defined:
                continue
            if isinstance(node, ast.If) and plain(node.body) and plain(node.orelse):
                continue
            if isinstance(node, ast.Try) and plain(node.body) and plain(node.orelse) and plain(node.finalbody) \
                    and all(plain(h.body) for h in node.handlers):
                continue
            return False
        return True
    return plain(tree.body)


def lazy_package(name: str, init: Path, never_run: str | None = None):
    """Register package `name` (its __init__.py at `init`) without running its __init__ (module docstring);
    never_run: why the __init__ must not run at all (then a name it would define is an AttributeError
    saying so).  Returns the module."""
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    if name == "fla":
        module.__version__ = read_version(init)         # fla/utils does `from fla import __version__`

    def __getattr__(attr: str):
        if (init.parent / attr / "__init__.py").is_file() or (init.parent / f"{attr}.py").is_file():
            return importlib.import_module(f"{name}.{attr}")     # a submodule: only it runs
        if never_run is not None or (attr.startswith("__") and attr != "__all__"):
            raise AttributeError(f"module {name!r} has no attribute {attr!r}"
                                 + (f" (its __init__ is not run here: {never_run})" if never_run else ""))
        del module.__getattr__, module.__dict__[LAZY_MARK]
        exec(compile(init.read_text(), str(init), "exec"), module.__dict__)
        return getattr(module, attr)

    module.__getattr__ = __getattr__
    setattr(module, LAZY_MARK, True)
    if never_run is not None:
        setattr(module, SHIM_MARK, never_run)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def is_lazy(module) -> bool:
    """A lazy package (lazy_package) whose __init__ has not run: it has defined nothing yet."""
    return getattr(module, LAZY_MARK, False)


# ---------------------------------------------------------------------------------------- declared import fixes
# A tree may fail to import under this toolkit's pinned Triton and packages for a reason that has nothing to do
# with its kernels.  Each such defect is declared here once, with the trees it was found in; the fix is applied
# to a module's code as it is imported (the files are never changed), only in a module where the defect is found
# by reading it, and every run names the fixes its tree calls for (scan_fixes: the header, kernel_package.import_fixes).
IMPORT_FIXES = {
    "undefined_fla_cache_results": (
        "reads FLA_CACHE_RESULTS, which it never defines: defined as fla 0.6.0 does (fla/utils/env.py: "
        "os.getenv('FLA_CACHE_RESULTS', '1') == '1')",
        "the MDN authors' fork (fla 0.3.2, fla/utils.py:26): the line runs only where triton.autotune takes "
        "cache_results (Triton >= 3.4), so the fork imported under the Triton it was written for and fails under 3.6"),
    "unused_missing_import": (
        "imports pandas, not installed here, and never uses the name: the import is left out",
        "the MDN authors' fork: `import pandas as pd` in fla/ops/momentum_delta_rule/chunk.py and naive.py"),
}
UNUSED_IMPORTS = ("pandas",)     # the modules unused_missing_import leaves out (any other missing import stays an error)
_IMPORT_LINE = re.compile(r"^import (%s)\b" % "|".join(UNUSED_IMPORTS), re.MULTILINE)


def _names_read(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _module_level_reads(tree: ast.Module) -> set[str]:
    """Names read by the module's own statements (not inside its functions or classes)."""
    found: set[str] = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)
    for stmt in tree.body:
        visit(stmt)
    return found


def _bound(tree: ast.Module) -> set[str]:
    """Names the module binds at its top level (assignments, imports, definitions)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _unused_missing_imports(tree: ast.Module) -> list[ast.Import]:
    read = _names_read(tree)
    return [node for node in tree.body if isinstance(node, ast.Import)
            and all(a.name.split(".")[0] in UNUSED_IMPORTS and not _findable(a.name.split(".")[0])
                    and (a.asname or a.name.split(".")[0]) not in read for a in node.names)]


def fix_module(tree: ast.Module) -> list[str]:
    """Apply to a module's syntax tree the declared fixes whose defect it has (in place); their names."""
    applied = []
    if "FLA_CACHE_RESULTS" in _module_level_reads(tree) and "FLA_CACHE_RESULTS" not in _bound(tree):
        at = next((i for i, n in enumerate(tree.body) if not (isinstance(n, ast.ImportFrom) and n.module == "__future__"
                                                          or i == 0 and isinstance(n, ast.Expr)
                                                          and isinstance(n.value, ast.Constant))), len(tree.body))
        tree.body[at:at] = ast.parse("FLA_CACHE_RESULTS = __import__('os').getenv('FLA_CACHE_RESULTS', '1') == '1'").body
        applied.append("undefined_fla_cache_results")
    unused = _unused_missing_imports(tree)
    if unused:
        tree.body[:] = [ast.copy_location(ast.Pass(), n) if n in unused else n for n in tree.body]
        applied.append("unused_missing_import")
    ast.fix_missing_locations(tree)
    return applied


def _needs_fix(text: str) -> bool:
    """A cheap reading of a module's text: could one of IMPORT_FIXES apply (then its syntax tree decides)?"""
    return "FLA_CACHE_RESULTS" in text or any(not _findable(m) for m in set(_IMPORT_LINE.findall(text)))


AFTER_IMPORT: dict[str, list] = {}      # module name -> functions run on the module once it has been executed


def after_import(name: str, fn) -> None:
    """Run fn(module) once fla's module `name` has been imported (at once if it already has): how a device answer
    that a module reads at call time from its own globals is given to that module alone, without importing it
    early."""
    module = sys.modules.get(name)
    if module is not None and not is_lazy(module):
        fn(module)
    else:
        AFTER_IMPORT.setdefault(name, []).append(fn)


class _FixingLoader(importlib.machinery.SourceFileLoader):
    """A module's loader that compiles it with the declared fixes its defects call for (fix_module), and runs
    the after_import functions registered for it."""

    def exec_module(self, module):
        super().exec_module(module)
        for fn in AFTER_IMPORT.pop(module.__name__, ()):
            fn(module)

    def get_code(self, fullname):
        text = self.get_data(self.path).decode("utf-8", errors="replace")
        if not _needs_fix(text):
            return super().get_code(fullname)
        tree = ast.parse(text, self.path)
        if not fix_module(tree):
            return super().get_code(fullname)
        return compile(tree, self.path, "exec", dont_inherit=True)     # never cached: the file is unchanged


class _FixingFinder:
    """Finds fla's modules as the path finder does, with _FixingLoader as their loader."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "fla" and not name.startswith("fla."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader) \
                and not isinstance(spec.loader, _FixingLoader):
            spec.loader = _FixingLoader(spec.loader.name, spec.loader.path)
        return spec


def scan_fixes(package: Path | str) -> dict[str, list[str]]:
    """The declared import fixes that the modules of a package directory (fla) call for, read from its files
    (what _FixingLoader applies to each as it is imported): file relative to the package's parent -> names."""
    package = Path(package)
    found = {}
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(errors="replace")
        if _needs_fix(text):
            try:
                applied = fix_module(ast.parse(text))
            except SyntaxError:
                continue                     # the import reports it
            if applied:
                found[str(path.relative_to(package.parent))] = applied
    return found


def install_import_shim() -> str | None:
    """Before anything imports fla: register fla's re-exporting packages lazily (module docstring), and, if
    the fla that `import fla` would load is a tree whose __init__ cannot run here (:func:`init_obstacle`),
    register fla as a package whose __init__ never runs.  Returns that reason when the shim is (or already
    was) in place, None otherwise.  Idempotent; never imports fla."""
    if not any(isinstance(f, _FixingFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _FixingFinder())
    loaded = sys.modules.get("fla")
    if loaded is not None:
        return getattr(loaded, SHIM_MARK, None)
    try:
        spec = importlib.util.find_spec("fla")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        return None
    init = Path(spec.origin)
    why = init_obstacle(init.parent.parent)
    for name in LAZY:
        path = init.parent.joinpath(*name.split(".")[1:], "__init__.py")
        lazy = path.is_file() and deferrable(path)
        if name == "fla" and why is None and not lazy:
            return None                                # fla's own __init__ does more: imported normally
        if name != "fla" and not lazy:
            continue
        lazy_package(name, path, never_run=why if name == "fla" else None)
    return why
