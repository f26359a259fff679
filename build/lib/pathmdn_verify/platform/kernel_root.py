"""--kernel-root: verify a kernel package (fla) imported from a checkout instead of site-packages.

Any fla checkout from mid-2025 to today's HEAD, and the MDN authors' fork, can be given.  Checkouts older than
2026-06-11 (fla 0.5.0 and before, the fork) import the model zoo (fla.layers / fla.models, which need
`transformers`) from fla/__init__.py unconditionally, so `import fla.ops.path_attn` fails there on a machine
without transformers although the kernels need none of it.  For such a tree, and only for one whose
fla/__init__.py could not run here (pathmdn_verify.kernels.fla_import.init_obstacle), `fla` is registered as a package whose __init__ is
not executed (pathmdn_verify.kernels.fla_import.install_import_shim): fla.ops.* and fla.utils import from the checkout, __version__ is
read from the file, the model zoo is never loaded.  A tree whose `import fla` works is imported normally.

Every process does this through install_import_shim before anything imports fla: the CLI in
:func:`activate`, each check worker at its start (pathmdn_verify.run.runner._worker_start), and pathmdn_verify.kernels.fla_ops before
its first import of fla (so that bisect steps, localize and compare get it too).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from pathmdn_verify.kernels.fla_import import install_import_shim
from pathmdn_verify.core.errors import UsageError


def validate_kernel_root(path: str) -> str:
    """The absolute path of a directory that holds the `fla` package, or a UsageError saying why not."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise UsageError(f"--kernel-root {path}: no such directory")
    if not (root / "fla" / "__init__.py").is_file():
        hint = ""
        if (root / "flash-linear-attention" / "fla" / "__init__.py").is_file():
            hint = f" (the package is in {root / 'flash-linear-attention'}: point --kernel-root there)"
        raise UsageError(f"--kernel-root {path}: does not contain the package fla/__init__.py{hint}")
    return str(root)


def activate(path: str) -> str:
    """Put the checkout first on the import path of this process and of every process it starts (the check
    workers inherit PYTHONPATH and, being spawned, this process's sys.path), and install the import shim when
    the tree needs it; returns its absolute path.  Idempotent (a worker calls it again with ctx.kernel_root)."""
    root = validate_kernel_root(path)
    if not sys.path or sys.path[0] != root:
        sys.path.insert(0, root)
    old = os.environ.get("PYTHONPATH")
    if not old or old.split(os.pathsep)[0] != root:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, old) if p)
    install_import_shim()
    return root
