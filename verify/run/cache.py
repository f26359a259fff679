"""The verdict cache: a check's outcome reused while nothing it depends on changed.

An entry is found by a key over what is known before the check runs: the toolkit's own sources (all of them, but
the expected-failure list, which is applied to the outcome afterwards), the check's id, the run's parameters (seed,
profile, examples, configs, fp32 dot, where the references run, the device class), the environment (Python,
torch, triton, numpy, hypothesis, sympy, mpmath, transformers) and every $VERIFY_* variable but the cache's and
the run folder's (they switch emulations off, add plug-in checks and implementations), and the sources of the
plug-in modules $VERIFY_EXTRA_CHECKS names.  A key keeps one entry per
set of dependency contents (the newest KEEP: a bisect's steps, an edit and its revert): the raw outcome (before
the expected-failure list) and the files the check depended on, each with its sha256: the kernel package's files
its kernel's call graph reaches (pathmdn_verify.platform.depends; by their path in the package, so that another
checkout or a bisect's worktree of the same code reuses them), or all of the package for the interpreter
canaries.  A lookup hashes those files again where the run imports the kernel package from and takes the newest
entry whose files all match: any change, or a file gone, is a miss.  Verdicts of every status are kept, but those
of a dead or timed-out worker (the machine's, not the code's).
An unreadable entry is ignored with a warning.  The folder is safe to delete.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import Context, Result
from pathmdn_verify.core.results import Outcome, finite
from pathmdn_verify.platform import environment

FAMILIES = ("oracle", "symbolic", "kernel", "layer", "env")     # the checks whose verdicts are cached
NOT_KEPT = ("crashed", "timeout", "not_run", "cuda_fatal")       # kinds of the machine, not of the code
KEEP = 16           # entries per key (a check's verdicts on different code: a bisect's steps, a reverted edit)
ENV = "VERIFY_CACHE_DIR"
NOT_KEYED = (ENV, "VERIFY_RUN_DIR")       # where results go, not what they are


def default_dir() -> Path:
    """$VERIFY_CACHE_DIR, else beside Triton's on-disk cache ($TRITON_CACHE_DIR, else ~/.triton/cache)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    triton = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    return triton.parent / "verify-verdicts"


def cacheable(check_id: str) -> bool:
    return CheckId.parse(check_id).family in FAMILIES


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def toolkit_folders() -> list[Path]:
    """The folders of the toolkit's sources: the package (this file's grandparent) and its kernels and
    references (folders of their own in a checkout)."""
    import pathmdn_verify.kernels
    import pathmdn_verify.references
    package = Path(__file__).resolve().parent.parent
    return sorted({package, *(Path(m.__file__).resolve().parent for m in (pathmdn_verify.kernels,
                                                                          pathmdn_verify.references))})


def toolkit_hash(folders: list[Path] | None = None) -> str:
    """sha256 over the path (in its folder) and bytes of every source and data file of the toolkit, but the
    expected-failure list."""
    h = hashlib.sha256()
    for folder in folders or toolkit_folders():
        h.update(folder.name.encode() + b"\0")
        for f in sorted(f for f in folder.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                        and f.suffix in (".py", ".json", ".toml") and f.name != "expected_failures.toml"):
            h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def versions() -> dict:
    import importlib.metadata as md
    out = environment.versions()
    try:
        out["transformers"] = md.version("transformers")
    except md.PackageNotFoundError:
        out["transformers"] = None
    return out


def switches() -> dict[str, str]:
    """The $VERIFY_* variables that may change a verdict (all of them but NOT_KEYED)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("VERIFY_") and k not in NOT_KEYED}


def plug_in_sources() -> dict[str, str]:
    """{file: sha256} of the modules $VERIFY_EXTRA_CHECKS names (a plug-in op's code, which no call graph of the
    kernel package reaches): a package's every .py file, a module's own file."""
    import importlib.util
    from pathmdn_verify.run import EXTRA_CHECKS_ENV
    out = {}
    for name in filter(None, os.environ.get(EXTRA_CHECKS_ENV, "").split(",")):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        files = sorted(origin.parent.rglob("*.py")) if spec.submodule_search_locations else [origin]
        out.update({str(f): _sha(f.read_bytes()) for f in files if "__pycache__" not in f.parts})
    return out


def where(path: str, root: Path | None) -> str:
    """A dependency's name in an entry: its path in the kernel root (the folder holding fla/), else absolute."""
    p = Path(path).resolve()
    if root is not None and p.is_relative_to(root):
        return p.relative_to(root).as_posix()
    return str(p)


def dependencies(files, root: Path | None) -> dict[str, str]:
    """{name: sha256} of the files a check depended on."""
    return {where(f, root): _sha(Path(f).read_bytes()) for f in sorted(files)}


class VerdictCache:
    def __init__(self, folder: Path, device_class: str):
        self.folder = Path(folder)
        self.base = {"toolkit": toolkit_hash(), "environment": versions(), "device": device_class,
                     "variables": switches(), "plug_ins": plug_in_sources()}
        self.warned = False
        self.digests: dict[Path, str | None] = {}     # a file's sha256 in this run (files do not change during it)

    def _digest(self, f: Path) -> str | None:
        if f not in self.digests:
            self.digests[f] = _sha(f.read_bytes()) if f.is_file() else None
        return self.digests[f]

    def key(self, check_id: str, ctx: Context, extra: dict | None = None) -> str:
        """extra: whatever else decides the verdict (a bisect step's replayed cases)."""
        params = {"seed": ctx.seed, "profile": ctx.profile, "examples": ctx.examples, "configs": ctx.configs,
                  "fp32_dot": ctx.fp32_dot, "references": ctx.references, **(extra or {})}
        return _sha(json.dumps({**self.base, "check": check_id, "params": params}, sort_keys=True).encode())

    def _entries(self, key: str) -> Path:
        """The folder of key's entries: one per set of dependency contents (a file named by their hash)."""
        return self.folder / key[:2] / key

    def get(self, check_id: str, ctx: Context, root: Path | None, extra: dict | None = None) -> Outcome | None:
        """The outcome kept for this check whose every dependency is unchanged (the newest such); None otherwise."""
        key = self.key(check_id, ctx, extra)
        folder = self._entries(key)
        paths = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() \
            else []
        for path in paths:
            try:
                entry = json.loads(path.read_text())
                if any(self._digest((root / name) if root is not None and not os.path.isabs(name) else Path(name))
                       != sha for name, sha in entry["depends"].items()):
                    continue
                o = entry["outcome"]
                result = Result(o["status"], o["measured"], o["budget"], o["message"], o["details"], o["kind"],
                                o["measure"])
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                if not self.warned:
                    print(f"verify: warning: ignoring an unreadable verdict-cache entry {path} ({type(exc).__name__}: "
                          f"{exc})".splitlines()[0], file=sys.stderr)
                    self.warned = True
                continue
            result.details["cached"] = {"key": key[:16], "run": entry["run"], "seconds": o["seconds"]}
            return Outcome(check_id, o["description"], result, 0.0, o["repro"], time.time(), ctx.seed)
        return None

    def put(self, outcome: Outcome, ctx: Context, run: str, extra: dict | None = None) -> None:
        """Keep a raw outcome (before the expected-failure list) with the files its check depended on
        (outcome.depends, from the worker)."""
        r = outcome.result
        depends = outcome.depends
        if depends is None or r.kind in NOT_KEPT or "cached" in r.details:
            return
        key = self.key(outcome.id, ctx, extra)
        folder = self._entries(key)
        path = folder / f"{_sha(json.dumps(depends, sort_keys=True).encode())[:32]}.json"
        entry = finite({"run": run, "depends": depends,
                        "outcome": {"status": r.status, "kind": r.kind, "measure": r.measure, "measured": r.measured,
                                    "budget": r.budget, "message": r.message, "details": r.details,
                                    "description": outcome.description, "repro": outcome.repro,
                                    "seconds": round(outcome.seconds, 3)}})
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry))
        tmp.replace(path)
        for old in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
            old.unlink(missing_ok=True)

