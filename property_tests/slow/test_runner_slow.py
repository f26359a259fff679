"""The runner, end to end in worker processes: a worker that crashes, hangs or hits a fatal CUDA error costs
only its own check (recorded with its kind) and the run goes on; interrupts write what finished, also under a
flood of signals; a run writes nothing into the current directory but what it was asked to."""
import os
import signal
import subprocess
import sys

import pytest
from helpers import (
    MARKER_ENV,
    PATIENCE,
    gone,
    id_args,
    ignores,
    load,
    run_cli,
    verify_command,
    wait_for,
    wait_for_marker,
)

HYPOTHESIS_SNIPPET = """
from hypothesis import given, settings, strategies as st
settings(max_examples=5, database=None)(given(st.text(max_size=3))(lambda x: None))()
"""


def test_crash_hang_and_fatal_cuda_error_are_recorded_and_the_run_goes_on(planted, tmp_path, monkeypatch):
    """One worker: the abort, the fatal CUDA error and the hang each cost only their own check, and the check
    after the fatal error runs in a fresh worker (it fails in a poisoned one).  Nothing but the JSON asked for
    is written into the current directory (hypothesis' storage would be .hypothesis/ there).

    The hang never returns (it blocks until its worker is killed), so its timeout verdict is certain; its
    marker (outside the run's directory) shows that it was running when the timeout struck.  The other checks
    take milliseconds against the 10 s timeout; their own seconds are asserted below that, so that a run too
    loaded for the margin says so instead of failing as a wrong verdict."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    marker = tmp_path / "hang.started"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    r, doc = run_cli("all", *id_args("pass", "abort", "cuda_fatal", "after_fatal", "hang", "hypothesis"),
                     "--device", "cpu", "--workers", "1", "--check-timeout", "10", "--json", "out.json", cwd=run_dir)
    assert r.returncode == 1 and doc is not None, r.stdout + r.stderr
    got = {c["id"].removeprefix("test.planted."): (c["status"], c["kind"]) for c in doc["checks"]}
    fast = {c["id"]: c["seconds"] for c in doc["checks"] if c["id"] != "test.planted.hang"}
    assert max(fast.values()) < 5, f"a check took half the timeout: the machine is too loaded for this test {fast}"
    assert got == {"pass": ("pass", None), "abort": ("fail", "crashed"), "cuda_fatal": ("fail", "cuda_fatal"),
                   "after_fatal": ("pass", None), "hang": ("fail", "timeout"), "hypothesis": ("pass", None)}
    assert "SIGABRT" in {c["id"]: c for c in doc["checks"]}["test.planted.abort"]["message"]
    assert marker.exists(), "the hang was recorded as a timeout without having run"
    wait_for(lambda: gone(int(marker.read_text())), "the hang's worker ended")
    assert os.listdir(run_dir) == ["out.json"]
    # negative control: the same hypothesis search outside verify does write .hypothesis/ into its cwd
    subprocess.run([sys.executable, "-c", HYPOTHESIS_SNIPPET], cwd=run_dir, check=True,
                   env={k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"})
    assert (run_dir / ".hypothesis").is_dir()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_writes_what_finished_and_marks_the_rest_not_run(planted, tmp_path, monkeypatch, sig, code):
    """One worker: the pass has finished before the hang starts; the signal comes once the hang runs (its
    marker), so the run is interrupted with one check done and one running, every time."""
    out, marker = tmp_path / "out.json", tmp_path / "hang.started"
    out.write_text("stale")
    monkeypatch.setenv(MARKER_ENV, str(marker))
    proc = subprocess.Popen(verify_command("all", *id_args("pass", "hang"), "--device", "cpu", "--workers", "1",
                                           "--json", out, "--cache-dir", tmp_path / "vc"),   # a fresh cache: no kept
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)   # durations, pass first
    try:
        worker = wait_for_marker(marker, proc)
        assert not out.exists()          # the stale result is gone from the start
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=PATIENCE)
    finally:
        proc.kill()
    assert proc.returncode == code, rest
    doc = load(out)
    assert doc["interrupted"] is True
    assert [(c["status"], c["kind"]) for c in doc["checks"]] == [("pass", None), ("skip", "not_run")]
    assert "interrupted after" in rest
    wait_for(lambda: gone(worker), "the hang's worker ended")


def test_signals_after_the_first_are_ignored_until_the_json_is_written(planted, tmp_path, monkeypatch):
    """GNU timeout sends TERM to the command and then to its process group: the run must survive the second
    (and any later) signal while it stops its workers and writes its results.  Measured on an H200 host: two
    of three time-boxed runs lost their JSON to the second TERM (killed by SIGTERM, exit -15).

    In lockstep with the run, not with the clock: the first TERM comes once the hang runs (its marker); the
    flood of TERMs to the whole process group (every 5 ms) starts once the run ignores TERM (its SigIgn mask:
    the handler of the first has run) and goes on until the JSON is written and after.  The JUnit file's
    temporary file is a FIFO that nobody reads yet, so the run, having written its JSON, waits there and cannot
    get to the point where it restores its signal handlers while TERMs still come; the test then opens the FIFO
    and the run ends.  (A TERM that arrived after the handlers were restored would kill it: exit -15.)"""
    out, junit, marker = tmp_path / "out.json", tmp_path / "out.xml", tmp_path / "hang.started"
    fifo = tmp_path / "out.xml.tmp"                  # where pathmdn_verify.core.results.write_junit writes first
    os.mkfifo(fifo)
    monkeypatch.setenv(MARKER_ENV, str(marker))
    proc = subprocess.Popen(verify_command("all", *id_args("pass", "hang"), "--device", "cpu", "--workers", "1",
                                           "--json", out, "--junit", junit),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reader = None
    try:
        wait_for_marker(marker, proc)
        os.kill(proc.pid, signal.SIGTERM)
        wait_for(lambda: ignores(proc.pid, signal.SIGTERM), "the run ignores TERM after the first", proc)
        sent = 0

        def flood():
            nonlocal sent
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                sent += 1
            return out.exists() or proc.poll() is not None
        wait_for(flood, "the JSON was written", poll=0.005)
        assert proc.poll() is None, f"exit {proc.returncode} after {sent} TERMs: " + proc.communicate()[0]
        for _ in range(20):                          # the run is now held at the FIFO, still ignoring TERM
            os.killpg(proc.pid, signal.SIGTERM)
            sent += 1
        assert proc.poll() is None and ignores(proc.pid, signal.SIGTERM) and not junit.exists()
        reader = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)   # never blocks; the run's write goes through
        rest, _ = proc.communicate(timeout=PATIENCE)
    finally:
        proc.kill()
        if reader is not None:
            os.close(reader)
    assert proc.returncode == 143, rest
    assert load(out)["interrupted"] is True
    assert sent > 20 and junit.exists()
