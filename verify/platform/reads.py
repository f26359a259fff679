"""What a worker process read: every file it opened for reading (the interpreter's audit hook sees each `open`,
`import` included: a module's source or its .pyc) and the file of every module loaded in it (the ones the fork
server imported before the hook existed), so that a verdict is kept with every input its check could have
depended on (pathmdn_verify.run.verdicts).

Observed, not guessed: no call graph decides what counts.  A worker's checks share what it loaded before them, so a
check's reads are everything its worker read up to its end, a superset of what the check itself needed (a cached
verdict may miss more often than strictly needed, never replay after an input changed).  Not inputs: a file the
worker wrote (an output), the machine's pseudo-files (/proc, /sys, /dev), and the folders of caches whose entries
are named by the hash of what made them (Triton's kernel cache, torch inductor's compiled graphs, this toolkit's
verdict cache, the run folder, hypothesis' example database, which the searches never read).  A compiled module's .pyc stands for its source.
Not seen: a file whose existence alone is tested (os.stat), and what C code opens without Python's `open`.
"""
from __future__ import annotations

import getpass
import importlib.util
import os
import sys
import tempfile

from pathmdn_verify.platform import timing

_read: set[str] = set()          # absolute paths opened for reading, as opened
_written: set[str] = set()       # absolute paths opened for writing
_reported: set[str] = set()      # the normalized paths `take` has returned
_normal: dict[str, str] = {}     # path as opened -> its source file (resolved, .pyc -> .py)
_installed: list[bool] = []
_takes = [0]                     # how many times `take` returned
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
PSEUDO = ("/proc/", "/sys/", "/dev/")
# the variables naming folders whose files are not inputs (content-addressed caches, the run's scratch folder)
CACHE_FOLDERS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "VERIFY_CACHE_DIR", "VERIFY_RUN_DIR",
                 "HYPOTHESIS_STORAGE_DIRECTORY")


def _hook(event: str, args: tuple) -> None:
    if event != "open":
        return
    path, mode, flags = args
    if isinstance(path, int) or path is None:
        return
    path = os.path.abspath(os.fsdecode(path))
    write = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
    (_written if write else _read).add(path)


def install() -> None:
    """Start observing this process's reads (once; an audit hook cannot be removed: for worker processes)."""
    if not _installed:
        sys.addaudithook(_hook)
        _installed.append(True)


def installed() -> bool:
    return bool(_installed)


def _source(path: str) -> str:
    """The file a read stands for: resolved; a module's .pyc (in __pycache__, or in sys.pycache_prefix's folder:
    pathmdn_verify.platform.bytecode) is its .py where that exists."""
    if path not in _normal:
        p = os.path.realpath(path)
        if path.endswith(".pyc"):
            try:
                src = importlib.util.source_from_cache(path)
            except ValueError:          # not a name Python gives bytecode
                src = None
            p = os.path.realpath(src) if src and os.path.isfile(src) else p
        _normal[path] = p
    return _normal[path]


def not_inputs() -> tuple[str, ...]:
    """Folder prefixes whose files are never inputs: pseudo-files and the content-addressed caches (where their
    variables put them, else where Triton and torch's inductor keep them by default)."""
    folders = [os.environ.get(v) for v in CACHE_FOLDERS]
    folders.append(timing.default_cache_dir())
    try:
        folders.append(os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"))
    except (KeyError, OSError):       # no user name to be had: then only $TORCHINDUCTOR_CACHE_DIR
        pass
    return PSEUDO + tuple(os.path.realpath(f).rstrip("/") + "/" for f in folders if f)


def take() -> tuple[int, list[str]] | None:
    """(n, the files this process read since the previous take): n counts the takes from 1, so that a reader
    who missed one knows its list is incomplete; each file once over the process's life, sorted.  None where the
    reads are not observed (the hook is not installed: a check run in the caller's process)."""
    if not _installed:
        return None
    files = set(_read)
    files.update(f for m in list(sys.modules.values())        # a module object named by a bare file name
                 if isinstance(f := getattr(m, "__file__", None), str) and os.path.isabs(f))   # (torch.ops) is none
    skip = not_inputs()
    written = {_source(w) for w in _written}
    new = {s for f in files if (s := _source(f)) not in _reported}
    new = {f for f in new if f not in written and not f.startswith(skip) and not os.path.basename(f).startswith("<")}
    _reported.update(new)
    _takes[0] += 1
    return _takes[0], sorted(new)
