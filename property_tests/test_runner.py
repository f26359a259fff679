"""The runner: checks run in worker processes; a worker that crashes, hangs or hits a fatal CUDA error costs
only its own check (recorded with its kind) and the run goes on; shards merge to the unsharded result;
interrupts write what finished; a run writes nothing into the current directory but what it was asked to."""
import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import (
    MARKER_ENV,
    PATIENCE,
    RENDEZVOUS_ENV,
    gone,
    id_args,
    ids,
    ignores,
    load,
    run_cli,
    statuses,
    verify_command,
    wait_for,
    wait_for_marker,
)

from pathmdn_verify import cli
from pathmdn_verify.platform import timing
from pathmdn_verify.core.registry import Check
from pathmdn_verify.run.runner import next_startable, shard, start_order

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


def test_shards_merge_to_the_unsharded_run(planted, tmp_path):
    """Three shards (balanced by the unsharded run's durations) merge to the unsharded run's ids and statuses
    and exit status; two workers give the selection's order."""
    sel = ["-k", "oracle.fox or oracle.path.ut or test.planted.pass or test.planted.fail", "--device", "cpu"]
    whole = tmp_path / "whole.json"
    assert cli.main(["all", *sel, "--workers", "2", "--json", str(whole)]) == 1
    from pathmdn_verify.core.registry import select
    expected = [c.id for c in select(sel[1:2])]
    assert ids(load(whole)) == expected
    parts = [str(tmp_path / f"s{k}.json") for k in (1, 2, 3)]
    for k, part in enumerate(parts, 1):
        cli.main(["all", *sel, "--shard", f"{k}/3", "--durations", str(whole), "--json", part])
    shard_ids = [set(ids(load(p))) for p in parts]
    assert all(shard_ids) and sum(map(len, shard_ids)) == len(set().union(*shard_ids)) == len(expected)
    merged = tmp_path / "all.json"
    assert cli.main(["merge", *parts, "--json", str(merged), "--junit", str(tmp_path / "all.xml")]) == 1
    assert statuses(load(merged)) == statuses(load(whole))


def test_durations_order_the_start_and_keep_the_report_order(planted, tmp_path, capsys):
    """`--durations FILE` without --shard: with one worker the checks start longest first by the file's seconds
    (the console's start lines say so: the planted checks start within one millisecond), and the results keep
    the selection's order and statuses."""
    sel = ["--id", "test.planted.pass", "--id", "test.planted.fail", "--id", "oracle.fox.vs_path_beta0",
           "--device", "cpu", "--workers", "1"]
    whole = tmp_path / "whole.json"
    assert cli.main(["all", *sel, "--json", str(whole)]) == 1
    doc = load(whole)
    for c, seconds in zip(doc["checks"], (1.0, 2.0, 3.0)):       # the last selected is the "longest"
        c["seconds"] = seconds
    timing.reset()      # what a check records where Triton compiles (a GPU run): compile keys among its seconds
    timing._spent["kernel"] += 0.5
    timing._compiled.append("double:9ba1b98")
    doc["checks"][0]["details"]["seconds_in"] = timing.spent()
    timing.reset()
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps(doc))
    ordered = tmp_path / "ordered.json"
    capsys.readouterr()
    assert cli.main(["all", *sel, "--durations", str(durations), "--json", str(ordered)]) == 1
    started = [line.split()[-1] for line in capsys.readouterr().out.splitlines() if "] start " in line]
    out = load(ordered)
    assert ids(out) == ids(doc) and statuses(out) == statuses(doc)
    assert started == [ids(doc)[2], ids(doc)[1], ids(doc)[0]], started
    bad = tmp_path / "bad.json"       # valid JSON, not a result: a usage error (exit 2), not a traceback
    bad.write_text("{}")
    assert cli.main(["all", *sel, "--durations", str(bad)]) == 2


def test_shard_is_deterministic_and_balanced_by_duration():
    checks = [Check(f"c{i:02d}", "d", lambda ctx: None) for i in range(10)]
    durations = {"c00": 9.0, **{f"c{i:02d}": 1.0 for i in range(1, 10)}}
    shards = [shard(checks, k, 3, durations) for k in (1, 2, 3)]
    assert sorted(c.id for s in shards for c in s) == [c.id for c in checks]       # a partition
    assert [c.id for c in shards[0]] == ["c00"]                                      # the long one alone
    assert [len(s) for s in shards] == [1, 5, 4]
    assert shards == [shard(checks, k, 3, durations) for k in (1, 2, 3)]
    assert [len(shard(checks, k, 3)) for k in (1, 2, 3)] == [4, 3, 3]                # by id: round robin


def test_start_order_is_longest_first():
    """On a GPU without durations: layer generation checks, kernel backward fp32, then bf16, then the other
    kernel checks, the other layer checks, the rest, each tier round-robin over op groups; with a previous run's
    durations: by them (unknown: the median); on the CPU without durations: the selection's order."""
    names = ["oracle.path.x", "kernel.fla.path_attn.fwd.bf16.a", "kernel.fla.path_attn.bwd.bf16.b",
             "kernel.fla.path_attn.bwd.fp32.c", "layer.fla.path.base.bf16.train", "kernel.fla.gdn_chunk.bwd.fp32.a",
             "kernel.fla.path_attn.bwd.fp32.d", "kernel.fla.gdn_chunk.fwd.bf16.a", "layer.fla.fox.base.fp32.generation"]
    checks = [Check(n, "d", lambda ctx: None) for n in names]
    assert start_order(checks, "cuda") == [8, 3, 5, 6, 2, 1, 7, 4, 0]
    assert start_order(checks, "cpu") == list(range(9))
    durations = {"oracle.path.x": 9.0, "kernel.fla.path_attn.fwd.bf16.a": 1.0, "kernel.fla.path_attn.bwd.bf16.b": 5.0}
    assert start_order(checks, "cpu", durations) == [0, 2, 3, 4, 5, 6, 7, 8, 1]     # 5 (the median) for the others
    assert start_order(checks, "cuda", durations) == start_order(checks, "cpu", durations)


def test_autotune_warm_up_holds_back_an_ops_other_checks():
    """Under --configs autotune on a GPU, an op's other checks wait while its first check (which times the op's
    configs into Triton's cache) runs; other ops go on."""
    names = ["kernel.fla.path_attn.fwd.bf16.a", "kernel.fla.path_attn.bwd.fp32.b", "kernel.fla.path_attn.fwd.bf16.c",
             "kernel.fla.mdn_chunk16.fwd.bf16.a", "oracle.path.x", "oracle.path.y"]
    checks = [Check(n, "d", lambda ctx: None) for n in names]
    path, mdn = "kernel.fla.path_attn", "kernel.fla.mdn_chunk16"
    assert next_startable([1, 5, 2], checks, {path: 0}) == 5                 # path_attn waits, oracle.path not
    assert next_startable([1, 2], checks, {path: 0, mdn: 3}) is None         # nothing else: wait
    assert next_startable([0, 1], checks, {path: 0}) == 0                    # a rerun of the first check itself
    assert next_startable([1, 2], checks, {mdn: 3}) == 1


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_writes_what_finished_and_marks_the_rest_not_run(planted, tmp_path, monkeypatch, sig, code):
    """One worker: the pass has finished before the hang starts; the signal comes once the hang runs (its
    marker), so the run is interrupted with one check done and one running, every time."""
    out, marker = tmp_path / "out.json", tmp_path / "hang.started"
    out.write_text("stale")
    monkeypatch.setenv(MARKER_ENV, str(marker))
    proc = subprocess.Popen(verify_command("all", *id_args("pass", "hang"), "--device", "cpu", "--workers", "1",
                                           "--json", out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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


def test_kernel_root_that_cannot_be_imported_is_one_error(tmp_path):
    (tmp_path / "fla").mkdir()
    (tmp_path / "fla" / "__init__.py").write_text('__version__ = "0.6.0"\nimport no_such_module_for_verify\n')
    out = tmp_path / "out.json"
    r, doc = run_cli("kernels", "-k", "convention", "--device", "cpu", "--kernel-root", tmp_path, "--json", out)
    assert r.returncode == 2 and doc is None and not out.exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path) in lines[0] and "no_such_module_for_verify" in lines[0], r.stderr


def test_version_names_toolkit_and_kernel_package():
    r, _ = run_cli("--version")
    assert r.returncode == 0 and "pathmdn-verify" in r.stdout and "kernel package: fla 0.6.0" in r.stdout


@pytest.mark.skipif(not __import__("torch").cuda.device_count() >= 2, reason="needs two GPUs")
def test_two_gpus_two_workers_each_pinned(planted, tmp_path, monkeypatch):
    """Each of the two checks waits for the other to start (planted_checks.py), so they run at once, in two
    workers, whatever the timing."""
    out, meet = tmp_path / "gpu.json", tmp_path / "meet"
    meet.mkdir()
    monkeypatch.setenv(RENDEZVOUS_ENV, str(meet))
    assert cli.main(["all", *id_args("gpu.a", "gpu.b"), "--device", "cuda", "--workers", "auto", "--json", str(out)]) == 0
    doc = load(out)
    assert doc["environment"]["workers"] >= 2 and {c["message"] for c in doc["checks"]} == {"0", "1"}
