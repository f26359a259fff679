"""The verify command: exit codes, selection, JSON/JUnit schema, usage errors."""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from verify import cli
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
    from verify import runner
    ids = ["test.planted.fail", "test.planted.error", "test.planted.xfail"]
    register(ids[0], "always fails", lambda ctx: Result("fail", 2.0, 1.0, "planted failure"))
    register(ids[1], "always raises", lambda ctx: 1 / 0)
    register(ids[2], "fails, listed", lambda ctx: Result("fail", 2.0, 1.0, "planted"))
    original = runner.expected_failures
    runner.expected_failures = lambda: {ids[2]: {"id": ids[2], "regime": "r", "measured": "2", "cause": "c"}}
    cli.FAMILIES["planted"] = (("test.planted.",), "planted")
    yield ids
    runner.expected_failures = original
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


def test_expected_failure_file_entries_are_complete():
    from verify import runner
    for cid, entry in runner.expected_failures().items():
        assert entry["regime"] and entry["measured"] and entry["cause"], cid
