"""The compile estimate (pathmdn_verify.platform.timing.estimate): a run's Triton compilations counted before it
starts, from the keys its checks used when they last ran (kept beside the verdict cache) less those in Triton's disk
cache.  A key is in the disk cache when its compile finished there (the group file Triton writes last); a folder
without it (a compile that did not finish), another key, or another kernel name is not.  The record keeps each
check's keys from its last run that used any, and a verdict replayed from the cache changes nothing."""
import base64
import hashlib
import json
import os
import subprocess
import sys

from pathmdn_verify.core.registry import Result
from pathmdn_verify.core.results import Outcome
from pathmdn_verify.platform import timing
from pathmdn_verify.run.session import RunOptions, Session


def _key(name: str, seed: str) -> str:
    return f"{name}:{hashlib.sha256(seed.encode()).hexdigest()}"


def _compiled(folder, key: str, done: bool = True) -> None:
    """Triton's disk cache after compiling key (done=False: the key's folder made, the compile unfinished)."""
    name, _, digest = key.rpartition(":")
    sub = folder / base64.b32encode(bytes.fromhex(digest)).decode().rstrip("=")
    sub.mkdir(parents=True)
    if done:
        (sub / f"{name}.cubin").write_bytes(b"\0")
        (sub / f"__grp__{name}.json").write_text(json.dumps({"child_paths": {}}))


def test_the_estimate_counts_the_keys_not_in_the_disk_cache(tmp_path):
    a, b, c, d = (_key("chunk_fwd_kernel", s) for s in "abcd")
    _compiled(tmp_path, a)
    _compiled(tmp_path, b, done=False)
    kept = {"kernel.x.fwd": [a, b], "kernel.x.bwd": [a, c], "kernel.y.fwd": [d]}
    assert timing.estimate(kept, ["kernel.x.fwd", "kernel.x.bwd", "layer.z"], str(tmp_path)) == {
        "keys": 3, "in_disk_cache": 1, "compilations": 2, "unknown": 1}
    assert timing.in_disk_cache(a, str(tmp_path)) and not timing.in_disk_cache(b, str(tmp_path))
    other_name = "other_kernel:" + a.rpartition(":")[2]          # the same hash, another kernel's name
    assert not timing.in_disk_cache(other_name, str(tmp_path)) and not timing.in_disk_cache("k:zz", str(tmp_path))


def test_the_folder_name_is_tritons():
    """The key's folder is named as Triton's FileCacheManager names it (triton.runtime.cache, base32; asked in a
    child process: the unit tier imports no Triton)."""
    digest = hashlib.sha256(b"x").hexdigest()
    triton = subprocess.run([sys.executable, "-c", f"from triton.runtime.cache import _base32; print(_base32({digest!r}))"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert triton.stdout.strip() == base64.b32encode(bytes.fromhex(digest)).decode().rstrip("="), triton.stderr


def test_the_record_keeps_each_checks_last_keys(tmp_path):
    session = Session(RunOptions(ids=("oracle.path.literal_vs_mpmath.uniform",), device="cpu", workers="1",
                                 cache_dir=str(tmp_path / "v")))
    a, b, c = (_key("k", s) for s in "abc")

    def outcome(cid, details):
        return Outcome(cid, "d", Result("pass", details=details), 1.0, "r", started=1.0)
    session._keep_compile_keys([outcome("kernel.x.fwd", {"seconds_in": {"compiled": [a], "loaded": [b]}}),
                                outcome("kernel.x.bwd", {"seconds_in": {"loaded": [c]}}),
                                outcome("oracle.z", {})])                                 # compiles nothing
    assert session._compile_keys() == {"kernel.x.fwd": sorted([a, b]), "kernel.x.bwd": [c], "oracle.z": []}
    session._keep_compile_keys([outcome("kernel.x.fwd", {"seconds_in": {"compiled": [c]}}),
                                outcome("kernel.x.bwd", {"seconds_in": {}}),                      # used none
                                outcome("kernel.y.fwd", {"seconds_in": {"compiled": [a]}, "cached": {}})])  # replayed
    assert session._compile_keys() == {"kernel.x.fwd": [c], "kernel.x.bwd": [c], "oracle.z": []}
    assert (tmp_path / "v" / "compile-keys-cpu-ci.json").is_file()
    assert timing.estimate(session._compile_keys(), ["oracle.z", "kernel.x.bwd", "kernel.new"], str(tmp_path)) == {
        "keys": 1, "in_disk_cache": 0, "compilations": 1, "unknown": 1}       # oracle.z ran: known, no key


def test_the_summary_sets_the_estimate_beside_the_count_made():
    """The summary's compilations line carries the estimate when a run had one, also for a run that compiled and
    loaded nothing; without one the line is as before (and absent when nothing was compiled or loaded)."""
    import io

    from rich.console import Console

    from pathmdn_verify.run import terminal

    def printed(outcomes, estimated=None):
        out = io.StringIO()
        terminal.print_summary(outcomes, Console(file=out, width=400, highlight=False), 1.0, estimated=estimated)
        return [x for x in out.getvalue().splitlines() if x.startswith("Triton compilations")]
    a, b = _key("k", "a"), _key("k", "b")
    ran = [Outcome("kernel.fla.l2norm.fwd.fp32.typical", "d", Result("pass", details={"seconds_in": {"compiled": [a, b],
                                                                            "cache_loads": 1}}), 1.0, "r")]
    line, = printed(ran, estimated=3)
    assert line.startswith("Triton compilations: 2 (") and line.endswith("; 3 estimated before the run")
    assert "estimated" not in printed(ran)[0]
    none = [Outcome("oracle.path.literal_vs_mpmath.uniform", "d", Result("pass", details={}), 1.0, "r")]
    assert printed(none) == [] and printed(none, estimated=0)[0].endswith("; 0 estimated before the run")
