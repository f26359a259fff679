"""`verify report` in its own process: `--compare` (a worsened point is a regression, exit 1; an unchanged pair
exits 0) and bad input (exit 2, one line); the known MDN chunk failure measured (a kernel, in this process)."""
import copy
import json

import pytest
from test_report import run_cli, write_synthetic

from pathmdn_verify.report.sweeps import points


def test_compare_reports_a_worsened_point(tmp_path):
    write_synthetic(tmp_path / "old")
    doc = json.loads((tmp_path / "old" / "report.json").read_text())
    worse = copy.deepcopy(doc)
    pt = next(p for p in worse["points"] if p["id"] == "T.path_attn.fwd.bf16.64")
    pt["tensors"][0]["err_rel"] *= 3
    new = tmp_path / "new.json"
    new.write_text(json.dumps(worse))
    r = run_cli("report", "--compare", str(tmp_path / "old" / "report.json"), str(new), "--out", str(tmp_path / "d"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REGRESSIONS: 1" in r.stdout and "T.path_attn.fwd.bf16.64: error grew 3.0x" in r.stdout
    assert (tmp_path / "d" / "compare.png").is_file() and (tmp_path / "d" / "compare.md").is_file()
    json.loads((tmp_path / "d" / "compare.json").read_text())
    same = run_cli("report", "--compare", str(tmp_path / "old" / "report.json"), str(tmp_path / "old" / "report.json"))
    assert same.returncode == 0 and "REGRESSIONS: 0" in same.stdout


@pytest.mark.parametrize("args,message", [
    (("report", "--workers", "0"), "--workers 0"),
    (("report", "-k", "no_such_point", "--out", "never_written"), "no report point matches"),
    (("report", "--compare", "README.md", "README.md"), "not readable as JSON"),
])
def test_bad_input(args, message):
    r = run_cli(*args)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_measure_catches_the_known_mdn_chunk_failure():
    """The measurement is the checks' comparison: fla's chunk path at log mu = -2, chunk 64 (a listed expected
    failure) is non-finite, while the stable chunk form in fp32 on the same kind of input is accurate."""
    from pathmdn_verify.report.measure import measure
    by_id = {p.id: p for p in points("quick")}
    bad = measure(by_id["mdn_map.mdn_chunk64.fwd.bf16.-2"], "cpu", "tf32")
    good = measure(by_id["mdn_map.stable_chunk64.fwd.fp32.-2"], "cpu", "tf32")
    assert bad["status"] == "fail" and bad["kind"] in ("non_finite", "over_budget")
    assert good["tensors"][0]["err_rel"] < 1e-5
