"""Helpers shared by the test files: run the verify command in a subprocess, read what it wrote, and wait for
a planted check or step to reach the point where it blocks (never a fixed sleep that is hoped to be long
enough: a test that signals a run waits for a marker file that the blocked code writes)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# The marker file that blocked test code writes (its pid) once it runs, just before it blocks: test.planted.hang
# (planted_checks.py), and the fla of test_bisect.py's block commit when a bisect step imports it.
MARKER_ENV = "VERIFY_TEST_MARKER"
# A folder where test.planted.gpu.a / .b meet (planted_checks.py): each waits there until both have started.
RENDEZVOUS_ENV = "VERIFY_TEST_RENDEZVOUS"
# How long a test waits for something that must happen (a marker, an exit) before it fails: a bound for a
# broken run, never a delay that a passing run depends on.
PATIENCE = 300.0


def verify_command(*args) -> list[str]:
    return [sys.executable, "-m", "pathmdn_verify", *map(str, args)]


def json_arg(args, cwd=None) -> Path | None:
    """The file named by --json in args (relative to cwd), if any."""
    args = [str(a) for a in args]
    for i, a in enumerate(args):
        if a == "--json" and i + 1 < len(args):
            path = Path(args[i + 1])
        elif a.startswith("--json="):
            path = Path(a.split("=", 1)[1])
        else:
            continue
        return path if path.is_absolute() or cwd is None else Path(cwd) / path
    return None


# Commands that import the kernel package (or a tree's) into the process that runs them, or change its import
# path: an in-process run would leave that in the pytest process for every later test, so they get their own.
# With --kernel-root, `verify compare` and a run of no workers put the tree on this process's import path; the
# other commands leave it to their workers.  _in_process fails a call that does either all the same (an --impl
# file's folder may join the path: the implementation registers here).
OWN_PROCESS = ("coverage", "bisect", "report", "--version")
TREE_HERE = ("compare",)


def own_process(words: list[str]) -> bool:
    """Whether `verify *words` must run in a process of its own (OWN_PROCESS, TREE_HERE)."""
    if any(w in OWN_PROCESS for w in words):
        return True
    no_workers = ["--workers", "0"] in (words[i:i + 2] for i in range(len(words))) or "--workers=0" in words
    return "--kernel-root" in words and (bool(words) and words[0] in TREE_HERE or no_workers)


def run_cli(*args, cwd=None, env=None, timeout=None):
    """`verify *args`: (a CompletedProcess with its exit status and output, the JSON document it wrote to its
    --json file, or None when args name none or the file was not written).

    In this process (cli.main with this process's stdout, stderr, cwd and environment swapped for the call's),
    so that the call costs no interpreter start, and its workers fork from this process's fork server, started
    once; in a `python -m pathmdn_verify` subprocess with a timeout, or for the commands of OWN_PROCESS (a test of the
    process itself calls verify_command).  Checks always run in worker processes either way."""
    words = [str(a) for a in args]
    path = json_arg(words, cwd)
    if timeout is not None or own_process(words):
        proc = subprocess.run(verify_command(*words), capture_output=True, text=True, cwd=cwd, env=env,
                              timeout=timeout, check=False)
    else:
        proc = _in_process(words, cwd, env)
    return proc, (load(path) if path is not None and path.exists() else None)


def _in_process(words: list[str], cwd, env) -> subprocess.CompletedProcess:
    import contextlib
    import io
    import multiprocessing.util
    import tempfile

    from pathmdn_verify import cli
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_argv, saved_cwd, saved_tmp = dict(os.environ), sys.argv[:], os.getcwd(), tempfile.tempdir
    saved_path, kernels = sys.path[:], _kernel_modules()
    multiprocessing.util.get_temp_dir()      # this process's own (the fork server's socket), before TMPDIR is the call's
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        tempfile.tempdir = None        # the call's TMPDIR, as a process of its own would read it
        sys.argv[:] = ["verify", *words]
        os.chdir(cwd or saved_cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(words)
            except SystemExit as exc:      # argparse: usage errors and --help
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        os.chdir(saved_cwd)
        tempfile.tempdir = saved_tmp
        sys.argv[:] = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
    trees = [p for p in sys.path if p not in saved_path and (Path(p or ".") / "fla" / "__init__.py").is_file()]
    assert not trees and _kernel_modules() == kernels, \
        f"verify {' '.join(words)} put a kernel tree on this process's import path or imported a kernel package: " \
        "see OWN_PROCESS"
    return subprocess.CompletedProcess(["verify", *words], code, out.getvalue(), err.getvalue())


def _kernel_modules() -> set[str]:
    return {m for m in sys.modules if m.split(".")[0] in ("fla", "triton")}


def load(path) -> dict:
    """A result document, strictly (NaN and Infinity refused, as pathmdn_verify.core.results.parse does)."""
    from pathmdn_verify.core import results
    return results.parse(Path(path).read_text())


def ids(doc: dict) -> list[str]:
    """The check ids of a result document, in its order."""
    return [c["id"] for c in doc["checks"]]


def statuses(doc: dict) -> dict[str, str]:
    """check id -> status."""
    return {c["id"]: c["status"] for c in doc["checks"]}


def by_id(doc: dict) -> dict[str, dict]:
    """check id -> its record."""
    return {c["id"]: c for c in doc["checks"]}


def id_args(*names: str, prefix: str = "test.planted.") -> list[str]:
    """--id options selecting checks by name: id_args("pass", "hang") selects test.planted.pass and .hang."""
    return [a for n in names for a in ("--id", prefix + n)]


def wait_for(condition, what: str, proc: subprocess.Popen | None = None, patience: float = PATIENCE,
             poll: float = 0.02) -> None:
    """Poll until condition() is true.  Fails (with what the process printed, when it is ours and it ended)
    if proc ends first or after `patience` seconds: those are failures of the run, never a timing the test
    depends on."""
    deadline = time.monotonic() + patience
    while not condition():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the process ended (exit {proc.returncode}) before {what}:\n{out or ''}{err or ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {patience:g} s")
        time.sleep(poll)


def wait_for_marker(marker: Path, proc: subprocess.Popen | None = None, patience: float = PATIENCE) -> int:
    """Wait until the blocked code wrote its marker file (atomically: its pid); that pid."""
    wait_for(marker.exists, f"{marker.name} was written", proc, patience)
    return int(marker.read_text())


def ignores(pid: int, sig: int) -> bool:
    """Whether process pid ignores signal sig now (its SigIgn mask in /proc; Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"/proc/{pid}/status has no SigIgn line")


def gone(pid: int) -> bool:
    """Whether process pid has ended (no such process, or a zombie not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def write_marker(path: str) -> None:
    """Write this process's pid to path atomically (a reader never sees an empty marker)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    Path(tmp).write_text(str(os.getpid()))
    os.replace(tmp, path)


def block_forever() -> None:
    """Sleep in a loop, never returning: the caller ends only when it is killed."""
    while True:
        time.sleep(60)


__all__ = [
    "MARKER_ENV",
    "PATIENCE",
    "RENDEZVOUS_ENV",
    "block_forever",
    "by_id",
    "gone",
    "id_args",
    "ids",
    "ignores",
    "load",
    "run_cli",
    "statuses",
    "verify_command",
    "wait_for",
    "wait_for_marker",
    "write_marker",
]
