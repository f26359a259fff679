"""Execution: every check runs in a worker process, never in the process that reports (and so does any other
task given to Workers.map, e.g. the report's points).

Each worker slot is a one-process `concurrent.futures.ProcessPoolExecutor`, so a worker that
dies (segfault, abort, killed for memory), exceeds the per-check timeout, or leaves a poisoned CUDA context
(a fatal CUDA error) takes only its own check with it: that check is recorded as a failure of kind
`crashed`, `timeout` or `cuda_fatal`, the slot gets a fresh worker, and the run goes on.  Results come back in
the order of the selection whatever the number of workers.  The expected-failure list is applied here, in the
reporting process, by :func:`apply_xfails` (the one place that calls pathmdn_verify.run.xfail_list).
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import math
import multiprocessing
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from unittest import mock

from pathmdn_verify.platform import bytecode, configs, environment, reads, timing
from pathmdn_verify.core.errors import (
    Incompatible,
    UsageError,
    innermost_error,
    is_device_fatal,
    is_interpreter_gap,
    triton_incompatibility,
)
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import (
    DEVICE_LOST,
    REGISTRY,
    RUN_DIR_ENV,
    Check,
    Context,
    Result,
)
from pathmdn_verify.core.results import Outcome
from pathmdn_verify.ops.impls import BUILT_IN, registered
from pathmdn_verify.run import verdicts, load_checks
from pathmdn_verify.run import xfail_list

# --check-timeout default per profile (seconds): above the slowest check of the profile on a 2-core CPU
# (a mutant check, which runs its killers in workers of its own, takes up to a minute), below a CI job's patience.
CHECK_TIMEOUT = {"quick": 300.0, "ci": 600.0, "full": 1800.0}
START_TIMEOUT = 300.0     # a worker's start (the kernel package's import, a GPU's first use) takes seconds
SPAWN_TIMEOUT = 30.0      # the fork server's answer to a new worker takes milliseconds
MAX_STARTS = 3            # workers of a slot that die or hang while starting, in a row, before it retires
CLOSE_SECONDS = 2.0       # how long idle workers get to exit before they are killed
REAP_SECONDS = 10.0       # how long a dead worker's pool may take to read its exit status
TIME_LIMIT = "not run: --time-limit reached"
INTERRUPTED = "not run: the run was interrupted"
EXITFIRST = "not run: --exitfirst stopped the run at the first failure"


OUTPUT_GONE = 141         # the exit status when the reader of the output went away (a shell's for SIGPIPE)


class Interrupted(BaseException):
    """SIGINT or SIGTERM, or the reader of the output gone: stop the workers, report what finished, exit with
    `code` (130, 143 or 141)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


_pending_interrupt: list[int] = []    # the exit code of the signal that stops this run, once one came


def _interrupt(signum, frame):
    """The first SIGINT / SIGTERM stops the run; later ones are ignored until the results are written (GNU
    timeout signals the command and then its process group: two TERMs at once, and the second, arriving after
    the first's handler, used to kill the run before it wrote its JSON)."""
    if _pending_interrupt:     # a second signal that arrived before the first handler ignored them: stopping
        return
    stop(128 + signum)


def stop(code: int) -> None:
    """Stop the run as a signal does: raise Interrupted(code), and ignore SIGINT and SIGTERM until the results are
    written (within stopped_by_signals)."""
    _pending_interrupt.append(code)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(code)


@contextlib.contextmanager
def stopped_by_signals():
    """Within: SIGINT and SIGTERM raise Interrupted (once); the caller's handlers come back after."""
    _pending_interrupt.clear()
    handlers = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


class _Stalled(Exception):
    """A step that must take a moment took longer than its deadline."""


@contextlib.contextmanager
def _deadline(seconds: float):
    """Raise _Stalled in this thread once `seconds` pass (SIGALRM; nothing where that cannot be had: a thread
    other than the main one, or a timer already set)."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0]:
        yield
        return

    def stalled(signum, frame):
        raise _Stalled(f"no answer within {seconds:g} s")
    previous = signal.signal(signal.SIGALRM, stalled)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _fork_server_pid() -> int | None:
    from multiprocessing import forkserver
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def _kill_fork_server() -> None:
    """Kill this process's fork server (multiprocessing starts another on its next use)."""
    if pid := _fork_server_pid():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _stop_fork_server() -> None:
    """Kill this process's fork server and forget it, so that the next use starts another at once."""
    from multiprocessing import forkserver
    _kill_fork_server()
    forkserver._forkserver._stop()


def _kill_worker(process) -> None:
    """Kill a worker process.  One forked by a fork server that has since died reads as ended (multiprocessing's
    poll gets EOF from the dead server and says 255) while it runs on, holding its own task queue's both ends (it
    would never see EOF) and the run's stdout: it is killed by pid while /proc says it is still a multiprocessing
    child (not a pid reused since)."""
    if process is None:
        return
    if process.is_alive():
        process.kill()
        return
    popen = getattr(process, "_popen", None)
    if popen is None or getattr(popen, "returncode", None) != 255 or not hasattr(popen, "sentinel"):
        return
    try:
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
    except OSError:
        return                                  # gone (or no /proc: nothing to be sure of)
    if b"multiprocessing" in cmdline:
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGKILL)


def _reaped(threads: list[threading.Thread], until: float) -> bool:
    """Whether the executors' manager threads ended (their workers' ends reported) by `until`: the interpreter
    joins them as it exits."""
    for t in threads:
        t.join(max(0.0, until - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def _shutdown(executor: cf.ProcessPoolExecutor | None, cancel: bool = False) -> None:
    """Shut an executor down without waiting; what a broken one raises on the way is of no use any more."""
    if executor is not None:
        with contextlib.suppress(Exception):
            executor.shutdown(wait=False, cancel_futures=cancel)


def repro_command(check_id: str, ctx: Context) -> str:
    parts = ["verify", "all", "--id", check_id, "--seed", str(ctx.seed), "--profile", ctx.profile,
             "--device", ctx.device]
    if ctx.fp32_dot != "tf32":
        parts += ["--fp32-dot", ctx.fp32_dot]
    if ctx.examples:
        parts += ["--examples", str(ctx.examples)]
    if ctx.kernel_root:
        parts += ["--kernel-root", ctx.kernel_root]
    if ctx.configs != configs.DEFAULT:
        parts += ["--configs", ctx.configs]
    if ctx.references != "auto":
        parts += ["--references", ctx.references]
    cid = CheckId.parse(check_id)
    if cid.impl not in (None, BUILT_IN):     # a fresh process finds the implementation again where it came from
        spec = next((i.spec for i in registered((cid.impl,)) if i.spec), cid.impl)
        parts += ["--impl", spec]
    return shlex.join(parts)


def any_failed(outcomes) -> bool:
    """Whether a check failed or errored among the outcomes (expected failures applied): --exitfirst stops."""
    return any(r.result.status in ("fail", "error") for r in outcomes)


def not_run(check: Check, ctx: Context, message: str) -> Outcome:
    return Outcome(check.id, check.description, Result("skip", message=message, kind="not_run"), 0.0,
                  repro_command(check.id, ctx), seed=ctx.seed)


def execute(check: Check, ctx: Context, debug: bool = False) -> Outcome:
    """Run one check in this process and classify what went wrong (no expected-failure list here)."""
    started, t0 = time.time(), time.perf_counter()
    timing.reset()
    configs.begin(check.id, ctx)      # the tile-config assignment and collector of this check
    if ctx.device not in check.devices:
        result = Result("skip", message=f"not applicable on device {ctx.device}", kind="unsupported")
    else:
        try:
            result = check.run(ctx)
            if not isinstance(result, Result):
                raise TypeError(f"check returned {type(result).__name__}, not Result")
        except UsageError:
            raise
        except Exception as exc:  # a crashing check is an error, never a pass
            tb = traceback.format_exc() if debug else traceback.format_exc(limit=-3)
            message = f"{type(exc).__name__}: {exc}"
            if is_device_fatal(exc):
                result = Result("fail", message=f"fatal CUDA error: {message}", kind="cuda_fatal",
                                details={"traceback": tb, DEVICE_LOST: True})
            elif why := (str(exc) if isinstance(exc, Incompatible) else triton_incompatibility(exc)):
                result = Result("skip", message=why, kind="incompatible", details={"traceback": tb})
            elif is_interpreter_gap(exc):
                result = Result("skip", message=f"not verifiable on the CPU interpreter: {innermost_error(exc)}",
                                kind="interpreter_gap", details={"traceback": tb})
            else:
                result = Result("error", message=message, kind="check_error", details={"traceback": tb})
    if split := timing.spent():
        result.details["seconds_in"] = split
    configs.attach(result)            # details["configs"]: which config each autotuned kernel ran
    if result.details.get(DEVICE_LOST):
        result.kind = "cuda_fatal"
        _sanitize(check, result, ctx)
    elif result.status == "fail" and result.kind is None:
        finite = result.measured is None or math.isfinite(result.measured)
        result.kind = "over_budget" if finite else "non_finite"
    return Outcome(check.id, check.description, result, time.perf_counter() - t0, repro_command(check.id, ctx),
                  started, ctx.seed, reads.take())


def _sanitize(check: Check, result: Result, ctx: Context) -> None:
    """A fatal CUDA error: rerun the example alone under compute-sanitizer (pathmdn_verify.run.sanitize, in subprocesses:
    this worker's CUDA context is lost) and add its verdict (kernel, source line, access) to the result; not
    for a fault listed with its CUDA error text (an entry's `fault`) that this error repeats: the entry holds
    that replay's verdict (a replay of a listed fault cost 35-46 s a check on an H200, half a warm ci run)."""
    if ctx.device != "cuda" or not result.details.get("failing_example"):
        return
    entry = xfail_list.applicable(scope(ctx, _loaded_package())).get(check.id)
    if entry is not None and entry.fault and "cuda_fatal" in entry.kinds and entry.fault in result.message:
        result.message += f" [sanitizer replay skipped: the listed fault ({entry.fault!r}; verify localize " \
                          "--sanitize replays it)]"
        result.details["sanitizer"] = {"status": "skipped", "summary": f"listed fault: {entry.fault}"}
        return
    from pathmdn_verify.run import sanitize
    try:
        sanitize.annotate(check.id, result, ctx.device)
    except Exception as exc:     # the fault stays recorded; the sanitizer's own failure is said, not raised
        result.message += f" [sanitizer not run: {type(exc).__name__}: {exc}]"


@functools.cache
def _loaded_package() -> dict | None:
    """This worker's kernel package (environment.kernel_package), once; None when it cannot be imported."""
    try:
        return environment.kernel_package()
    except ImportError:
        return None


def scope(ctx: Context, kernel_package: dict | None, lists: tuple[Path, ...] = ()) -> xfail_list.Scope:
    """What the expected-failure lists (`lists`, default the built-in one) are judged against: the kernel package
    the workers loaded, the device class and the profile."""
    name = environment.describe(ctx.device)["device_name"] if ctx.device == "cuda" else None
    others = {i.name: f"{i.name} {i.version}" if i.version else i.name for i in registered()}
    return xfail_list.Scope(xfail_list.identity(kernel_package), xfail_list.device_class(ctx.device, name), ctx.profile,
                            (kernel_package or {}).get("path"), tuple(sorted(others.items())), tuple(lists))


def apply_xfails(outcome: Outcome, scope: xfail_list.Scope) -> Outcome:
    """Apply the expected-failure list (the one place the runner consults pathmdn_verify.run.xfail_list): a listed failure of
    the known kind and size becomes xfail, a worse one stays a failure saying so, a listed pass is marked."""
    outcome.result = xfail_list.apply(outcome.id, outcome.result, scope)
    return outcome


# ---------------------------------------------------------------------------------------------- workers

# Heavy third-party modules every worker imports, none of which depends on the run's settings: imported once
# by multiprocessing's fork server, from which each worker is then forked, so that a worker, a replacement
# worker, and each kernel tree a mutant check runs starts without re-importing torch and dynamo.  Never fla
# nor this toolkit's modules: a worker imports the kernel package it is given (--kernel-root) after the
# interpreter fidelity layer.  dynamo imports triton, whose own kernels (triton.language) are then defined
# for the interpreter or for the GPU by TRITON_INTERPRET: the server is started with it set for CPU runs,
# as the fidelity layer would set it, and without for GPU runs.  On a machine without a GPU the server also imports
# HOST_PRELOAD, the parts of torch and transformers that fla imports (most of what fla's import costs a worker after
# torch).  Never on a machine with a GPU: importing them there (torch._inductor.compile_fx asks
# torch.cuda.is_available()) leaves every process forked after it unable to use CUDA (torch's bad-fork mark,
# while torch.cuda.is_initialized() stays False), and every worker fails with "Cannot re-initialize CUDA in
# forked subprocess" (test_runner_cli forks from a process that imported the preload and checks that the child
# can use CUDA; a worker that starts with the mark stops the run with one line).
PRELOAD = ("torch", "torch._dynamo", "hypothesis")
HOST_PRELOAD = ("torch._inductor.compile_fx", "torch._dynamo.repro.after_dynamo",
                "torch.distributed._tensor.placement_types", "transformers.utils", "transformers.modeling_layers",
                "transformers.activations")
_server_device: list[str] = []        # the device the fork server was started for (it is one per process)
# A server start_fork_server started that no Workers has taken yet: the slot environment it was started with.
# Sessions may run in threads side by side (verify mutants): the lock makes taking or stopping it one step.
_early_server: list[dict[str, str]] = []
_early_lock = threading.Lock()


def _process_context(device: str):
    """The workers' start method: forkserver with preload(device), started for `device`; spawn where the platform
    has no fork server, or where this process's server was started for the other device."""
    if "forkserver" not in multiprocessing.get_all_start_methods() or _server_device not in ([], [device]):
        return multiprocessing.get_context("spawn")
    _server_device[:] = [device]
    _short_socket_folder()
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload(device))
    return context


SOCKET_PATH_MAX = 107      # bytes of an AF_UNIX socket's path on Linux (sun_path, less its terminating NUL)


def _short_socket_folder() -> None:
    """multiprocessing puts its fork server's socket in a folder it makes in the temporary folder, once per process
    (TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX): under a long TMPDIR the path does not fit in a socket address and no
    worker can start (OSError: AF_UNIX path too long).  Then that folder is made in /tmp, as later Pythons' own
    multiprocessing does; nothing else of the run moves."""
    import multiprocessing.util
    base = tempfile.gettempdir()
    if len(os.path.join(base, "pymp-xxxxxxxx", "listener-xxxxxxxx").encode()) > SOCKET_PATH_MAX \
            and os.path.isdir("/tmp"):
        saved, tempfile.tempdir = tempfile.tempdir, "/tmp"
        try:
            multiprocessing.util.get_temp_dir()
        finally:
            tempfile.tempdir = saved


def preload(device: str) -> list[str]:
    """What the fork server for `device` imports: PRELOAD, and HOST_PRELOAD on a machine without a GPU."""
    return list(PRELOAD + (HOST_PRELOAD if device == "cpu" and not environment.gpu_count() else ()))


def _slot_environ(device: str, n: int) -> dict[str, str]:
    """What every one of n worker slots on `device` adds to the environment: its share of the cores for the
    thread pools, and on cuda the autotuning results cached on disk (Triton's own cache), so that the workers,
    and later runs, do not each re-time every configuration of every kernel."""
    threads = _thread_limits(max(1, environment.cpu_count() // n)) if n > 1 else {}
    autotune = {"TRITON_CACHE_AUTOTUNING": os.environ.get("TRITON_CACHE_AUTOTUNING", "1")} \
        if device == "cuda" and environment.visible_gpus() else {}
    return {**threads, **autotune}


@contextlib.contextmanager
def _server_environ(device: str, env: dict[str, str]):
    """os.environ as a fork server for `device` must start with (what its preload reads): env, and
    TRITON_INTERPRET set on the CPU and unset on cuda; where this process keeps its bytecode in a folder
    (pathmdn_verify.platform.bytecode), the server keeps it there too, and so do the workers forked from it (or
    spawned: Workers starts each in this context)."""
    import multiprocessing.util
    keep = bytecode.server_environ()
    flags = multiprocessing.util._args_from_interpreter_flags
    with mock.patch.dict(os.environ, {**env, **({"TRITON_INTERPRET": "1"} if device == "cpu" else {}),
                                      **{k: v for k, v in keep.items() if v is not None}}), \
            mock.patch.object(multiprocessing.util, "_args_from_interpreter_flags",
                              lambda: bytecode.interpreter_flags(flags())):
        for name in [k for k, v in keep.items() if v is None] + (["TRITON_INTERPRET"] if device != "cpu" else []):
            os.environ.pop(name, None)
        yield


def start_fork_server(device: str, n: int) -> None:
    """Start this process's fork server for n workers on `device` now, so that its preload runs while this
    process prepares the run (Workers then finds it running).  Nothing where workers are spawned or a server
    already runs; Workers of another slot environment than n's (another session's) replace it."""
    from multiprocessing import forkserver
    with _early_lock:
        if _process_context(device).get_start_method() == "forkserver" and not _fork_server_pid():
            _early_server[:] = [_slot_environ(device, n)]
            with _server_environ(device, _early_server[0]):
                forkserver.ensure_running()


def _take_fork_server(env: dict[str, str]) -> None:
    """Workers of slot environment env take the server start_fork_server started, unless it was started with
    another (its thread limits are not theirs): that one is stopped, never one a worker was forked from."""
    with _early_lock:
        if _early_server and _early_server.pop() != env:
            _stop_fork_server()


def stop_unused_fork_server() -> None:
    """Stop the server start_fork_server started if no Workers took it (every verdict replayed, or the run ended
    before its workers started): it holds the process's stdout and stderr, which a reader waits on to their end."""
    with _early_lock:
        if _early_server:
            _early_server.clear()
            _stop_fork_server()


def _worker_init(debug: bool, environ: dict[str, str], path: list[str]) -> None:
    """In each fresh worker: the environment and import path of the process that started it now (a forked
    worker would otherwise have the fork server's, fixed when that started), its thread limits applied to
    torch and OpenMP, already loaded in the server; Ctrl-C is the reporting process's to handle; what it reads
    observed (pathmdn_verify.platform.reads, for the verdict cache); register the checks."""
    reads.install()
    os.environ.clear()
    os.environ.update(environ)
    tempfile.tempdir = None        # the temporary folder of that environment, not the one the server found first
    sys.path[:] = path
    if "OMP_NUM_THREADS" in environ:
        import torch
        torch.set_num_threads(int(environ["OMP_NUM_THREADS"]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not debug:
        for text in environment.CONTRADICTED_WARNINGS:
            warnings.filterwarnings("ignore", message=text)
    try:
        load_checks()
    except UsageError as exc:      # said by the start task, which the run reads (an initializer's error is lost)
        _init_error.append(str(exc))


_init_error: list[str] = []       # a worker's usage error while it registered the checks


def _worker_start(ctx: Context, kernels: bool) -> dict:
    """The first task of every worker: import the kernel package the way kernel checks do (after the CPU
    interpreter's fidelity layer) and say what was loaded; the import error as text when it fails, a usage error
    of the registration, or of a GPU worker that cannot use CUDA (_in_bad_fork), as such."""
    info = {"pid": os.getpid(), "kernel_package": None, "interpreter_fidelity": None, "import_error": None,
            "usage_error": _init_error[0] if _init_error else None}
    if ctx.device == "cuda" and not info["usage_error"] and _in_bad_fork():
        info["usage_error"] = ("it cannot use CUDA: it was forked from a process that had asked CUDA for its devices "
                               "(torch's bad-fork mark), which the fork server's preload must not do (runner.preload)")
    if kernels and not info["usage_error"]:
        try:
            if ctx.kernel_root:     # the tree first on sys.path, and fla without its model zoo when needed
                from pathmdn_verify.platform.kernel_root import activate
                activate(ctx.kernel_root)
            from pathmdn_verify.platform.setup import prepare
            prepare(ctx)
            info["kernel_package"] = environment.kernel_package()
        except Exception as exc:
            info["import_error"] = f"{type(exc).__name__}: {exc}"
        if ctx.device == "cpu" and info["import_error"] is None:
            from pathmdn_verify.platform import fidelity
            info["interpreter_fidelity"] = fidelity.active_parts()
    return info


def _in_bad_fork() -> bool:
    """Whether this process was forked from one that initialised CUDA, and so cannot use it."""
    import torch
    return bool(getattr(torch.cuda, "_is_in_bad_fork", lambda: False)())


def _worker_run(check_id: str, ctx: Context, debug: bool) -> Outcome:
    outcome = execute(REGISTRY[check_id], ctx, debug)
    if ctx.device == "cuda" and outcome.result.kind != "cuda_fatal":
        _check_context(outcome)
    return outcome


def _check_context(outcome: Outcome) -> None:
    """A kernel's fault can surface after its check returned (kernels run asynchronously): synchronize, and
    if the CUDA context is lost, this check is the one that lost it (the worker is then replaced)."""
    import torch
    try:
        torch.cuda.synchronize()
    except Exception as exc:
        if not is_device_fatal(exc):
            raise
        r = outcome.result
        r.status, r.kind = "fail", "cuda_fatal"
        r.message += f" [the CUDA context was lost during this check: {type(exc).__name__}: {exc}]".splitlines()[0]
        r.details[DEVICE_LOST] = True


@dataclass
class Lost:
    """A task of Workers.map whose worker was lost: kind crashed or timeout, what happened, its seconds, and the
    dead worker's exit status where it is known (negative: the signal that killed it)."""
    kind: str
    message: str
    seconds: float
    exit_code: int | None = None


@dataclass
class _Slot:
    env: dict[str, str]
    executor: cf.ProcessPoolExecutor | None = None
    process: multiprocessing.Process | None = None
    future: cf.Future | None = None
    index: int | None = None       # position in the selection of the check it runs; None while starting
    t0: float = 0.0                # when its check, or its worker's start, began
    ready: bool = False
    reads: set[str] | None = field(default_factory=set)   # every file its worker read so far (None: not known)
    taken: int = 0                 # the worker's reads reported so far (pathmdn_verify.platform.reads.take)
    failed_starts: int = 0         # its workers that died or hung while starting, one after the other
    retired: str | None = None     # why it takes no more checks: no worker of its would start


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _thread_limits(threads: int) -> dict[str, str]:
    """Several workers share the cores: each gets its part for torch's and the BLAS's thread pools (so that
    N workers do not run N x cores threads), unless the user set these variables."""
    return {v: str(threads) for v in THREAD_VARIABLES if v not in os.environ}


# Workers per GPU for --workers auto on cuda, at most one per core.  A check's time on a GPU is mostly the
# host's: hypothesis, the float64 oracle and Triton's compilation, so several workers share one GPU: on one H200
# with 16 cores, a cold ci run with 16 workers took about three quarters of the time of one with 8.
WORKERS_PER_GPU = 16


def worker_count(spec: str, device: str) -> int:
    """--workers N|auto: auto is WORKERS_PER_GPU per visible GPU on cuda (at most one per core), one per
    available core on the CPU."""
    if spec == "auto":
        if device == "cuda":
            gpus = max(1, environment.gpu_count())
            return gpus * max(1, min(WORKERS_PER_GPU, environment.cpu_count() // gpus))
        return max(1, environment.cpu_count())
    if not spec.isdigit() or int(spec) < 1:
        raise UsageError(f"--workers {spec}: must be a positive integer or auto")
    return int(spec)


@dataclass
class Workers:
    """N worker slots; on cuda with several visible GPUs, slot i sees only the i-th (mod count) of them.

    A slot's worker that dies or hangs while it starts (past `start_timeout`, its import of the kernel package
    included) is replaced, up to MAX_STARTS times in a row; then the slot is retired, and when every slot is, the
    checks left fail as crashed with the reason: a run never waits on a worker that will not come."""
    n: int
    ctx: Context
    kernels: bool                  # import the kernel package in each worker at start
    debug: bool = False
    info: dict | None = None       # what the first worker reported at start (kernel package, fidelity)
    cache: object = None           # a VerdictCache (pathmdn_verify.run.verdicts) to reuse and keep verdicts, or None
    run_label: str = ""            # the run a kept verdict comes from, for a later run's record of it
    start_timeout: float = START_TIMEOUT
    lists: tuple[Path, ...] = ()   # the run's expected-failure lists (empty: the built-in one)
    slots: list[_Slot] = field(default_factory=list)

    def __post_init__(self):
        gpus = environment.visible_gpus() if self.ctx.device == "cuda" else []
        env = _slot_environ(self.ctx.device, self.n)
        _take_fork_server(env)
        self.run_dir = tempfile.TemporaryDirectory(prefix="verify_run_")
        self.context = _process_context(self.ctx.device)
        self.managers: list[threading.Thread] = []     # every executor's manager thread (close waits for them)
        self.slots = [_Slot({**env, RUN_DIR_ENV: self.run_dir.name,
                             **({"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]} if len(gpus) > 1 else {})})
                      for i in range(self.n)]
        for slot in self.slots:
            self._start(slot)

    def _start(self, slot: _Slot) -> None:
        """A fresh worker in the slot, its first task the start (`_worker_start`)."""
        slot.executor = cf.ProcessPoolExecutor(1, mp_context=self.context, initializer=_worker_init,
                                               initargs=(self.debug, {**os.environ, **slot.env}, list(sys.path)))
        with _server_environ(self.ctx.device, slot.env):     # for a fork server started here
            slot.future = self._spawn(slot)
        slot.process = next(iter(slot.executor._processes.values()))   # started by submit
        self.managers.append(slot.executor._executor_manager_thread)    # so is its manager thread
        slot.index, slot.ready, slot.t0 = None, False, time.monotonic()
        slot.reads, slot.taken = set(), 0

    def _spawn(self, slot: _Slot) -> cf.Future:
        """Submit the start task, which starts the worker process: through the fork server, which must answer
        within SPAWN_TIMEOUT.  One that does not (stopped, hung) or dies while answering is killed, and the
        worker spawned instead, from a fresh interpreter (multiprocessing's spawn)."""
        forked = self.context.get_start_method() == "forkserver"
        try:
            with _deadline(min(SPAWN_TIMEOUT, self.start_timeout)):
                return slot.executor.submit(_worker_start, self.ctx, self.kernels)
        except (_Stalled, EOFError, ConnectionError, cf.process.BrokenProcessPool, Interrupted) as exc:
            if forked:
                _kill_fork_server()          # it did not answer: of no use any more (a stopped one never exits)
            if _pending_interrupt:
                raise Interrupted(_pending_interrupt[0]) from None
            if not forked:
                raise UsageError(f"a worker process could not be started: {type(exc).__name__}: {exc}") from None
            self.context = multiprocessing.get_context("spawn")
            for process in list((getattr(slot.executor, "_processes", None) or {}).values()):
                _kill_worker(process)            # forked before the server stalled: it would outlive the run
            _shutdown(slot.executor)
            slot.executor = cf.ProcessPoolExecutor(1, mp_context=self.context, initializer=_worker_init,
                                                   initargs=(self.debug, {**os.environ, **slot.env}, list(sys.path)))
            return slot.executor.submit(_worker_start, self.ctx, self.kernels)

    def _replace(self, slot: _Slot) -> None:
        self._kill(slot)
        self._start(slot)

    @staticmethod
    def _kill(slot: _Slot) -> None:
        _kill_worker(slot.process)
        _shutdown(slot.executor, cancel=True)

    def close(self) -> None:
        """Idle workers exit on their own (their exit handlers run: a mutant check's worker releases the
        semaphores of its own workers' queues), within CLOSE_SECONDS in all; the others, and any that lingers,
        are killed.  Never raises: it runs as a run ends, an interrupted one too."""
        until = time.monotonic() + CLOSE_SECONDS
        for slot in self.slots:
            if slot.future is None:
                _shutdown(slot.executor)
        for slot in self.slots:
            if slot.future is None and slot.process is not None:
                slot.process.join(max(0.0, until - time.monotonic()))
            self._kill(slot)
        if not _reaped(self.managers, time.monotonic() + 1):   # a fork server that does not report its workers'
            _kill_fork_server()                                 # ends (stopped, hung) holds the process's exit
            _reaped(self.managers, time.monotonic() + 1)
        self.run_dir.cleanup()

    def _started(self, slot: _Slot) -> None:
        """A worker's start task ended: the slot takes checks; or the kernel package cannot be imported (a usage
        error); or the worker died while starting (`_failed_start`)."""
        try:
            info = slot.future.result()
        except cf.process.BrokenProcessPool:
            return self._failed_start(slot, f"its worker died while starting (exit code {self._exit_code(slot)})")
        if info.get("usage_error"):
            raise UsageError(f"a worker process: {info['usage_error']}")
        if info["import_error"]:
            where = f"--kernel-root {self.ctx.kernel_root}" if self.ctx.kernel_root else "the installed fla"
            raise UsageError(f"{where}: the kernel package cannot be imported: {info['import_error']}")
        if self.info is None:
            self.info = info
        slot.future, slot.ready, slot.failed_starts = None, True, 0

    def _failed_start(self, slot: _Slot, why: str) -> None:
        """A worker that died or hung while starting: a fresh one, or after MAX_STARTS in a row the slot retires."""
        slot.failed_starts += 1
        if slot.failed_starts >= MAX_STARTS:
            self._kill(slot)
            slot.future, slot.retired = None, f"{why}, {MAX_STARTS} times in a row"
        else:
            self._replace(slot)

    def _check_starts(self) -> None:
        """Starting workers past start_timeout are replaced (a hung import, a device that no longer answers)."""
        for slot in self.slots:
            if slot.future is not None and slot.index is None and time.monotonic() - slot.t0 > self.start_timeout:
                self._failed_start(slot, f"its worker did not start within {self.start_timeout:g} s")

    def retired(self) -> str | None:
        """Why no slot can take a check (every one retired), else None."""
        return "; ".join(sorted({s.retired for s in self.slots})) if all(s.retired for s in self.slots) else None

    def wait_ready(self) -> dict:
        """Block until the first worker has started; what it loaded (for the header).  No worker at all: a
        usage error saying why."""
        while self.info is None:
            if why := self.retired():
                raise UsageError(f"no worker process could start: {why}")
            starting = [s for s in self.slots if s.future is not None]
            left = min(s.t0 + self.start_timeout - time.monotonic() for s in starting)
            done, _ = cf.wait([s.future for s in starting], timeout=max(left, 0), return_when=cf.FIRST_COMPLETED)
            for slot in starting:
                if slot.future in done:
                    self._started(slot)
            self._check_starts()
        return self.info

    def run(self, checks: list[Check], ctx: Context, finished: dict[int, Outcome], timeout: float,
            deadline: float | None = None, on_start: Callable[[int, Check], None] = lambda i, c: None,
            on_done: Callable[[int, Outcome], None] = lambda i, r: None, exitfirst: bool = False,
            durations: dict[str, float] | None = None) -> list[Outcome]:
        """Run checks (ctx.seed etc. from ctx) in `start_order` (durations: a previous run's seconds per id);
        fills `finished` (selection index -> judged Outcome) as they end and calls on_done in selection order.
        `deadline` (time.monotonic()): start no check after it; exitfirst: start none after a check failed or
        errored (the expected failures applied)."""
        run = _Pass(self, checks, ctx, finished, timeout, deadline, on_start, exitfirst,
                    scope(ctx, self.info and self.info["kernel_package"], self.lists), start_order(checks, ctx.device,
                                                                                                  durations))
        run.reuse()
        reported = 0
        while run.pending or any(s.future is not None for s in self.slots):
            run.start()
            if any(s.future is not None for s in self.slots):
                run.collect(*self._wait_any(timeout))
                self._check_starts()
            while reported < len(checks) and reported in finished:
                on_done(reported, finished[reported])
                reported += 1
        return [finished[i] for i in range(len(checks))]

    @staticmethod
    def _add_reads(slot: _Slot, taken: tuple | None) -> None:
        """Add what the worker read (n, files) to the slot's; a take missed (a task's result that did not come
        back, a take outside a check) leaves the slot's reads unknown until its worker is replaced."""
        if taken is None or slot.reads is None or taken[0] != slot.taken + 1:
            slot.reads = None
            return
        slot.taken = taken[0]
        slot.reads.update(taken[1])

    def _root(self) -> Path | None:
        """The folder holding the workers' kernel package (files there are kept by their path in it)."""
        pkg = self.info and self.info["kernel_package"]
        return Path(pkg["path"]).parent if pkg else None

    def _collect(self, slot: _Slot, check: Check, ctx: Context) -> Outcome:
        try:
            outcome = slot.future.result()
            self._add_reads(slot, outcome.reads)
        except cf.process.BrokenProcessPool:
            return self._failed(slot, check, ctx, "crashed", self._died(self._exit_code(slot)))
        except UsageError:
            raise
        except Exception as exc:     # the result could not come back (not picklable, ...)
            outcome = Outcome(check.id, check.description,
                            Result("error", message=f"{type(exc).__name__}: {exc}", kind="check_error"),
                            time.monotonic() - slot.t0, repro_command(check.id, ctx), seed=ctx.seed)
        slot.future, slot.index = None, None
        if outcome.result.kind == "cuda_fatal":      # the worker's CUDA context is unusable: a fresh one
            self._replace(slot)
        return outcome

    def _submit(self, slot: _Slot, index: int, function, *args) -> bool:
        """Give the slot's worker a task; False when that worker had died while idle (it is replaced)."""
        try:
            slot.future = slot.executor.submit(function, *args)
        except (cf.process.BrokenProcessPool, RuntimeError):
            self._replace(slot)
            return False
        slot.index, slot.t0 = index, time.monotonic()
        return True

    @staticmethod
    def _unstarted(check: Check, ctx: Context, why: str) -> Outcome:
        """A check no worker could take (every slot retired): a failure of kind crashed, saying why."""
        return Outcome(check.id, check.description, Result("fail", message=f"not run: no worker process could "
                                                                           f"start ({why})", kind="crashed"),
                       0.0, repro_command(check.id, ctx), seed=ctx.seed)

    def _failed(self, slot: _Slot, check: Check, ctx: Context, kind: str, what: str) -> Outcome:
        """The worker was lost with this check (crash or timeout): outcome it and start a fresh worker."""
        lost = self._lose(slot, kind, what)
        return Outcome(check.id, check.description, Result("fail", message=lost.message, kind=kind),
                      lost.seconds, repro_command(check.id, ctx), time.time() - lost.seconds, ctx.seed)

    def _wait_any(self, timeout: float) -> tuple[list[_Slot], set]:
        """The busy slots and their futures that are done, after waiting for the first to end, at most until the
        earliest running task reaches `timeout` seconds or the earliest starting worker start_timeout."""
        busy = [s for s in self.slots if s.future is not None]
        wait_for = min(s.t0 + (timeout if s.index is not None else self.start_timeout) - time.monotonic()
                       for s in busy)
        done, _ = cf.wait([s.future for s in busy], timeout=max(wait_for, 0), return_when=cf.FIRST_COMPLETED)
        return busy, done

    @staticmethod
    def _exit_code(slot: _Slot) -> int | None:
        """The exit status of the slot's dead worker (its future raised BrokenProcessPool).  The pool's manager
        thread reaps it: wait for that, REAP_SECONDS at most, and never read the status beside that thread (two
        readers of a forkserver child's exit status race, and the loser reads 255); while it still runs (a process stuck in a device driver
        is never reaped), only the status it has read, or None."""
        _shutdown(slot.executor)
        manager = getattr(slot.executor, "_executor_manager_thread", None)
        if manager is not None:
            manager.join(REAP_SECONDS)
        if manager is not None and manager.is_alive():
            return getattr(getattr(slot.process, "_popen", None), "returncode", None)
        return slot.process.exitcode

    @staticmethod
    def _died(code: int | None) -> str:
        """How a worker died, from its exit status (_exit_code)."""
        how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exit code {code}" if code is not None else "exit status not known yet")
        hint = " (the kernel crashed, or the machine ran out of memory)" if code in (-9, -6, -11) else ""
        return f"the worker process died: {how}{hint}"

    def _lose(self, slot: _Slot, kind: str, what: str, code: int | None = None) -> Lost:
        """The slot's worker was lost with its task (crash, with its exit status, or timeout): say so and start a
        fresh worker."""
        seconds = time.monotonic() - slot.t0
        self._replace(slot)
        return Lost(kind, f"{what}; the run went on in a fresh worker", seconds, code)

    def map(self, tasks: list[tuple[Callable, tuple]], timeout: float,
            on_start: Callable[[int], None] = lambda i: None,
            on_done: Callable[[int, object], None] = lambda i, value: None) -> list:
        """Run tasks that are not checks, each a picklable (function, args), in the slots with the checks'
        isolation: each task's return value, in the order of `tasks`, or a Lost (kind crashed or timeout)
        where its worker died or it ran past `timeout` seconds (the slot then gets a fresh worker).  An
        exception a task raises is raised here.  on_start as a task starts, on_done as it ends."""
        values: dict[int, object] = {}
        pending = list(range(len(tasks)))
        while pending or any(s.future is not None for s in self.slots):
            if pending and (why := self.retired()):
                for i in pending:
                    values[i] = Lost("crashed", f"not run: no worker process could start ({why})", 0.0)
                    on_done(i, values[i])
                pending.clear()
            for slot in self.slots:
                if slot.ready and slot.future is None and pending:
                    i = pending.pop(0)
                    function, args = tasks[i]
                    if not self._submit(slot, i, function, *args):
                        pending.insert(0, i)
                        continue
                    on_start(i)
            if not any(s.future is not None for s in self.slots):
                continue
            busy, done = self._wait_any(timeout)
            for slot in busy:
                i = slot.index
                if slot.future in done and i is None:
                    self._started(slot)
                    continue
                if slot.future in done:
                    try:
                        values[i] = slot.future.result()
                        slot.future, slot.index = None, None
                    except cf.process.BrokenProcessPool:
                        code = self._exit_code(slot)
                        values[i] = self._lose(slot, "crashed", self._died(code), code)
                elif i is not None and time.monotonic() - slot.t0 > timeout:
                    values[i] = self._lose(slot, "timeout", f"exceeded the timeout of {timeout:g} s")
                else:
                    continue
                on_done(i, values[i])
            self._check_starts()
        return [values[i] for i in range(len(tasks))]


@dataclass
class _Pass:
    """One run of a selection through a Workers pool: the checks left to start (`pending`, in start order), what
    each start waits on, and the outcomes as they end (judged against `listed`)."""
    pool: Workers
    checks: list[Check]
    ctx: Context
    finished: dict[int, Outcome]
    timeout: float
    deadline: float | None
    on_start: Callable[[int, Check], None]
    exitfirst: bool
    listed: xfail_list.Scope
    pending: list[int]
    # under --configs autotune on a GPU, an op's first kernel check runs alone: it times the op's kernels'
    # configs into Triton's disk cache, which the op's other checks then read instead of each timing them
    # at once (compilation needs no such wait: timing.compile_once compiles each key once per run)
    warming: dict[str, int] = field(default_factory=dict)     # op group -> its first check, while that runs
    seen: set[str] = field(default_factory=set)
    # a check whose worker died runs once more (an interpreter segfault under load was seen to pass on a rerun);
    # a second crash is its result, the first is always reported
    crashed: dict[int, Outcome] = field(default_factory=dict)

    def reuse(self) -> None:
        """The verdicts the cache holds for checks whose every input is unchanged."""
        kept = self.pool.cache
        if kept is None:
            return
        for i in list(self.pending):
            if verdicts.cacheable(self.checks[i].id) and \
                    (hit := kept.get(self.checks[i].id, self.ctx, self.pool._root())) is not None:
                self.finished[i] = apply_xfails(hit, self.listed)
                self.pending.remove(i)

    def start(self) -> None:
        """Give each idle worker the next check it may start; with no worker left, the rest fail as crashed."""
        pool = self.pool
        if self.pending and (why := pool.retired()):      # no worker will come: the checks left cannot run
            for i in self.pending:
                self.finished[i] = apply_xfails(pool._unstarted(self.checks[i], self.ctx, why), self.listed)
            self.pending.clear()
        for slot in pool.slots:
            i = next_startable(self.pending, self.checks, self.warming)
            if not (slot.ready and slot.future is None and i is not None):
                continue
            self.pending.remove(i)
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.finished[i] = not_run(self.checks[i], self.ctx, TIME_LIMIT)
            elif self.exitfirst and any_failed(self.finished.values()):
                self.finished[i] = not_run(self.checks[i], self.ctx, EXITFIRST)
            elif not pool._submit(slot, i, _worker_run, self.checks[i].id, self.ctx, pool.debug):
                self.pending.insert(0, i)       # its worker had died while idle: a fresh one takes it
            else:
                self._warm(i)
                self.on_start(i, self.checks[i])

    def _warm(self, i: int) -> None:
        group = CheckId.parse(self.checks[i].id).group
        if self.ctx.device == "cuda" and self.ctx.configs == "autotune" and self.checks[i].id.startswith("kernel.") \
                and group not in self.seen:
            self.seen.add(group)
            self.warming[group] = i

    def collect(self, busy: list[_Slot], done: set) -> None:
        """The starts and the checks that ended; the check past its timeout (its worker replaced)."""
        pool = self.pool
        for slot in busy:
            i = slot.index
            if slot.future in done and i is None:
                pool._started(slot)
            elif slot.future in done:
                self._ended(slot, i)
            elif i is not None and time.monotonic() - slot.t0 > self.timeout:
                self.finished[i] = apply_xfails(pool._failed(slot, self.checks[i], self.ctx, "timeout",
                                                             f"exceeded the per-check timeout of {self.timeout:g} s"),
                                                self.listed)
        for group, first in list(self.warming.items()):
            if first in self.finished:
                del self.warming[group]

    def _ended(self, slot: _Slot, i: int) -> None:
        pool = self.pool
        outcome = pool._collect(slot, self.checks[i], self.ctx)
        if pool.cache is not None:     # the raw outcome, before the expected-failure list
            pool.cache.put(outcome, self.ctx, pool.run_label, slot.reads, pool._root())
        if outcome.result.kind == "crashed" and i not in self.crashed:   # once more, in a fresh worker
            self.crashed[i] = outcome
            self.pending.insert(0, i)
            return
        if i in self.crashed:
            outcome.result.message += f" [its first worker crashed: {self.crashed[i].result.message}]"
            outcome.result.details["first_attempt"] = self.crashed[i].result.message
        self.finished[i] = apply_xfails(outcome, self.listed)


def next_startable(pending: list[int], checks: list[Check], warming: dict[str, int]) -> int | None:
    """The first pending check whose op group is not warming up (its first check running elsewhere)."""
    return next((j for j in pending if warming.get(CheckId.parse(checks[j].id).group, j) == j), None)


def tier(check_id: str) -> int:
    """A check's expected cost on a GPU, in tiers (0 the costliest): layer generation checks (one token at a time:
    at full, 2048 decoded tokens, the longest checks of a run on a GPU); kernel backward checks (the most
    kernels to compile: on a GPU the fp32 ones of GDN chunk and PaTH are the longest at ci), their fp32 before
    bf16; the other kernel checks; the other layer checks; the rest (oracles, proofs, canaries: CPU seconds, no
    compilation)."""
    cid = CheckId.parse(check_id)
    if cid.is_kernel:
        return 1 if cid.pass_ == "bwd" and cid.dtype == "fp32" else 2 if cid.pass_ == "bwd" else 3
    if cid.is_layer:
        return 0 if cid.parts[-1] == "generation" else 4
    return 5


def start_order(checks: list[Check], device: str, durations: dict[str, float] | None = None) -> list[int]:
    """The order checks start in (results are still reported in selection order), longest expected first so
    that the last to start are short (a longest-first list schedule):
      with durations (a previous run's seconds): by them (`expected_seconds`);
      else on a GPU: by `tier`, each tier round-robin over its op groups (the k-th check of every group, groups
        in order of appearance, before the (k+1)-th of any), so that workers starting together compile
        different ops' kernels;
      else (the CPU interpreter compiles nothing): the selection's order."""
    if durations:
        seconds = expected_seconds(checks, durations)
        return sorted(range(len(checks)), key=lambda i: (-seconds[checks[i].id], i))
    if device != "cuda":
        return list(range(len(checks)))
    first: dict[tuple, int] = {}       # (tier, group) -> index of its first check
    taken: dict[tuple, int] = {}       # (tier, group) -> its checks seen so far
    keys = []
    for i, c in enumerate(checks):
        tg = (tier(c.id), CheckId.parse(c.id).group)
        first.setdefault(tg, i)
        keys.append((tg[0], taken.get(tg, 0), first[tg]))
        taken[tg] = taken.get(tg, 0) + 1
    return sorted(range(len(checks)), key=keys.__getitem__)


def expected_seconds(checks: list[Check], durations: dict[str, float] | None) -> dict[str, float]:
    """Each check's seconds in a previous run; a check it lacks counts its median; without durations, 1 each."""
    known = sorted((durations or {}).values())
    fallback = known[len(known) // 2] if known else 1.0
    return {c.id: (durations or {}).get(c.id, fallback) for c in checks}


def shard(checks: list[Check], k: int, n: int, durations: dict[str, float] | None = None) -> list[Check]:
    """Shard k of n (1-based): longest first, each check to the shard with the least total duration so far
    (ties to the lower shard); a check without a duration counts the median one; without durations every
    check counts 1, i.e. round robin over sorted ids.  Deterministic; the selection's order is kept."""
    weight = expected_seconds(checks, durations)
    loads = [0.0] * n
    mine = set()
    for cid in sorted(weight, key=lambda c: (-weight[c], c)):
        target = min(range(n), key=lambda s: (loads[s], s))
        loads[target] += weight[cid]
        if target == k - 1:
            mine.add(cid)
    return [c for c in checks if c.id in mine]
