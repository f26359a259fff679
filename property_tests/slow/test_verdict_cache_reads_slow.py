"""What a verdict is kept with is what its check read, seen two independent ways, on checks drawn at random:

* every Python file whose code ran during the checks (coverage's tracer, started after the audit hook) is among the
  files the hook reported (pathmdn_verify.platform.reads), so no executed file is missing from a verdict's key;
* for a verdict kept by a real run, a change to any one file it was kept with (hypothesis draws the file) makes
  its entry stale, and a change to a file it was not kept with (the control) does not."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings, strategies as st

from helpers import by_id, run_cli

from pathmdn_verify.run import verdicts

TRACE = """
import json, sys
from pathmdn_verify.platform import reads
reads.install()
import coverage
cov = coverage.Coverage(data_file=None, config_file=False, include=["*"])
cov.start()
from pathmdn_verify.core.registry import REGISTRY, Context
from pathmdn_verify.run import load_checks, runner
load_checks()
read = set()
for cid in sys.argv[2:]:
    out = runner.execute(REGISTRY[cid], Context(device="cpu", profile="quick"))
    assert out.result.status != "error", (cid, out.result.message)
    read.update(out.reads[1])
cov.stop()
executed = [f for f in cov.get_data().measured_files()]
json.dump({"read": sorted(read), "executed": sorted(executed)}, open(sys.argv[1], "w"))
"""


def _drawn(seed: int) -> list[str]:
    """Two cheap oracle or proof checks and one fast kernel check of each recurrence, drawn with a fixed seed."""
    from pathmdn_verify.core.registry import REGISTRY
    from pathmdn_verify.run import load_checks
    load_checks()
    rng = random.Random(seed)
    cheap = sorted(i for i in REGISTRY if i.startswith(("oracle.path.", "oracle.mdn.")) and "mpmath" not in i)
    kernels = sorted(i for i in REGISTRY if i.startswith(("kernel.fla.gdn_recurrent.fwd.fp32.",
                                                           "kernel.fla.mdn_recurrent.fwd.fp32.")))
    return rng.sample(cheap, 2) + rng.sample(kernels, 1)


def test_every_executed_file_is_among_the_reads(tmp_path):
    ids = _drawn(seed=20261206)
    out = tmp_path / "trace.json"
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    proc = subprocess.run([sys.executable, "-c", TRACE, str(out), *ids], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    read = {os.path.realpath(f) for f in doc["read"]}
    executed = {os.path.realpath(f) for f in doc["executed"] if Path(f).is_file()}
    assert len(executed) > 100 and any("/fla/" in f for f in executed), (ids, len(executed))
    assert executed <= read, (ids, sorted(executed - read)[:20])


CHECKS = ("oracle.path.literal_vs_mpmath.uniform", "kernel.fla.gdn_recurrent.fwd.fp32.typical")


def test_an_edit_to_any_file_a_kept_verdict_read_makes_it_stale(tmp_path):
    r, doc = run_cli("all", *(a for c in CHECKS for a in ("--id", c)), "--profile", "quick", "--device", "cpu",
                     "--workers", "1", "--cache-dir", tmp_path / "cache", "--json", tmp_path / "run.json")
    assert r.returncode == 0 and {c["status"] for c in by_id(doc).values()} == {"pass"}, r.stdout[-3000:]
    import importlib.util
    root = Path(importlib.util.find_spec("fla").origin).resolve().parent.parent     # not imported here
    entries = {c: verdicts.kept_entry(tmp_path / "cache", c) for c in CHECKS}
    names = {c: sorted(verdicts.kept_reads(tmp_path / "cache", c)) for c in CHECKS}
    assert all(len(n) > 500 for n in names.values())

    def lists(edited: str) -> verdicts.ReadLists:
        """The run's read lists, seen where `edited` has other contents than it was kept with."""
        out = verdicts.ReadLists(tmp_path / "cache" / "reads", float("inf"))
        path = root / edited if not os.path.isabs(edited) else Path(edited)
        out.digests[path] = "0" * 64
        return out

    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(st.sampled_from(CHECKS), st.data())
    def stale(check, data):
        edited = data.draw(st.sampled_from(names[check]))
        assert lists(edited).match(entries[check]["reads"], root) is False
        unread = str(tmp_path / "not-read.py")                      # the control: a file it was not kept with
        assert lists(unread).match(entries[check]["reads"], root) is True

    stale()
