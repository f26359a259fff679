"""The verdict cache: a check's outcome reused while nothing it read changed.

An entry is found by a key over what is known before the check runs: the toolkit's own sources (all of them, but
the expected-failure list, which is applied to the outcome afterwards), the check's id, the run's options (every
field of the check's Context but where the kernel package lies and where failing examples go), the device class,
the library versions (Python, torch, triton, numpy, hypothesis, sympy, mpmath, transformers; CUDA's on a GPU), the
whole environment but the variables of NOT_KEYED (known not to change a result: the terminal, the shell, where
temporary files, caches and results go) and those the user declares in $VERIFY_CACHE_UNKEYED (a CI's per-run
identifiers), and every source of the named implementations and plug-ins (the --impl
files and their packages, the modules $VERIFY_EXTRA_CHECKS names, an entry point's package).

Under the key, an entry per set of inputs (the newest KEEP: a bisect's steps, an edit and its revert) holds the raw
outcome (before the expected-failure list) and the files its worker read up to the check's end, each with its
sha256 (pathmdn_verify.platform.reads: observed by the interpreter's audit hook, every module loaded included).
A file in the kernel root is named by its path there, so that another checkout or a bisect's worktree of the same
code reuses it.  A lookup hashes those files again and takes the newest entry whose files all match: any change,
or a file gone, is a miss.  The file lists are kept once each (`reads/`, by the hash of their contents), grouped
by folder, since the checks of a run share most of what they read.  A file changed after the run started may have
been read in either version: such a verdict is not kept.  Verdicts of every status are kept, but those of a dead
or timed-out worker (the machine's, not the code's).  An unreadable entry is ignored with a warning.  The folder
is safe to delete.

Triton's compiled kernels need no entry of their own: Triton names them by the hash of their source, its version,
its TRITON_* variables and the device, each of which is in the key or among the files read.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import re
import sys
import time
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import Context, Result
from pathmdn_verify.core.results import Outcome, finite
from pathmdn_verify.platform import environment, timing

FAMILIES = ("oracle", "symbolic", "kernel", "layer", "env")     # the checks whose verdicts are cached
NOT_KEPT = ("crashed", "timeout", "not_run", "cuda_fatal")       # kinds of the machine, not of the code
KEPT_SETS = 64      # sets of reads whose lists a run remembers (a few per worker: its reads only grow)
KEEP = 16           # entries per key (a check's verdicts on different code: a bisect's steps, a reverted edit)
ENV = "VERIFY_CACHE_DIR"
# The environment variables known not to change a verdict: the terminal and the shell session, who and where the
# user is, where temporary files, caches (content-addressed, bytecode) and results go, and what pytest sets per test.
NOT_KEYED = (ENV, "VERIFY_RUN_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "HYPOTHESIS_STORAGE_DIRECTORY",
             "VERIFY_BYTECODE_DIR", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "TMPDIR", "TEMP", "TMP",
             "TERM", "COLORTERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "PWD", "OLDPWD", "SHLVL", "_",
             "PS1", "PS2", "PROMPT_COMMAND", "LS_COLORS", "LESS", "PAGER", "EDITOR", "VISUAL", "DISPLAY", "HOSTNAME",
             "USER", "LOGNAME", "MAIL", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "TMUX",
             "TMUX_PANE", "XDG_RUNTIME_DIR", "XDG_SESSION_ID", "DBUS_SESSION_BUS_ADDRESS", "PYTEST_CURRENT_TEST",
             "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
# Variables the user declares unable to change a verdict (a CI system's per-run identifiers and file paths): names
# and NAME* prefixes, comma-separated.  It decides which variables are keyed, so it is not keyed itself.
UNKEYED_ENV = "VERIFY_CACHE_UNKEYED"
BASES = "bases"     # the run-wide parts of the keys of the runs that kept verdicts, one file each (differences())
KEEP_BASES = 16     # the newest kept
UNKEYED_FIELDS = ("kernel_root", "save_failing")    # where the kernel package lies (its files are read) and where
# failing examples are saved: the only fields of a Context that do not decide a verdict


def default_dir() -> Path:
    """$VERIFY_CACHE_DIR, else beside Triton's on-disk cache (timing.disk_cache_dir: $TRITON_CACHE_DIR, else
    $TRITON_HOME (or ~)/.triton/cache)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    return Path(timing.disk_cache_dir()).parent / "verify-verdicts"


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


def versions(device_class: str = "cpu") -> dict:
    import importlib.metadata as md
    out = environment.versions()
    try:
        out["transformers"] = md.version("transformers")
    except md.PackageNotFoundError:
        out["transformers"] = None
    if device_class.startswith("cuda"):
        import torch
        out["cuda"] = torch.version.cuda
    return out


def variables() -> dict[str, str]:
    """The environment that may change a verdict: every variable but NOT_KEYED and those $VERIFY_CACHE_UNKEYED
    declares."""
    names, prefixes = declared_unkeyed()
    return {k: v for k, v in sorted(os.environ.items())
            if k not in NOT_KEYED and k != UNKEYED_ENV and k not in names and not k.startswith(prefixes)}


def declared_unkeyed() -> tuple[set[str], tuple[str, ...]]:
    """$VERIFY_CACHE_UNKEYED as (exact names, prefixes); a UsageError for an entry that is neither a variable's
    name nor one followed by *."""
    entries = [e.strip() for e in os.environ.get(UNKEYED_ENV, "").split(",") if e.strip()]
    for entry in entries:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*?", entry):
            raise UsageError(f"{UNKEYED_ENV}: {entry!r} is not a variable's name or a prefix NAME* (comma-separated)")
    return {e for e in entries if not e.endswith("*")}, tuple(e[:-1] for e in entries if e.endswith("*"))


def named_sources(impls: tuple[str, ...] | None = None) -> dict[str, str]:
    """{file: sha256} of every source of the implementations and plug-ins a run names, read or not: the package
    (every .py file of its top folder) or lone file of the function of each implementation named in `impls` (None:
    each registered one), and of each module $VERIFY_EXTRA_CHECKS names.  Not those of other implementations this
    process registered (another run's in the same process: pv.check, the pytest plugin), whose checks a run of
    `impls` never selects."""
    import importlib.util
    from pathmdn_verify.ops.impls import BUILT_IN, registered
    from pathmdn_verify.run import EXTRA_CHECKS_ENV
    files: set[Path] = set()
    for impl in registered(impls):
        if impl.name != BUILT_IN and (own := _source_file(impl.fn)) is not None:
            files |= _sources(own.parent, own)
    for name in filter(None, os.environ.get(EXTRA_CHECKS_ENV, "").split(",")):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            origin = Path(spec.origin)
            files |= _sources(origin.parent, origin) if spec.submodule_search_locations else {origin}
    return {str(f): _sha(f.read_bytes()) for f in sorted(files)}


def _source_file(fn) -> Path | None:
    """The file defining fn (under decorators: functools.wraps' __wrapped__), None when it has none."""
    try:
        return Path(inspect.getsourcefile(inspect.unwrap(fn))).resolve()
    except (TypeError, OSError):
        return None


def _sources(folder: Path, own: Path) -> set[Path]:
    """Every .py file of the top package holding `own` (folders with __init__.py), else the lone file."""
    if not (folder / "__init__.py").is_file():
        return {own.resolve()}
    while (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return {f.resolve() for f in folder.rglob("*.py") if "__pycache__" not in f.parts}


def where(path: str, root: Path | None) -> str:
    """A file's name in an entry: its path in the kernel root (the folder holding fla/), else absolute."""
    p = Path(path)
    if root is not None and p.is_relative_to(root):
        return p.relative_to(root).as_posix()
    return str(p)


def _group(name: str) -> str:
    """The list a read file is kept in: its top folder in the kernel root, an installed distribution's top folder,
    else the file's folder."""
    parts = Path(name).parts
    if not os.path.isabs(name):
        return parts[0]
    for marker in ("site-packages", "dist-packages"):
        if marker in parts[:-1]:
            i = parts.index(marker)
            return str(Path(*parts[:i + 2]))
    return str(Path(name).parent)


class ReadLists:
    """The kept lists of files read, {name: sha256} (None: no such file), each once under `folder`, named by the
    hash of its contents; and the digests of files here, once per run."""

    def __init__(self, folder: Path, started: float):
        self.folder = Path(folder)
        self.started = started          # a file changed since then may have been read in either version
        self.digests: dict[Path, str | None] = {}
        self.changed: set[Path] = set()               # files modified since the run started
        self.verified: dict[str, bool] = {}           # a list's id -> whether its files all match here
        self.named: dict[str, dict] = {}               # kernel root -> {read path: ReadLists._named's tuple}
        self.kept: dict[tuple, dict | None] = {}       # (kernel root, reads) -> keep's answer, the newest KEPT_SETS

    def digest(self, f: Path) -> str | None:
        if f not in self.digests:
            try:
                if f.stat().st_mtime >= self.started:
                    self.changed.add(f)
                self.digests[f] = _sha(f.read_bytes())
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                self.digests[f] = None
        return self.digests[f]

    def _path(self, list_id: str) -> Path:
        return self.folder / list_id[:2] / f"{list_id}.json"

    def files(self, list_id: str) -> dict[str, str | None]:
        return json.loads(self._path(list_id).read_text())

    def _named(self, reads, root: Path | None) -> list[tuple[str, str, str | None, bool]]:
        """Each read file's name in an entry, the list it is kept in, its sha256 and whether it changed during the
        run, sorted by name: each file once per run (every check of a worker reports the worker's reads so far,
        thousands of files)."""
        memo = self.named.setdefault(str(root), {})
        for f in reads:
            if f not in memo:
                name, path = where(f, root), Path(f)
                sha = self.digest(path)
                memo[f] = (name, _group(name), sha, path in self.changed)
        return sorted(memo[f] for f in reads)

    def keep(self, reads, root: Path | None) -> dict[str, str] | None:
        """Keep the lists of the files `reads` (absolute paths), grouped by folder: {group: list id}; None when a
        file changed during the run.  Once per set of reads (a worker's next check mostly read nothing new)."""
        memo = (str(root), frozenset(reads))
        if memo not in self.kept:
            self.kept[memo] = self._keep(reads, root)
            while len(self.kept) > KEPT_SETS:
                del self.kept[next(iter(self.kept))]
        return self.kept[memo]

    def _keep(self, reads, root: Path | None) -> dict[str, str] | None:
        named = self._named(reads, root)
        if any(changed for *_, changed in named):
            return None
        lists: dict[str, dict] = {}
        for name, group, sha, _ in named:
            lists.setdefault(group, {})[name] = sha
        out = {}
        for group, files in sorted(lists.items()):
            text = json.dumps(files, sort_keys=True)
            out[group] = _sha(text.encode())
            if not self._path(out[group]).exists():
                write_atomic(self._path(out[group]), text)
        return out

    def match(self, ids: dict[str, str], root: Path | None) -> bool:
        """Whether every file of the kept lists has its kept contents here (a file of the kernel root looked up
        in `root`)."""
        for list_id in ids.values():
            if list_id not in self.verified:
                self.verified[list_id] = all(
                    self.digest(root / name if root is not None and not os.path.isabs(name) else Path(name)) == sha
                    for name, sha in self.files(list_id).items())
            if not self.verified[list_id]:
                return False
        return True


class VerdictCache:
    def __init__(self, folder: Path, device_class: str, impls: tuple[str, ...] | None = None):
        """impls: the implementations the run names (named_sources), None for every one registered here."""
        self.folder = Path(folder)
        self.base = {"toolkit": toolkit_hash(), "environment": versions(device_class), "device": device_class,
                     "variables": variables(), "sources": named_sources(impls)}
        self.reads = ReadLists(self.folder / "reads", time.time())
        self.warned = False
        self.base_kept = False

    def _fingerprint(self) -> dict:
        """The key's run-wide part as kept beside the verdicts (BASES): each variable's value by its hash only
        (an environment may hold secrets)."""
        return {**self.base, "variables": {k: _sha(v.encode())[:16] for k, v in self.base["variables"].items()}}

    def differences(self) -> list[str] | None:
        """What of the key's run-wide part differs from that of the last run that kept verdicts in this folder (a
        phrase each: the toolkit's code, a version, the device class, a variable set, unset or changed, a named
        source); [] when an earlier run that kept verdicts had this part of the key; None when no run kept any or a
        record is unreadable."""
        now, kept = self._fingerprint(), sorted((self.folder / BASES).glob("*.json"), key=lambda p: p.stat().st_mtime)
        try:
            earlier = [json.loads(p.read_text()) for p in kept]
        except (OSError, ValueError):
            return None
        if not earlier:
            return None
        if now in earlier:
            return []
        last = earlier[-1]
        said = []
        for part, phrase in (("toolkit", "the toolkit's code"), ("device", "the device class")):
            if last.get(part) != now[part]:
                said.append(f"{phrase} changed")
        for part, phrase in (("environment", "version of"), ("variables", "variable"), ("sources", "source")):
            old, new = last.get(part) or {}, now[part]
            for name in sorted(set(old) | set(new)):
                if old.get(name) != new.get(name):
                    change = ("set" if name not in old else "changed" if name in new else
                              "now declared unkeyed" if name in os.environ else "unset")
                    said.append(f"{phrase} {name} {change}" if part == "variables" else f"{phrase} {name} changed")
        return said

    def key(self, check_id: str, ctx: Context, extra: dict | None = None) -> str:
        """extra: whatever else decides the verdict (a bisect step's replayed cases)."""
        params = {k: v for k, v in dataclasses.asdict(ctx).items() if k not in UNKEYED_FIELDS}
        return _sha(json.dumps({**self.base, "check": check_id, "params": {**params, **(extra or {})}},
                               sort_keys=True).encode())

    def _entries(self, key: str) -> Path:
        """The folder of key's entries: one per set of inputs (a file named by the hash of their lists)."""
        return self.folder / key[:2] / key

    def get(self, check_id: str, ctx: Context, root: Path | None, extra: dict | None = None) -> Outcome | None:
        """The outcome kept for this check whose every input is unchanged (the newest such); None otherwise."""
        key = self.key(check_id, ctx, extra)
        folder = self._entries(key)
        paths = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() \
            else []
        for path in paths:
            try:
                entry = json.loads(path.read_text())
                if not self.reads.match(entry["reads"], root):
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

    def put(self, outcome: Outcome, ctx: Context, run: str, reads, root: Path | None,
            extra: dict | None = None) -> bool:
        """Keep a raw outcome (before the expected-failure list) with the files its process read (`reads`, absolute
        paths; None: not observed, nothing kept).  Whether it was kept."""
        r = outcome.result
        if reads is None or r.kind in NOT_KEPT or "cached" in r.details or not cacheable(outcome.id):
            return False
        ids = self.reads.keep(reads, root)
        if ids is None:
            return False
        folder = self._entries(self.key(outcome.id, ctx, extra))
        path = folder / f"{_sha(json.dumps(ids, sort_keys=True).encode())[:32]}.json"
        entry = finite({"run": run, "check": outcome.id, "reads": ids,
                        "outcome": {"status": r.status, "kind": r.kind, "measure": r.measure, "measured": r.measured,
                                    "budget": r.budget, "message": r.message, "details": r.details,
                                    "description": outcome.description, "repro": outcome.repro,
                                    "seconds": round(outcome.seconds, 3)}})
        write_atomic(path, json.dumps(entry))
        if not self.base_kept:          # the key's run-wide part, for a later run's differences()
            text = json.dumps(self._fingerprint(), sort_keys=True)
            write_atomic(self.folder / BASES / f"{_sha(text.encode())[:32]}.json", text)
            _keep_newest(self.folder / BASES, KEEP_BASES)
            self.base_kept = True
        _keep_newest(folder, KEEP)
        return True


def _keep_newest(folder: Path, n: int) -> None:
    """Delete all but the n newest (by mtime) JSON files of folder."""
    for old in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-n]:
        old.unlink(missing_ok=True)


def kept_entry(folder: Path, check_id: str) -> dict | None:
    """The newest entry kept for check_id (under any key), None when there is none."""
    entries = [e for e in Path(folder).glob("??/*/*.json") if json.loads(e.read_text()).get("check") == check_id]
    return json.loads(max(entries, key=lambda e: e.stat().st_mtime).read_text()) if entries else None


def kept_reads(folder: Path, check_id: str) -> set[str]:
    """The files the newest verdict kept for check_id was read with, by their names in the entry."""
    entry = kept_entry(folder, check_id)
    lists = ReadLists(Path(folder) / "reads", 0.0)
    return {name for i in (entry or {"reads": {}})["reads"].values() for name in lists.files(i)}


def write_atomic(path: Path, text: str) -> None:
    """Through a temporary file, so that a reader never sees a partial file (its folder made if need be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
