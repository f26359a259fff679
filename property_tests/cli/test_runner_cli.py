"""The runner through the command: three shards merge to the unsharded run; --durations starts the checks
longest first and keeps the report order; an unimportable --kernel-root is one error; --version; a closed pipe
ends a command quietly (141), a run as interrupted with its results written; the fork server's preload imports no
kernel package and leaves a forked process able to use CUDA, and a GPU worker that cannot is a usage error; two
GPUs, two pinned workers (skipped without)."""
import json
import os
import subprocess

import pytest
from helpers import RENDEZVOUS_ENV, id_args, ids, load, run_cli, statuses, verify_command

from pathmdn_verify import cli
from pathmdn_verify.platform import timing


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
           "--device", "cpu", "--workers", "1", "--no-cache"]      # every check starts: none is replayed
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


def test_kernel_root_that_cannot_be_imported_is_one_error(tmp_path):
    (tmp_path / "fla").mkdir()
    (tmp_path / "fla" / "__init__.py").write_text('__version__ = "0.6.0"\nimport no_such_module_for_verify\n')
    out = tmp_path / "out.json"
    r, doc = run_cli("kernels", "-k", "convention", "--device", "cpu", "--kernel-root", tmp_path, "--json", out)
    assert r.returncode == 2 and doc is None and not out.exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path) in lines[0] and "no_such_module_for_verify" in lines[0], r.stderr


def test_a_run_under_a_temporary_folder_too_long_for_a_socket_starts_its_workers(tmp_path):
    """multiprocessing's fork server listens on a socket in a folder of TMPDIR; under a TMPDIR whose path leaves no
    room for it (AF_UNIX: 107 bytes) the run makes that folder in /tmp and its worker starts (before: a traceback,
    OSError: AF_UNIX path too long).  A process of its own: this one's folder is made already."""
    from pathmdn_verify.run.runner import SOCKET_PATH_MAX
    long = tmp_path / ("t" * max(1, SOCKET_PATH_MAX - len(str(tmp_path)) - 20))
    long.mkdir()
    assert len(str(long / "pymp-xxxxxxxx" / "listener-xxxxxxxx")) > SOCKET_PATH_MAX
    out = tmp_path / "out.json"
    r, doc = run_cli("all", "--id", "oracle.fox.vs_path_beta0", "--device", "cpu", "--workers", "1", "--no-cache",
                     "--json", out, env=dict(os.environ, TMPDIR=str(long)), timeout=300)
    assert r.returncode == 0 and doc["checks"][0]["status"] == "pass", r.stdout[-2000:] + r.stderr[-2000:]


def test_version_names_toolkit_and_kernel_package():
    r, _ = run_cli("--version")
    assert r.returncode == 0 and "pathmdn-verify" in r.stdout and "kernel package: fla 0.6.0" in r.stdout


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    """`verify list | head -0`: exit 141 (a shell's status for SIGPIPE) and nothing on stderr, no BrokenPipeError
    traceback; the read end is closed before the command writes, so its first line meets the closed pipe.  The
    control: the same command with its output read is exit 0."""
    read, write = os.pipe()
    os.close(read)
    try:
        r = subprocess.run(verify_command("list", "-k", "spectra"), stdout=write, stderr=subprocess.PIPE, text=True,
                           timeout=120, check=False)
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (141, ""), r.stderr
    control = subprocess.run(verify_command("list", "-k", "spectra"), capture_output=True, text=True, timeout=120)
    assert control.returncode == 0 and "spectra" in control.stdout


def test_a_run_whose_reader_went_away_stops_as_interrupted_and_writes_its_results(tmp_path):
    """`verify all --json out.json | head -0`: the header meets the closed pipe, the run stops as an interrupted
    one (exit 141, nothing on stderr), and the JSON is written: every check not run, "interrupted": true.  The
    control: the same run with its output read runs every check."""
    args = ["symbolic", "-k", "orientation", "--device", "cpu", "--workers", "1", "--no-cache"]
    read, write = os.pipe()
    os.close(read)
    try:
        r = subprocess.run(verify_command(*args, "--json", tmp_path / "gone.json"), stdout=write,
                           stderr=subprocess.PIPE, text=True, timeout=300, check=False)
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (141, ""), r.stderr
    doc = load(tmp_path / "gone.json")
    assert doc["interrupted"] and doc["checks"] and statuses(doc) == {c["id"]: "skip" for c in doc["checks"]}
    assert {c["message"] for c in doc["checks"]} == {"not run: the run was interrupted"}
    control, read_doc = run_cli(*args, "--json", tmp_path / "read.json")
    assert control.returncode == 0 and not read_doc["interrupted"], control.stderr
    assert ids(read_doc) == ids(doc) and set(statuses(read_doc).values()) == {"pass"}


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


def _preload_probe(tmp_path, names) -> list[str]:
    """In a fresh interpreter that imports names: the toolkit's and fla's packages loaded, whether a process forked
    then cannot use CUDA (torch's bad-fork mark), and the packages loaded after importing fla.layers."""
    import os
    import subprocess
    import sys

    import torch
    probe = ("import importlib, os, sys, torch\n"
             "seen = lambda: sorted({m.split('.')[0] for m in sys.modules} & {'fla', 'pathmdn_verify'})\n"
             "[importlib.import_module(n) for n in sys.argv[1:]]\nprint(seen(), flush=True)\n"
             "pid = os.fork()\n"
             "if pid == 0:\n    print(torch.cuda._is_in_bad_fork(), flush=True)\n    os._exit(0)\n"
             "os.waitpid(pid, 0)\nimport fla.layers\nprint(seen())\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"} if not torch.cuda.is_available() else dict(os.environ)
    r = subprocess.run([sys.executable, "-P", "-c", probe, *names], capture_output=True, text=True, cwd=tmp_path,
                       env=env, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split("\n")[:3]


def test_the_preload_imports_no_kernel_package_and_leaves_cuda_usable_in_a_fork(tmp_path):
    """runner.preload(device), what the fork server imports: every name imports (a fork server skips one that does
    not, unsaid), none imports fla or this toolkit (a worker imports them after the fidelity layer), and a process
    forked after it can use CUDA (the workers are forked from the server).  Controls: importing fla.layers next is
    seen; where a GPU is visible, the host preload imported there too leaves the fork unable to use CUDA (every
    worker would fail with "Cannot re-initialize CUDA in forked subprocess").  On a torch
    without CUDA no fork is marked, and the control cannot run."""
    import torch

    from pathmdn_verify.run import runner
    for device in ("cpu", "cuda"):
        assert _preload_probe(tmp_path, runner.preload(device)) == ["[]", "False", "['fla']"], device
    if torch.cuda.is_available():
        assert _preload_probe(tmp_path, runner.PRELOAD + runner.HOST_PRELOAD)[1] == "True"


def test_a_gpu_worker_forked_unable_to_use_cuda_is_a_usage_error(monkeypatch):
    """A worker that starts with torch's bad-fork mark on cuda says so as a usage error (the run stops with that
    one line) instead of failing every check; without the mark, or on the CPU, it says nothing."""
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.run import runner
    monkeypatch.setattr(runner, "_in_bad_fork", lambda: True)
    assert "bad-fork mark" in runner._worker_start(Context(device="cuda"), kernels=False)["usage_error"]
    assert runner._worker_start(Context(device="cpu"), kernels=False)["usage_error"] is None
    monkeypatch.setattr(runner, "_in_bad_fork", lambda: False)
    assert runner._worker_start(Context(device="cuda"), kernels=False)["usage_error"] is None
