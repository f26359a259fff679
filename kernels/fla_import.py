"""Importing fla from a checkout whose fla/__init__.py cannot run here (it imports the model zoo, fla.layers /
fla.models, which need `transformers`): fla is registered as a package whose __init__ is not executed, so
fla.ops.* and fla.utils import from the checkout and the model zoo is never loaded.  A tree whose `import fla`
works is imported normally.  Nothing here imports fla or the toolkit (verify.core.kernel_root and
kernels.fla_ops call it).
"""
from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

MODEL_ZOO = ("layers", "models")     # the model zoo's subpackages: importing them runs transformers
SHIM_MARK = "__verify_init_not_executed__"     # attribute of a shimmed `fla`: why its __init__ did not run


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


def install_import_shim() -> str | None:
    """Before anything imports fla: if the fla that `import fla` would load is a tree whose __init__ cannot
    run here (:func:`init_obstacle`), register it as a package whose __init__ is not executed.  Returns the
    reason when the shim is (or already was) in place, None when fla is imported normally.  Idempotent; never
    imports fla."""
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
    if why is None:
        return None
    shim = importlib.util.spec_from_file_location("fla", init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(shim)     # not executed: no model zoo
    module.__version__ = read_version(init)             # fla/utils (0.5.x) does `from .. import __version__`
    setattr(module, SHIM_MARK, why)
    sys.modules["fla"] = module
    return why
