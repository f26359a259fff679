"""The verify command on planted checks and small selections: the result JSON and JUnit, the exit status with
expected failures, a passing check's message with -v only, --time-limit, -x."""
import json
import xml.etree.ElementTree as ET

import pytest
from helpers import id_args, ids, load, run_cli

from pathmdn_verify import cli
from pathmdn_verify.run import xfail_list as xfails


def test_oracles_json_schema(tmp_path):
    out = tmp_path / "out.json"
    junit = tmp_path / "out.xml"
    r, doc = run_cli("oracles", "-k", "oracle.path.ut", "--device", "cpu", "--json", out, "--junit", junit)
    assert r.returncode == 0 and doc is not None, r.stdout + r.stderr
    assert doc["schema_version"] == 1 and doc["interrupted"] is False and doc["command"][1:3] == ["oracles", "-k"]
    assert doc["toolkit"]["name"] == "pathmdn-verify" and doc["kernel_package"] is None   # no kernel check ran
    for key in ("python", "numpy", "torch", "triton", "sympy", "mpmath", "hypothesis", "device_name", "workers"):
        assert key in doc["environment"]
    got = ids(doc)
    assert got and all("oracle.path.ut" in i for i in got)
    for c in doc["checks"]:
        assert set(c) >= {"id", "status", "kind", "measure", "measured", "budget", "message", "repro", "started",
                          "seconds"}
        assert c["status"] == "pass" and c["repro"].startswith("verify all --id " + c["id"])
    assert doc["summary"]["pass"] == len(got) and doc["summary"]["fail"] == 0
    suite = ET.parse(junit).getroot()
    assert int(suite.get("tests")) == len(got) and suite.get("failures") == "0"


@pytest.fixture
def listed(planted, monkeypatch, tmp_path):
    """test.planted.xfail listed as an expected failure (an entry naming two ids: one finding)."""
    listing = tmp_path / "expected_failures.toml"
    listing.write_text('[[xfail]]\nids = ["test.planted.xfail", "test.planted.nonfinite"]\n'
                       'kinds = ["over_budget", "non_finite"]\nregime = "r"\nmeasured = "2"\ncause = "c"\n')
    monkeypatch.setattr(xfails, "EXPECTED_FAILURES_FILE", listing)


def test_exit_status_reflects_failures(listed, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert cli.main(["all", "--id", "test.planted.xfail", "--id", "test.planted.nonfinite", "--device", "cpu",
                     "--json", str(out)]) == 0    # expected failures only
    doc = json.loads(out.read_text())
    nonfinite = {c["id"]: c for c in doc["checks"]}["test.planted.nonfinite"]
    assert doc["summary"]["xfail"] == 2 and nonfinite["measured"] is None    # inf: null, with its kind
    assert nonfinite["kind"] == "non_finite" and nonfinite["details"]["worst_ratio"] is None
    printed = capsys.readouterr().out
    assert "2 expected failure(s), 1 finding(s)" in printed       # one recap line for an entry of two ids
    assert cli.main(["all", "--id", "test.planted.fail", "--device", "cpu"]) == 1
    assert cli.main(["all", "--id", "test.planted.error", "--device", "cpu", "--json", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert doc["checks"][0]["status"] == "error" and "ZeroDivisionError" in doc["checks"][0]["message"]
    assert doc["checks"][0]["kind"] == "check_error"
    printed = capsys.readouterr().out
    assert "reproduce: verify all --id test.planted.error" in printed


def test_message_of_a_passing_check_only_with_verbose(planted, capsys):
    """test.planted.pass says 'ok' (its message): shown with -v only; the short line has the ratio."""
    assert cli.main(["all", "--id", "test.planted.pass", "--device", "cpu"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if "pass  test.planted.pass" in x]
    assert line and "ratio 0.5" in line[0] and "    ok" not in capsys.readouterr().out
    assert cli.main(["all", "--id", "test.planted.pass", "--device", "cpu", "-v"]) == 0
    assert "    ok" in capsys.readouterr().out


def test_time_limit_records_the_checks_not_run(tmp_path):
    out = tmp_path / "r.json"
    assert cli.main(["oracles", "-k", "spectra", "--time-limit", "1e-9", "--json", str(out)]) == 0
    checks = load(out)["checks"]
    assert checks and {(c["status"], c["kind"]) for c in checks} == {("skip", "not_run")}
    assert cli.main(["oracles", "-k", "spectra", "--time-limit", "0"]) == 2


def test_exitfirst_starts_no_check_after_a_failure(listed, tmp_path):
    """-x (one worker, registry order pass, fail, xfail): the check after the failure is not run (kind
    not_run, saying why); expected failures do not stop the run; without -x every check runs (the control)."""
    out = tmp_path / "r.json"

    def run(*args):
        code = cli.main(["all", *args, "--workers", "1", "--device", "cpu", "--json", str(out)])
        return code, {c["id"].removeprefix("test.planted."): (c["status"], c["kind"]) for c in load(out)["checks"]}
    code, got = run(*id_args("pass", "fail", "xfail"), "-x")
    assert code == 1 and got["fail"][0] == "fail" and got["xfail"] == ("skip", "not_run")
    assert "--exitfirst" in load(out)["checks"][2]["message"]
    code, got = run(*id_args("xfail", "nonfinite", "pass"), "-x")     # registry order: pass, xfail, nonfinite
    assert code == 0 and [s for s, _ in got.values()] == ["pass", "xfail", "xfail"]
    code, got = run(*id_args("pass", "fail", "xfail"))
    assert code == 1 and got["xfail"][0] == "xfail"
