"""Checks planted by the runner and CLI tests: a worker that aborts, hangs or hits a (fake) fatal CUDA error,
plain pass / fail / error / non-finite results.  Tests select this module with $VERIFY_EXTRA_CHECKS (fixture
`planted` in conftest.py) so that the check workers import it too; importing it registers the checks.

Nothing here depends on timing: test.planted.hang writes the marker file named by $VERIFY_TEST_MARKER (if set)
once it runs and then never returns, so that a test signals a run only while the check is really running; the
two GPU checks meet in the folder named by $VERIFY_TEST_RENDEZVOUS, so that one worker cannot take both."""
import math
import os
import signal
import time
from pathlib import Path

from helpers import MARKER_ENV, RENDEZVOUS_ENV, block_forever, write_marker
from hypothesis import given, settings
from hypothesis import strategies as st

from pathmdn_verify.core.registry import Result, register

_POISONED = []      # set in a worker by the fatal CUDA error; a check run later in that worker sees it


def _fatal(ctx):
    _POISONED.append(True)
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def _after_fatal(ctx):
    if _POISONED:
        return Result("fail", message="ran in the worker whose CUDA context a fatal error poisoned")
    return Result("pass", 0.0, 1.0, "ran in a fresh worker", measure="threshold")


def _hang(ctx):
    """Say that it runs (the marker), then block until the worker is killed (a timeout, an interrupt)."""
    if os.environ.get(MARKER_ENV):
        write_marker(os.environ[MARKER_ENV])
    block_forever()


def _gpu(name):
    """Check on which GPU its worker runs; it returns only once its twin has started as well (each in a worker
    of its own: while one waits for the other, its worker cannot take the other one)."""
    def check(ctx):
        folder = Path(os.environ[RENDEZVOUS_ENV])
        (folder / name).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
        deadline = time.monotonic() + 300
        while len(list(folder.iterdir())) < 2:
            if time.monotonic() > deadline:
                return Result("fail", message=f"gpu.{name}: its twin never started in another worker")
            time.sleep(0.01)
        return Result("pass", 0.0, 1.0, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    return check


def _fork_server() -> int | None:
    """The fork server this worker was forked from (its parent), None for a worker spawned otherwise."""
    parent = os.getppid()
    try:
        command = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return None
    return parent if b"multiprocessing.forkserver" in command else None


def _kills_server(sig):
    """Send the fork server `sig` (SIGKILL: it is dead; SIGSTOP: it never answers again), say so (the marker), then
    die hard: the worker's replacement must come from a fork server that works, or another way."""
    def check(ctx):
        server = _fork_server()
        if server is not None:
            os.kill(server, sig)
        if os.environ.get(MARKER_ENV):
            write_marker(os.environ[MARKER_ENV])
        os._exit(1)
    return check


def _hypothesis(ctx):
    """A hypothesis search that writes hypothesis' storage directory (text strategies cache unicode data there;
    by default that is .hypothesis/ in the current directory)."""
    seen = []

    @settings(max_examples=5, database=None)
    @given(st.text(max_size=3))
    def prop(x):
        seen.append(x)
    prop()
    return Result("pass", 0.0, 1.0, f"{len(seen)} examples", measure="threshold")


register("test.planted.pass", "always passes", lambda ctx: Result("pass", 0.5, 1.0, "ok", measure="max_abs"))
register("test.planted.fail", "always fails", lambda ctx: Result("fail", 2.0, 1.0, "planted failure",
                                                                 measure="normwise_relative"))
register("test.planted.error", "always raises", lambda ctx: 1 / 0)
register("test.planted.xfail", "fails; the tests list it as an expected failure",
         lambda ctx: Result("fail", 2.0, 1.0, "planted"))
register("test.planted.nonfinite", "fails with a non-finite error",
         lambda ctx: Result("fail", math.inf, 1.0, "output is inf", details={"worst_ratio": math.nan}))
register("test.planted.abort", "the worker process aborts (a segfaulting kernel)", lambda ctx: os.abort())
register("test.planted.exit", "the worker process exits at once (os._exit)", lambda ctx: os._exit(3))
register("test.planted.sigkill", "the worker process is killed (SIGKILL)", lambda ctx: os.kill(os.getpid(), signal.SIGKILL))
register("test.planted.kill_server", "kills the fork server, then its worker exits", _kills_server(signal.SIGKILL))
register("test.planted.stop_server", "stops the fork server (SIGSTOP: it never answers), then its worker exits",
         _kills_server(signal.SIGSTOP))
register("test.planted.cuda_fatal", "raises a fatal CUDA error (illegal memory access)", _fatal)
register("test.planted.after_fatal", "passes unless run in a worker poisoned by the fatal error", _after_fatal)
register("test.planted.hang", "writes its marker, then never returns", _hang)
register("test.planted.hypothesis", "runs a hypothesis search", _hypothesis)
register("test.planted.odd_seeds", "fails on odd seeds",
         lambda ctx: Result("fail" if ctx.seed % 2 else "pass", float(ctx.seed), 1.0))
for _n in ("a", "b"):
    register(f"test.planted.gpu.{_n}", "says which GPUs its worker sees (waits for its twin: one each)", _gpu(_n))

