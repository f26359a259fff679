"""Workers that die hard never stall a run: a worker that exits at once, one killed by SIGKILL, one that kills the
fork server it came from, and one that stops the fork server (SIGSTOP: it never answers again, as a fork server
stuck beside a broken GPU) each cost only their own check (kind crashed), with one worker and with two, the verdict
cache on and off, and the checks after them pass; SIGTERM while the run waits on the stopped fork server ends it
within 5 s with its partial result and no traceback."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from helpers import MARKER_ENV, PATIENCE, id_args, load, verify_command, wait_for_marker

EXPECTED = {"pass": ("pass", None), "exit": ("fail", "crashed"), "sigkill": ("fail", "crashed"),
            "kill_server": ("fail", "crashed"), "hypothesis": ("pass", None), "odd_seeds": ("pass", None)}


def _left_running(tag: str) -> list[int]:
    """The processes (Linux /proc) whose environment holds tag: what a run started and left behind."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if tag.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
    return found


def _run(tmp_path, names, *args) -> tuple[subprocess.CompletedProcess, dict, float]:
    """The run, and then no process it started still running (a worker of a fork server a check killed outlived
    the run once, holding its stdout: the run had ended, its caller waited on the pipe)."""
    out, tag = tmp_path / "out.json", f"PV_RUN_TAG={uuid.uuid4().hex}"
    t0 = time.monotonic()
    with open(tmp_path / "stdout", "w") as o, open(tmp_path / "stderr", "w") as e:   # files: a process left
        proc = subprocess.run(verify_command("all", *id_args(*names), "--device", "cpu", "--json", out, *args),
                              stdout=o, stderr=e, text=True, timeout=PATIENCE,   # holding a pipe would hide here
                              env={**os.environ, "PV_RUN_TAG": tag.split("=", 1)[1]})
    proc.stdout, proc.stderr = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    until = time.monotonic() + 5
    while (left := _left_running(tag)) and time.monotonic() < until:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the run still running after it ended: {left}"
    doc = load(out) if out.exists() else None
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, {c["id"].removeprefix("test.planted."): (c["status"], c["kind"]) for c in doc["checks"]}, \
        time.monotonic() - t0


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("cache", ["on", "off"])
def test_workers_that_die_hard_cost_only_their_check(planted, tmp_path, workers, cache):
    args = ["--cache-dir", tmp_path / "verdicts"] if cache == "on" else ["--no-cache"]
    proc, got, _ = _run(tmp_path, EXPECTED, "--workers", workers, "--check-timeout", "60", *args)
    assert proc.returncode == 1 and got == EXPECTED, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_fork_server_that_never_answers_costs_its_check_and_the_run_goes_on(planted, tmp_path):
    """A stopped fork server neither reaps the worker that died (its exit is never reported: the check ends at its
    timeout, here 20 s) nor answers for its replacement: past the spawn deadline (the check timeout) the server is
    killed and the workers are spawned instead."""
    names = ("pass", "stop_server", "hypothesis", "odd_seeds")
    proc, got, seconds = _run(tmp_path, names, "--workers", "2", "--check-timeout", "20")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert got == {"pass": ("pass", None), "stop_server": ("fail", "timeout"), "hypothesis": ("pass", None),
                   "odd_seeds": ("pass", None)}
    assert seconds < 150 and "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_the_run_waits_on_a_stopped_fork_server_ends_it_within_5_s(planted, tmp_path, monkeypatch,
                                                                                  sig, code):
    out, marker = tmp_path / "out.json", tmp_path / "server.stopped"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    proc = subprocess.Popen(verify_command("all", *id_args("pass", "stop_server", "hypothesis"), "--device", "cpu",
                                           "--workers", "1", "--check-timeout", "120", "--json", out,
                                           "--cache-dir", tmp_path / "vc"),     # no kept durations: pass runs first
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_marker(marker, proc)
        time.sleep(2)                          # its worker is gone; the replacement waits on the stopped server
        t0 = time.monotonic()
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=PATIENCE)
        seconds = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == code and seconds < 5, (seconds, rest[-3000:])
    assert "Traceback" not in rest, rest[-3000:]
    doc = load(out)
    assert doc["interrupted"] is True and doc["checks"][0]["status"] == "pass"
