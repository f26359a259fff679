"""runner.Workers.map: tasks that are not checks (a picklable function and its arguments) run in the check
workers with their isolation: a task whose worker dies or hangs comes back as a Lost (crashed, timeout), the
slot gets a fresh worker and the other tasks run; values come back in the order of the tasks."""
import operator
import os
import tempfile
import time

from pathmdn_verify.core.registry import Context
from pathmdn_verify.run.runner import Lost, Workers


def test_a_crash_and_a_hang_cost_only_their_task():
    tasks = [(operator.add, (1, 2)), (os._exit, (3,)), (time.sleep, (60,)), (operator.mul, (4, 5)),
             (os.getpid, ())]
    started, ended = [], []
    pool = Workers(1, Context(device="cpu"), kernels=False)
    try:
        pool.wait_ready()
        t0 = time.monotonic()
        values = pool.map(tasks, timeout=5.0, on_start=started.append, on_done=lambda i, v: ended.append(i))
        seconds = time.monotonic() - t0
    finally:
        pool.close()
    assert values[0] == 3 and values[3] == 20
    assert isinstance(values[1], Lost) and values[1].kind == "crashed" and "exit code 3" in values[1].message
    assert isinstance(values[2], Lost) and values[2].kind == "timeout" and "5 s" in values[2].message
    assert seconds < 50                               # the hang was cut at its timeout, not slept out
    assert values[4] != os.getpid()                   # in a worker, never in this process
    assert started == ended == [0, 1, 2, 3, 4]        # one worker: each task ends before the next starts


def test_an_exception_of_a_task_is_raised():
    pool = Workers(1, Context(device="cpu"), kernels=False)
    try:
        pool.wait_ready()
        try:
            pool.map([(operator.truediv, (1, 0))], timeout=60.0)
        except ZeroDivisionError:
            pass
        else:
            raise AssertionError("the task's exception was not raised")
    finally:
        pool.close()


def test_a_worker_uses_the_temporary_folder_of_the_process_that_started_it_now(tmp_path, monkeypatch):
    """Each worker's tempfile folder is TMPDIR as the process that started the Workers has it then, not the
    one the fork server cached when it started (importing dynamo reads it): the second pool, started under
    another TMPDIR, forks from the same server."""
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        monkeypatch.setenv("TMPDIR", str(folder))
        pool = Workers(1, Context(device="cpu"), kernels=False)
        try:
            pool.wait_ready()
            [got] = pool.map([(tempfile.gettempdir, ())], timeout=60.0)
        finally:
            pool.close()
        assert got == str(folder), name


def _environ_of(pid: int) -> dict[str, str]:
    """The environment process pid was started with, once it runs multiprocessing's fork server (before its
    exec /proc shows its parent's)."""
    deadline = time.monotonic() + 60
    while b"forkserver" not in open(f"/proc/{pid}/cmdline", "rb").read():
        assert time.monotonic() < deadline, "the fork server did not start"
        time.sleep(0.01)
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(e.decode().partition("=")[::2] for e in f.read().split(b"\0") if e)


def test_the_fork_server_started_early_serves_its_worker_count_and_is_replaced_for_another():
    """runner.start_fork_server (a run starts it before reading the kernel tree and the verdict cache): Workers of
    the count it was started for fork from it; Workers of another count (another session's), whose thread limits
    differ, fork from a server started with theirs (control: the early server's own environment holds the limits
    of its count)."""
    from pathmdn_verify.run import runner
    two, one = runner._slot_environ("cpu", 2), runner._slot_environ("cpu", 1)
    runner._stop_fork_server()                    # one an earlier test in this process started
    for n in (2, 1):
        runner.start_fork_server("cpu", 2)
        early = runner._fork_server_pid()
        assert {k: v for k, v in _environ_of(early).items() if k in two} == two     # the control
        pool = Workers(n, Context(device="cpu"), kernels=False)
        try:
            pool.wait_ready()
            parents = pool.map([(os.getppid, ())] * 2, timeout=120.0)
        finally:
            pool.close()
        server = runner._fork_server_pid()
        assert set(parents) == {server}
        if n == 2:
            assert server == early
        else:
            assert server != early and two != one
            assert not any(k in _environ_of(server) for k in two if k not in one)
        runner._stop_fork_server()


def test_a_fork_server_no_workers_took_is_stopped_with_its_session(tmp_path):
    """A run that starts no worker (every verdict replayed) stops the fork server it started early, which would
    hold the process's stdout and stderr for a reader waiting on their end (control: the first run's workers took
    it, and it runs on after that run); a usage error while a session plans starts none."""
    from pathmdn_verify.core.errors import UsageError
    from pathmdn_verify.run import runner
    from pathmdn_verify.run.session import RunOptions, Session
    options = RunOptions(ids=("symbolic.path.cross_block",), device="cpu", profile="quick", workers="1",
                         cache_dir=str(tmp_path))
    for replayed in (False, True):
        runner._stop_fork_server()
        result = Session(options).run()
        assert [o.result.status for o in result.outcomes] == ["pass"]
        assert ("cached" in result.outcomes[0].result.details) == replayed
        assert (runner._fork_server_pid() is None) == replayed
    runner._stop_fork_server()
    try:
        Session(RunOptions(ids=("no.such.check",), device="cpu", workers="1"))
    except UsageError:
        pass
    else:
        raise AssertionError("an unknown id was taken")
    assert runner._fork_server_pid() is None
