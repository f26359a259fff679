"""Versions and device facts recorded in every JSON result and shown in the console header: the toolkit,
the libraries, the device, and the kernel package actually loaded (which may be a --kernel-root checkout)."""
from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path

from pathmdn_verify.core.errors import UsageError

PACKAGES = {"numpy": "numpy", "torch": "torch", "triton": "triton", "sympy": "sympy",
            "mpmath": "mpmath", "hypothesis": "hypothesis"}
TOOLKIT = "pathmdn-verify"
KERNEL_PACKAGE = "fla"
# Third-party warnings that contradict what the toolkit does (shown with --debug): fla warns that it
# "rolls back to CPU" when no GPU is present, but the toolkit runs its Triton kernels in the interpreter.
CONTRADICTED_WARNINGS = ("Triton is not supported on current platform",)


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name, dist in PACKAGES.items():
        try:
            out[name] = md.version(dist)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(path: Path) -> str | None:
    """The commit of the git checkout that tracks `path`, or None (not a checkout, or git missing)."""
    try:
        tracked = subprocess.run(["git", "-C", str(path.parent), "ls-files", "--error-unmatch", path.name],
                                 capture_output=True, text=True, timeout=10)
        head = subprocess.run(["git", "-C", str(path.parent), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() if tracked.returncode == 0 and head.returncode == 0 else None


def git_is_ancestor(root: str | Path, commit: str, head: str) -> bool | None:
    """Whether `commit` is `head` or one of its ancestors in the git checkout at root; None when git cannot
    tell (the commit unknown there, a shallow clone, git missing)."""
    try:
        r = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", commit, head],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(r.returncode)


def git_dirty(path: Path) -> bool | None:
    """Whether the tracked files of the checkout that holds `path` differ from its commit (uncommitted
    changes: the commit alone does not name the code), or None (not a checkout, or git missing)."""
    try:
        status = subprocess.run(["git", "-C", str(path.parent), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(status.stdout.strip()) if status.returncode == 0 else None


def toolkit() -> dict:
    """This toolkit's name, version, git commit (None outside a checkout) and whether its tracked files differ
    from that commit (a copy of a working tree can keep an older commit's .git, and then names a commit the
    code that ran is not)."""
    try:
        version = md.version(TOOLKIT)
    except md.PackageNotFoundError:
        version = None
    here = Path(__file__).resolve()
    commit = git_commit(here)
    return {"name": TOOLKIT, "version": version, "git_commit": commit,
            "git_dirty": git_dirty(here) if commit else None}


def kernel_package(root: str | None = None) -> dict:
    """The kernel package that `import fla` would load in this process, or from the kernel root `root` (found, not
    imported): name, version (its fla/__init__.py's __version__), directory, the distribution that installed it
    (None for a checkout) and the checkout's git commit.  ImportError when there is none."""
    import importlib.machinery
    import importlib.util
    spec = (importlib.machinery.PathFinder.find_spec(KERNEL_PACKAGE, [root]) if root
            else importlib.util.find_spec(KERNEL_PACKAGE))
    if spec is None or spec.origin is None:
        raise ImportError(f"no module named {KERNEL_PACKAGE!r}")
    init = Path(spec.origin).resolve()
    return {**package_at(init), "name": KERNEL_PACKAGE, "distribution": _installed_by(init)}


def package_at(init: Path) -> dict:
    """{name, version, path, git_commit} of the package whose __init__.py is `init`: its folder's name as given, its
    __version__ as the file assigns it (read, never run), the folder resolved, and the commit when the file is
    tracked in a git checkout."""
    import re
    name, init = init.parent.name, init.resolve()
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", init.read_text(errors="replace"), re.M)
    return {"name": name, "version": found.group(1) if found else None, "path": str(init.parent),
            "git_commit": git_commit(init)}


def _installed_by(init: Path) -> str | None:
    """The distribution whose file list names `init` (fla/__init__.py, resolved), among those installed beside the
    package (an installer puts a package's metadata in the directory it installs the package into); None for a
    checkout.  A file list that does not contain the line is not parsed (importlib.metadata's
    packages_distributions() parses every installed one: seconds on a machine with CUDA's wheels)."""
    name = f"{KERNEL_PACKAGE}/__init__.py"
    for dist in md.distributions(path=[str(init.parent.parent)]):
        listed = [dist.read_text(f) or "" for f in ("RECORD", "installed-files.txt", "SOURCES.txt")]
        if any(name in text for text in listed) and any(
                f.as_posix().endswith(name) and Path(dist.locate_file(f)).resolve() == init for f in dist.files or ()):
            return dist.metadata["Name"]
    return None


def describe_kernel_package(pkg: dict | None) -> str:
    """One line for the console header."""
    if pkg is None:
        return f"{KERNEL_PACKAGE} not loaded"
    origin = pkg["distribution"] or (f"checkout {pkg['git_commit'][:12]}" if pkg["git_commit"] else "directory")
    return f"{pkg['name']} {pkg['version']} ({origin}, {pkg['path']})"


def resolve_device(requested: str | None) -> str:
    """cuda when available unless told otherwise; asking for cuda without a GPU is an error."""
    import torch
    has_cuda = torch.cuda.is_available()
    if requested is None:
        return "cuda" if has_cuda else "cpu"
    if requested == "cuda" and not has_cuda:
        raise UsageError("--device cuda requested but torch sees no CUDA GPU on this machine")
    return requested


def gpu_count() -> int:
    import torch
    return torch.cuda.device_count()


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries (the user's own list, if set)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    return given.split(",")[:gpu_count()] if given else [str(i) for i in range(gpu_count())]


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def describe(device: str) -> dict:
    import torch
    info = {"device": device, "platform": platform.platform(), "cpu_count": cpu_count()}
    if device == "cuda":
        info["device_name"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    else:
        info["device_name"] = platform.processor() or platform.machine()
    return info
