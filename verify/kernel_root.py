"""--kernel-root: verify a kernel package (fla) imported from a checkout instead of site-packages."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from verify.errors import UsageError


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
    workers inherit PYTHONPATH and, being spawned, this process's sys.path); returns its absolute path."""
    root = validate_kernel_root(path)
    sys.path.insert(0, root)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return root
