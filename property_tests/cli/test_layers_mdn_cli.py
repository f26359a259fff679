"""The MDN layer checks through `verify layers` at the quick profile: a convention check passes on fla, the fp32
refusal is a listed finding."""
from helpers import run_cli


def test_a_convention_passes_and_the_fp32_refusal_is_a_listed_finding(tmp_path):
    ok, bad = "layer.fla.mdn.neg-eig.fp32.convention-neg-eigval", "layer.fla.mdn.default.fp32.backward"
    r, doc = run_cli("layers", "--id", ok, "--id", bad, "--profile", "quick", "--device", "cpu", "--workers", "1",
                     "--json", tmp_path / "r.json")
    assert doc is not None, r.stderr[-2000:]
    got = {c["id"]: c for c in doc["checks"]}
    assert got[ok]["status"] == "pass", got[ok]["message"]
    assert got[ok]["details"]["alternative_ratio"] > 10
    assert got[bad]["status"] == "xfail" and got[bad]["kind"] == "exception", got[bad]["message"]
    assert "does not support float32" in got[bad]["message"]
