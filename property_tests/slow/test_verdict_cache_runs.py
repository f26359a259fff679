"""The verdict cache end to end: real runs over a copy of the installed fla (--kernel-root), each with a cache
folder of its own.  An unchanged rerun replays every verdict; a planted bug in one GDN kernel file reruns exactly
the checks whose workers read that file, and they fail; an edit to a file no check's worker read changes
nothing; a failing verdict replays its message and repro; an interrupted run keeps only what finished; a bisect
step whose tree an earlier step judged reuses its verdicts."""
from __future__ import annotations

import shutil
import signal
import subprocess

from helpers import PATIENCE, load, run_cli, verify_command, wait_for_marker

from pathmdn_verify.platform.mutation import fla_package_dir
from pathmdn_verify.run import verdicts

CHECKS = ("kernel.fla.gdn_chunk.fwd.fp32.typical", "kernel.fla.gdn_recurrent.fwd.fp32.typical",
          "kernel.fla.path_attn.fwd.fp32.beta_uniform", "kernel.fla.mdn_recurrent.fwd.fp32.typical",
          "oracle.fox.vs_path_beta0")
PLANTED = "fla/ops/common/chunk_o.py"           # GDN chunk's output kernel: o scaled by 1.01
OLD = "    b_o = b_o * scale + tl.dot(b_A.to(b_v.dtype), b_v) * scale\n"
NEW = "    b_o = (b_o * scale + tl.dot(b_A.to(b_v.dtype), b_v) * scale) * 1.01\n"


def _run(tmp_path, root, name, *extra):
    out = tmp_path / f"{name}.json"
    args = [a for c in CHECKS for a in ("--id", c)]
    r, doc = run_cli("all", *args, "--profile", "quick", "--device", "cpu", "--kernel-root", root,
                     "--cache-dir", tmp_path / "cache", "--json", out, *extra)
    assert doc is not None, r.stdout[-3000:] + r.stderr[-3000:]
    return r, {c["id"]: c for c in doc["checks"]}


def _cached(checks: dict) -> set[str]:
    return {i for i, c in checks.items() if "cached" in c["details"]}


def test_only_what_a_change_reaches_reruns(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(fla_package_dir(), root / "fla", ignore=shutil.ignore_patterns("__pycache__"))
    r, cold = _run(tmp_path, root, "cold")
    assert r.returncode == 0 and not _cached(cold) and {c["status"] for c in cold.values()} == {"pass"}, r.stdout
    run_label = None
    _, warm = _run(tmp_path, root, "warm")
    assert _cached(warm) == set(CHECKS)
    for i, c in warm.items():
        assert (c["status"], c["kind"], c["measured"]) == (cold[i]["status"], cold[i]["kind"], cold[i]["measured"])
        run_label = run_label or c["details"]["cached"]["run"]
        assert c["details"]["cached"]["run"] == run_label          # the cold run's
    # the control: --no-cache runs them all again
    _, fresh = _run(tmp_path, root, "fresh", "--no-cache")
    assert not _cached(fresh)

    read = {i: verdicts.kept_reads(tmp_path / "cache", i) for i in CHECKS}
    reach = {i for i in CHECKS if PLANTED in read[i]}
    assert "kernel.fla.gdn_chunk.fwd.fp32.typical" in reach
    target = root / PLANTED
    source = target.read_text()
    assert source.count(OLD) == 1
    target.write_text(source.replace(OLD, NEW))
    r, planted = _run(tmp_path, root, "planted")
    assert r.returncode == 1 and set(CHECKS) - _cached(planted) == reach, r.stdout[-3000:]
    assert planted["kernel.fla.gdn_chunk.fwd.fp32.typical"]["status"] == "fail"     # the only one calling it
    _, again = _run(tmp_path, root, "again")          # a failing verdict replays with its message and repro
    assert _cached(again) == set(CHECKS)
    for i in reach:
        assert (again[i]["status"], again[i]["message"], again[i]["repro"]) == (
            planted[i]["status"], planted[i]["message"], planted[i]["repro"])

    target.write_text(source)             # back to the cold run's code: its verdicts again
    _, back = _run(tmp_path, root, "back")
    assert _cached(back) == set(CHECKS) and {c["status"] for c in back.values()} == {"pass"}
    reached = set().union(*read.values())
    never = next(f.relative_to(root).as_posix() for f in sorted((root / "fla" / "ops").rglob("*.py"))
                 if f.relative_to(root).as_posix() not in reached)
    (root / never).write_text((root / never).read_text() + "\n# an edit no check reached\n")
    _, unreached = _run(tmp_path, root, "unreached")
    assert _cached(unreached) == set(CHECKS), never


HANG = """
import functools as _functools, os as _os, time as _time
_entry = fused_recurrent_gated_delta_rule


@_functools.wraps(_entry)
def fused_recurrent_gated_delta_rule(*args, **kwargs):
    marker = "{marker}"
    if _os.path.exists(marker + ".armed"):      # tested, never opened: not an input the cache sees
        with open(marker + ".tmp", "w") as f:
            f.write(str(_os.getpid()))
        _os.replace(marker + ".tmp", marker)
        while True:
            _time.sleep(1)
    return _entry(*args, **kwargs)
"""


def test_an_interrupted_run_keeps_only_what_finished(tmp_path):
    """One worker, the selection's order: the MDN check finishes; the GDN recurrent check's kernel hangs (while
    a trigger file exists) when SIGINT comes; the oracle check never starts.  The rerun, the same code without
    the hang, replays the MDN check and runs the other two: neither the interrupted check nor the unstarted one
    kept anything."""
    root = tmp_path / "tree"
    shutil.copytree(fla_package_dir(), root / "fla", ignore=shutil.ignore_patterns("__pycache__"))
    marker = tmp_path / "hang.started"
    with open(root / "fla" / "ops" / "gated_delta_rule" / "fused_recurrent.py", "a") as f:
        f.write(HANG.replace("{marker}", str(marker)))
    done, kernel, oracle = CHECKS[3], CHECKS[1], CHECKS[4]
    args = ["--id", done, "--id", kernel, "--id", oracle, "--cache-dir", tmp_path / "cache", "--device", "cpu", "--workers", "1",
            "--profile", "quick", "--kernel-root", root]
    (tmp_path / "hang.started.armed").write_text("")
    proc = subprocess.Popen(verify_command("all", *args, "--json", tmp_path / "cut.json"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_marker(marker, proc)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=PATIENCE)
    finally:
        proc.kill()
    assert proc.returncode == 130, rest
    cut = {c["id"]: c for c in load(tmp_path / "cut.json")["checks"]}
    assert [cut[i]["status"] for i in (done, kernel, oracle)] == ["pass", "skip", "skip"], cut
    assert cut[kernel]["kind"] == cut[oracle]["kind"] == "not_run"
    (tmp_path / "hang.started.armed").unlink()
    r, doc = run_cli("all", *args, "--json", tmp_path / "rerun.json")
    again = {c["id"]: c for c in doc["checks"]}
    assert {i for i, c in again.items() if "cached" in c["details"]} == {done}, r.stdout
    assert {c["status"] for c in again.values()} == {"pass"}, r.stdout
