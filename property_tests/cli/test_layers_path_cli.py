"""The PaTH and FoX layer checks through `verify layers` at the quick profile: a check passes on fla, the two PaTH
findings fail as listed."""
from helpers import by_id, run_cli

PASSING, MASK_FINDING, QKNORM_FINDING = ("layer.fla.fox.base.fp32.generation", "layer.fla.path.base.fp32.mask",
                                        "layer.fla.path.qknorm.fp32.generation")


def test_a_check_passes_and_the_path_findings_fail(tmp_path):
    _, doc = run_cli("layers", "--id", PASSING, "--id", MASK_FINDING, "--id", QKNORM_FINDING, "--profile", "quick",
                     "--workers", "1", "--json", tmp_path / "out.json")
    rec = by_id(doc)
    assert rec[PASSING]["status"] == "pass"
    assert rec[MASK_FINDING]["status"] == "xfail" and "TypeError" in rec[MASK_FINDING]["message"]
    assert rec[QKNORM_FINDING]["status"] == "xfail" and rec[QKNORM_FINDING]["measured"] > 0.1
