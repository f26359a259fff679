"""The verify command: exit codes, selection, JSON/JUnit schema, usage errors."""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from verify import cli, xfails
from verify.registry import Context, Result, register, REGISTRY


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "verify", *args], capture_output=True, text=True)


def test_oracles_json_schema(tmp_path):
    out = tmp_path / "out.json"
    junit = tmp_path / "out.xml"
    r = run_cli("oracles", "-k", "oracle.path.ut", "--device", "cpu", "--json", str(out), "--junit", str(junit))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert set(doc) == {"environment", "checks", "summary"}
    for key in ("python", "numpy", "torch", "triton", "sympy", "mpmath", "hypothesis", "fla", "device_name"):
        assert key in doc["environment"]
    ids = [c["id"] for c in doc["checks"]]
    assert ids and all("oracle.path.ut" in i for i in ids)
    for c in doc["checks"]:
        assert set(c) >= {"id", "status", "measured", "budget", "message", "repro"}
        assert c["status"] == "pass" and c["repro"].startswith("verify all --id " + c["id"])
    assert doc["summary"]["pass"] == len(ids) and doc["summary"]["fail"] == 0
    suite = ET.parse(junit).getroot()
    assert int(suite.get("tests")) == len(ids) and suite.get("failures") == "0"


def test_glob_and_exact_selection(registry):
    from verify.registry import select
    glob = select(["oracle.path.*.negative.*"])
    assert glob and all(".negative." in c.id for c in glob)
    exact = select(None, ["oracle.path.ut_product"])
    assert [c.id for c in exact] == ["oracle.path.ut_product"]


def test_pattern_that_selects_nothing_is_usage_error():
    r = run_cli("oracles", "-k", "no.such.check", "--device", "cpu")
    assert r.returncode == 2
    assert r.stderr.startswith("verify: error:") and "no.such.check" in r.stderr
    assert "Traceback" not in r.stderr


def test_cuda_without_gpu_is_usage_error():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = run_cli("oracles", "--device", "cuda")
    assert r.returncode == 2 and "CUDA" in r.stderr and "Traceback" not in r.stderr


def test_unwritable_json_is_usage_error_and_writes_nothing(tmp_path):
    target = tmp_path / "missing_dir" / "out.json"
    r = run_cli("oracles", "-k", "ut_product", "--device", "cpu", "--json", str(target))
    assert r.returncode == 2 and "--json" in r.stderr
    assert not target.parent.exists()


def test_list_prints_ids_and_descriptions():
    r = run_cli("list", "-k", "oracle.fox")
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines and all(line.startswith("oracle.fox") and len(line.split(None, 1)) == 2 for line in lines)


@pytest.fixture
def planted(registry):
    """Three throwaway checks: one failing, one raising, one failing but listed as expected failure."""
    ids = ["test.planted.fail", "test.planted.error", "test.planted.xfail"]
    register(ids[0], "always fails", lambda ctx: Result("fail", 2.0, 1.0, "planted failure"))
    register(ids[1], "always raises", lambda ctx: 1 / 0)
    register(ids[2], "fails, listed", lambda ctx: Result("fail", 2.0, 1.0, "planted"))
    original = xfails.expected_failures
    xfails.expected_failures = lambda: {ids[2]: {"id": ids[2], "regime": "r", "measured": "2", "cause": "c"}}
    cli.FAMILIES["planted"] = (("test.planted.",), "planted")
    yield ids
    xfails.expected_failures = original
    del cli.FAMILIES["planted"]
    for i in ids:
        del REGISTRY[i]


def test_exit_status_reflects_failures(planted, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert cli.main(["all", "--id", planted[2], "--device", "cpu", "--json", str(out)]) == 0   # xfail only
    assert json.loads(out.read_text())["summary"]["xfail"] == 1
    assert cli.main(["all", "--id", planted[0], "--device", "cpu"]) == 1
    assert cli.main(["all", "--id", planted[1], "--device", "cpu", "--json", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert doc["checks"][0]["status"] == "error" and "ZeroDivisionError" in doc["checks"][0]["message"]
    printed = capsys.readouterr().out
    assert "reproduce: verify all --id test.planted.error" in printed


def test_listed_expected_failure_that_passes_is_flagged(registry):
    from verify import runner
    chk = REGISTRY["oracle.path.ut_product"]
    xf = {chk.id: {"id": chk.id, "regime": "r", "measured": "m", "cause": "c"}}
    rec = runner.run_one(chk, Context(), xf)
    assert rec.result.status == "pass" and "NOT REPRODUCED" in rec.result.message


def test_expected_failure_file_entries_are_complete(registry):
    for cid, entry in xfails.expected_failures().items():
        assert entry["regime"] and entry["measured"] and entry["cause"], cid
        assert cid in registry, f"expected_failures.toml lists {cid}, which is no registered check"


def test_expected_failure_file_rejects_incomplete_and_duplicate_entries(tmp_path):
    from verify.errors import UsageError
    f = tmp_path / "x.toml"
    f.write_text('[[xfail]]\nids = ["a", "b"]\nregime = "r"\nmeasured = "m"\ncause = "c"\n')
    assert set(xfails.expected_failures(f)) == {"a", "b"}
    f.write_text('[[xfail]]\nregime = "r"\nmeasured = "m"\ncause = "c"\n')
    with pytest.raises(UsageError, match="lacks"):
        xfails.expected_failures(f)
    f.write_text('[[xfail]]\nids = ["a", "a"]\nregime = "r"\nmeasured = "m"\ncause = "c"\n')
    with pytest.raises(UsageError, match="twice"):
        xfails.expected_failures(f)


def test_fatal_cuda_error_stops_the_search_and_the_later_checks(registry):
    """A CUDA runtime error poisons the context: the search reports the example that raised it, unshrunk,
    and every later check is an error ('not run'), never a pass or a fail with a meaningless example."""
    from hypothesis import strategies as st
    from rich.console import Console

    from verify import runner
    from verify.search import search
    seen = []

    def evaluate(n):
        seen.append(n)
        if n >= 5:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        raise AssertionError("unreachable: every draw is >= 5")
    register("test.cuda.lost", "raises a fatal CUDA error",
             lambda ctx: search(st.integers(5, 100), evaluate, ctx, "test.cuda.lost", max_examples=20))
    register("test.cuda.after", "would pass", lambda ctx: Result("pass", 0.0, 1.0, "ok"))
    try:
        records = runner.run_checks([REGISTRY["test.cuda.lost"], REGISTRY["test.cuda.after"]], Context(),
                                    Console(quiet=True))
    finally:
        del REGISTRY["test.cuda.lost"], REGISTRY["test.cuda.after"]
    assert len(seen) == 1                                 # stopped at once: no shrinking on a dead context
    first, after = records
    assert first.result.status == "fail" and f"[{seen[0]}]" in first.result.message
    assert "fatal CUDA error" in first.result.message
    assert after.result.status == "error" and "CUDA context was lost" in after.result.message


def test_time_limit_records_the_checks_not_run(tmp_path):
    out = tmp_path / "r.json"
    assert cli.main(["oracles", "-k", "spectra", "--time-limit", "1e-9", "--json", str(out)]) == 0
    statuses = {c["status"] for c in json.loads(out.read_text())["checks"]}
    assert statuses == {"skip"}
    assert cli.main(["oracles", "-k", "spectra", "--time-limit", "0"]) == 2


def test_report_merges_runs_later_wins_and_lists_gaps(registry, tmp_path):
    """verify.report: a later record replaces an earlier one unless it is a skip; a failure listed in
    expected_failures.toml now is shown as xfail, marked; checks of the family without a record are named."""
    from verify import report
    env = {"device": "cuda", "profile": "full", "device_name": "GPU"}
    listed = "kernel.fla.path_attn.bwd.bf16.beta_two"
    rec = lambda cid, st, m=1.0: {"id": cid, "status": st, "measured": m, "budget": 2.0, "message": "x",
                                  "repro": "r", "details": {}}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"environment": env, "checks": [rec("kernel.fla.path_attn.fwd.bf16.beta_two", "fail"),
                                                             rec(listed, "fail")]}))
    b.write_text(json.dumps({"environment": env, "checks": [rec("kernel.fla.path_attn.fwd.bf16.beta_two", "pass", 0.5),
                                                             rec(listed, "skip")]}))
    _, merged = report.merge([str(a), str(b)])
    by_id = {r["id"]: r for r in merged}
    assert by_id["kernel.fla.path_attn.fwd.bf16.beta_two"]["status"] == "pass"
    assert by_id[listed]["status"] == "xfail" and by_id[listed]["listed_after_run"]
    md = report.markdown(env, merged)
    assert "(listed after the run)" in md and "Not measured in these runs" in md
    assert "`kernel.fla.path_attn.fwd.fp32.beta_two`" in md.split("Not measured")[1]
    (tmp_path / "bad.json").write_text("{}")
    assert report.main([str(tmp_path / "bad.json"), "--markdown", str(tmp_path / "o.md")]) == 2
