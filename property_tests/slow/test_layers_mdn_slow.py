"""The MDN layer checks end to end: a planted gate bug in a copy of fla turns its killer red."""
import pytest
from helpers import load, run_cli

from pathmdn_verify.platform.mutation import materialize
from pathmdn_verify.layers import mdn_layers as layers_mdn


@pytest.mark.parametrize("name", ["layer_mdn_alpha_without_max"])
def test_a_planted_gate_bug_turns_its_killer_red(name, tmp_path):
    m = {m.name: m for m in layers_mdn.MDN_MUTANTS}[name]
    root = materialize(m, tmp_path / "tree")
    r, doc = run_cli("layers", "--id", m.killers[0], "--kernel-root", root, "--profile", "quick", "--device", "cpu",
                     "--workers", "1", "--json", tmp_path / "m.json")
    assert doc is not None, r.stderr[-2000:]
    c = doc["checks"][0]
    assert c["status"] == "fail" and c["kind"] == "over_budget", c["message"]
    assert load(tmp_path / "m.json")["checks"][0]["id"] == m.killers[0]
