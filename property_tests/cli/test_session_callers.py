"""Every caller runs checks through one library Session (pathmdn_verify.run.session), so each gets its isolation
and its verdict cache: an implementation whose kernel kills its own process (SIGSEGV, as a crashing kernel does)
costs `pv.check` and the pytest plugin that one check, of kind crashed, and the caller goes on to the next check
and returns; a second `pv.check` of the same checks reuses every verdict from the cache (the control: with
cache=False it runs them again)."""
from __future__ import annotations

import json
import subprocess
import sys

CRASHING = '''import os, signal
import pathmdn_verify as pv
from pathmdn_verify.references import path_oracle


def path(q, k, v, w, beta, g=None, cu_seqlens=None, scale=None):
    if os.environ.get("SESSION_TEST_CRASH") and q.dtype == __import__("torch").bfloat16:
        os.kill(os.getpid(), signal.SIGSEGV)            # the bf16 checks' worker dies
    f = lambda t: None if t is None else t.double()
    return path_oracle.path_attn(f(q), f(k), f(v), f(w), f(beta), g=f(g), cu_seqlens=cu_seqlens,
                                 scale=scale, gate_scaled=True).to(q.dtype)


pv.implement("path_attn", path, name="session_crash", fp32_dot="ieee")
'''
IDS = ("kernel.session_crash.path_attn.fwd.bf16.beta_uniform", "kernel.session_crash.path_attn.fwd.fp32.beta_uniform")
CALLER = '''import json, sys
sys.path.insert(0, sys.argv[1])
import session_crash_impl
import pathmdn_verify as pv
runs = [pv.check("session_crash", select="fwd and beta_uniform", device="cpu", workers="1", cache_dir=sys.argv[2],
                 cache=c) for c in (True, True, False)]
print(json.dumps([[(r.id, r.status, r.kind, r.cached) for r in run] for run in runs]))
'''


def _impl(tmp_path):
    (tmp_path / "session_crash_impl.py").write_text(CRASHING)


def test_pv_check_survives_a_crashing_kernel_and_reuses_verdicts(tmp_path):
    _impl(tmp_path)
    proc = subprocess.run([sys.executable, "-c", CALLER, str(tmp_path), str(tmp_path / "verdicts")],
                          capture_output=True, text=True, env={**__import__("os").environ, "SESSION_TEST_CRASH": "1"},
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, again, fresh = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [tuple(r[:3]) for r in first] == [(IDS[0], "fail", "crashed"), (IDS[1], "pass", None)]
    assert [r[3] for r in first] == [False, False]
    assert [(r[1], r[3]) for r in again] == [("fail", False), ("pass", True)]      # a crash is never kept
    assert [r[3] for r in fresh] == [False, False]                                   # the control: cache=False
    kept, = (tmp_path / "verdicts").glob("durations-*.json")     # the start order of the next run, beside the cache
    assert set(json.loads(kept.read_text())) == set(IDS) and all(s > 0 for s in json.loads(kept.read_text()).values())


def test_the_pytest_plugin_survives_a_crashing_kernel(tmp_path):
    _impl(tmp_path)
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--verify-impl",
                           str(tmp_path / "session_crash_impl.py"), "--verify-k", "fwd and beta_uniform",
                           "--verify-device", "cpu", "--verify-workers", "1", "-rA"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900,
                          env={**__import__("os").environ, "SESSION_TEST_CRASH": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "INTERNALERROR" not in out, out[-3000:]
    assert f"FAILED ::pathmdn_verify::{IDS[0]}" in out and "crashed" in out, out[-3000:]
    assert f"PASSED ::pathmdn_verify::{IDS[1]}" in out and "PASSED test_nothing.py::test_nothing" in out, out[-3000:]


RUNTIME = """import pathmdn_verify as pv
from pathmdn_verify.references import path_oracle


def register():
    f = lambda t: None if t is None else t.double()
    pv.implement("path_attn", lambda q, k, v, w, beta, g=None, cu_seqlens=None, scale=None: path_oracle.path_attn(
        f(q), f(k), f(v), f(w), f(beta), g=f(g), cu_seqlens=cu_seqlens, scale=scale, gate_scaled=True).to(q.dtype),
        name="session_runtime", fp32_dot="ieee")
"""
RUNTIME_CALLER = """import sys
sys.path.insert(0, sys.argv[1])
import session_runtime_impl
import pathmdn_verify as pv
from pathmdn_verify.core.errors import UsageError
session_runtime_impl.register()
try:
    pv.check("session_runtime", select="fwd and fp32 and beta_uniform", device="cpu", cache=False)
except UsageError as exc:
    print("usage error:", exc)
[r] = pv.check("session_runtime", select="fwd and fp32 and beta_uniform", device="cpu", workers="0")
print("in this process:", r.status)
"""


def test_an_implementation_registered_at_run_time_is_said_and_runs_in_process(tmp_path):
    """Worker processes import the module that registered an implementation; one registered inside a function is
    not there after that import: a usage error saying so (not a worker that dies unexplained), and workers="0" runs
    it in the caller's process."""
    (tmp_path / "session_runtime_impl.py").write_text(RUNTIME)
    proc = subprocess.run([sys.executable, "-c", RUNTIME_CALLER, str(tmp_path)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage error: a worker process: --impl " in proc.stdout and "registers no implementation" in proc.stdout
    assert "in this process: pass" in proc.stdout
