"""The runner: checks run in worker processes; a worker that crashes, hangs or hits a fatal CUDA error costs
only its own check (recorded with its kind) and the run goes on; shards merge to the unsharded result;
interrupts write what finished; a run writes nothing into the current directory but what it was asked to."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from verify import cli, results
from verify.registry import Check
from verify.runner import interleaved, next_startable, shard

HYPOTHESIS_SNIPPET = """
from hypothesis import given, settings, strategies as st
settings(max_examples=5, database=None)(given(st.text(max_size=3))(lambda x: None))()
"""


def verify(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "verify", *args], capture_output=True, text=True, cwd=cwd)


def ids(*names):
    return [a for n in names for a in ("--id", f"test.planted.{n}")]


def test_crash_hang_and_fatal_cuda_error_are_recorded_and_the_run_goes_on(planted, tmp_path):
    """One worker: the abort, the fatal CUDA error and the hang each cost only their own check, and the check
    after the fatal error runs in a fresh worker (it fails in a poisoned one).  Nothing but the JSON asked for
    is written into the current directory (hypothesis' storage would be .hypothesis/ there)."""
    r = verify("all", *ids("pass", "abort", "cuda_fatal", "after_fatal", "hang", "hypothesis"), "--device", "cpu",
               "--workers", "1", "--check-timeout", "10", "--json", "out.json", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = results.parse((tmp_path / "out.json").read_text())
    got = {c["id"].removeprefix("test.planted."): (c["status"], c["kind"]) for c in doc["checks"]}
    assert got == {"pass": ("pass", None), "abort": ("fail", "crashed"), "cuda_fatal": ("fail", "cuda_fatal"),
                   "after_fatal": ("pass", None), "hang": ("fail", "timeout"), "hypothesis": ("pass", None)}
    assert "SIGABRT" in {c["id"]: c for c in doc["checks"]}["test.planted.abort"]["message"]
    assert os.listdir(tmp_path) == ["out.json"]
    # negative control: the same hypothesis search outside verify does write .hypothesis/ into its cwd
    subprocess.run([sys.executable, "-c", HYPOTHESIS_SNIPPET], cwd=tmp_path, check=True,
                   env={k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"})
    assert (tmp_path / ".hypothesis").is_dir()


def test_shards_merge_to_the_unsharded_run(planted, tmp_path):
    """Three shards (balanced by the unsharded run's durations) merge to the unsharded run's ids and statuses
    and exit status; two workers give the selection's order."""
    sel = ["-k", "oracle.fox or oracle.path.ut or test.planted.pass or test.planted.fail", "--device", "cpu"]
    whole = tmp_path / "whole.json"
    assert cli.main(["all", *sel, "--workers", "2", "--json", str(whole)]) == 1
    from verify.registry import select
    expected = [c.id for c in select(sel[1:2])]
    assert [c["id"] for c in json.loads(whole.read_text())["checks"]] == expected
    parts = [str(tmp_path / f"s{k}.json") for k in (1, 2, 3)]
    for k, part in enumerate(parts, 1):
        cli.main(["all", *sel, "--shard", f"{k}/3", "--durations", str(whole), "--json", part])
    shard_ids = [{c["id"] for c in json.loads(open(p).read())["checks"]} for p in parts]
    assert all(shard_ids) and sum(map(len, shard_ids)) == len(set().union(*shard_ids)) == len(expected)
    merged = tmp_path / "all.json"
    assert cli.main(["merge", *parts, "--json", str(merged), "--junit", str(tmp_path / "all.xml")]) == 1
    status = lambda path: {c["id"]: c["status"] for c in json.loads(open(path).read())["checks"]}
    assert status(merged) == status(whole)


def test_shard_is_deterministic_and_balanced_by_duration():
    checks = [Check(f"c{i:02d}", "d", lambda ctx: None) for i in range(10)]
    durations = {"c00": 9.0, **{f"c{i:02d}": 1.0 for i in range(1, 10)}}
    shards = [shard(checks, k, 3, durations) for k in (1, 2, 3)]
    assert sorted(c.id for s in shards for c in s) == [c.id for c in checks]       # a partition
    assert [c.id for c in shards[0]] == ["c00"]                                      # the long one alone
    assert [len(s) for s in shards] == [1, 5, 4]
    assert shards == [shard(checks, k, 3, durations) for k in (1, 2, 3)]
    assert [len(shard(checks, k, 3)) for k in (1, 2, 3)] == [4, 3, 3]                # by id: round robin


def test_gpu_start_order_spreads_ops_and_lets_each_ops_first_check_warm_up():
    """On a GPU, checks start round-robin over op groups, and an op's other checks wait while its first
    check (which compiles and autotunes the op's kernels into Triton's cache) runs; other ops go on."""
    names = ["kernel.fla.path_attn.fwd.bf16.a", "kernel.fla.path_attn.bwd.fp32.b", "kernel.fla.path_attn.fwd.bf16.c",
             "kernel.fla.mdn_chunk16.fwd.bf16.a", "oracle.path.x", "oracle.path.y"]
    checks = [Check(n, "d", lambda ctx: None) for n in names]
    assert interleaved(checks) == [0, 3, 4, 1, 5, 2]
    path, mdn = "kernel.fla.path_attn", "kernel.fla.mdn_chunk16"
    assert next_startable([1, 5, 2], checks, {path: 0}) == 5                 # path_attn waits, oracle.path not
    assert next_startable([1, 2], checks, {path: 0, mdn: 3}) is None         # nothing else: wait
    assert next_startable([0, 1], checks, {path: 0}) == 0                    # a rerun of the first check itself
    assert next_startable([1, 2], checks, {mdn: 3}) == 1


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_writes_what_finished_and_marks_the_rest_not_run(planted, tmp_path, sig, code):
    out = tmp_path / "out.json"
    out.write_text("stale")
    proc = subprocess.Popen([sys.executable, "-m", "verify", "all", *ids("pass", "hang"), "--device", "cpu",
                             "--workers", "1", "--json", str(out)],     # one worker: pass ends before hang starts
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:         # not a terminal: a line when each check starts
        seen.append(line)
        if "start test.planted.hang" in line:
            break
    assert not out.exists()          # the stale result is gone from the start
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == code, "".join(seen) + rest
    doc = results.parse(out.read_text())
    assert doc["interrupted"] is True
    assert [(c["status"], c["kind"]) for c in doc["checks"]] == [("pass", None), ("skip", "not_run")]
    assert "interrupted after" in rest


def test_signals_after_the_first_are_ignored_until_the_json_is_written(planted, tmp_path):
    """GNU timeout sends TERM to the command and then to its process group: the run must survive the second
    (and any later) signal while it stops its workers and writes its results.  Measured on an H200 host: two
    of three time-boxed runs lost their JSON to the second TERM (killed by SIGTERM, exit -15)."""
    out = tmp_path / "out.json"
    proc = subprocess.Popen([sys.executable, "-m", "verify", "all", *ids("pass", "hang"), "--device", "cpu",
                             "--workers", "1", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in proc.stdout:
        if "start test.planted.hang" in line:
            break
    os.kill(proc.pid, signal.SIGTERM)
    while proc.poll() is None and not out.exists():      # and again, every 5 ms, until the JSON is written
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.005)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, rest
    assert results.parse(out.read_text())["interrupted"] is True


def test_kernel_root_that_cannot_be_imported_is_one_error(tmp_path):
    (tmp_path / "fla").mkdir()
    (tmp_path / "fla" / "__init__.py").write_text('__version__ = "0.6.0"\nimport no_such_module_for_verify\n')
    out = tmp_path / "out.json"
    r = verify("kernels", "-k", "convention", "--device", "cpu", "--kernel-root", str(tmp_path), "--json", str(out))
    assert r.returncode == 2 and not out.exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path) in lines[0] and "no_such_module_for_verify" in lines[0], r.stderr


def test_version_names_toolkit_and_kernel_package():
    r = verify("--version")
    assert r.returncode == 0 and "pathmdn-verify" in r.stdout and "kernel package: fla 0.6.0" in r.stdout


@pytest.mark.skipif(not __import__("torch").cuda.device_count() >= 2, reason="needs two GPUs")
def test_two_gpus_two_workers_each_pinned(planted, tmp_path):
    out = tmp_path / "gpu.json"
    assert cli.main(["all", *ids("gpu.a", "gpu.b"), "--device", "cuda", "--workers", "auto", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["environment"]["workers"] >= 2 and {c["message"] for c in doc["checks"]} == {"0", "1"}
