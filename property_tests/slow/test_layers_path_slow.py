"""The PaTH and FoX layer checks end to end: a planted decode bug in a copy of fla is caught."""
from helpers import by_id, run_cli

from pathmdn_verify.platform.mutation import materialize
from pathmdn_verify.layers import load


def test_a_planted_decode_bug_is_caught(tmp_path):
    """The decode mode's gate convention flipped in a copy of fla: the generation check turns red."""
    m = next(m for r in load().values() for m in r.mutants if m.name == "layer_fox_decode_gate_scaled")
    root = materialize(m, tmp_path / "root")
    _, doc = run_cli("layers", "--id", m.killers[0], "--profile", "quick", "--workers", "1", "--kernel-root", root,
                     "--json", tmp_path / "out.json")
    assert by_id(doc)[m.killers[0]]["status"] == "fail"
