"""fla's own GDN chunk kernel registered as a second implementation (docs/examples/fla_gdn_impl.py) runs beside the
built-in one in one run: its checks draw the same cases and measure the same numbers, and fla's expected failures
are fla's alone (the same defect of the second implementation fails)."""
from pathlib import Path

from helpers import by_id, run_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fla_gdn_impl.py"


def test_a_second_implementation_beside_the_default(tmp_path):
    ids = ["kernel.fla.gdn_chunk.fwd.bf16.gate_near1", "kernel.fla_gdn.gdn_chunk.fwd.bf16.gate_near1"]
    r, doc = run_cli("kernels", "--impl", "fla", "--impl", EXAMPLE, *(a for i in ids for a in ("--id", i)),
                     "--device", "cpu", "--json", tmp_path / "run.json")
    assert r.returncode == 0 and doc is not None, r.stdout[-3000:] + r.stderr[-2000:]
    fla, mine = (by_id(doc)[i] for i in ids)
    assert fla["status"] == mine["status"] == "pass"
    assert fla["details"]["cases"] == mine["details"]["cases"]
    assert (fla["measured"], fla["budget"]) == (mine["measured"], mine["budget"])
    assert "implementations: fla (fp32 dots: tf32" in r.stdout and "fla_gdn (fp32 dots: tf32, declared)" in r.stdout
    assert f"--impl {EXAMPLE}" in mine["repro"]
