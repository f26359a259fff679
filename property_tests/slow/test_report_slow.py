"""`verify report` end to end: the report folder on a -k subset of the quick profile (report.md, PNGs,
report.json valid against its schema), and spawned workers measure what the process itself measures."""
import json

import jsonschema
from test_report import SCHEMA, images_exist, run_cli

from pathmdn_verify.report.sweeps import points


def test_quick_subset_writes_report(tmp_path):
    """The real command on the CPU, on a -k subset that keeps the test short (the whole quick profile is the
    same code over more points)."""
    out = tmp_path / "rep"
    r = run_cli("report", "--profile", "quick", "--device", "cpu", "--out", str(out), "-k", "T.forgetting_attn.fwd",
                "-k", "mdn_map.stable_chunk16", "-k", "mdn_map.mdn_recurrent", "-k", "state.path_attn.fwd.fp32.16")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "report.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert {p["plot"] for p in doc["points"]} == {"T", "mdn_map", "state"}
    assert {"T_forgetting_attn.png", "mdn_map.png", "state_tracking.png"} <= set(images_exist(out))
    fox = [p for p in doc["points"] if p["plot"] == "T"]
    assert all(p["status"] == "pass" and 0 < p["tensors"][0]["err_rel"] < 1e-2 for p in fox)
    assert doc["environment"]["interpreter_fidelity"]["fp32_dot"] == "tf32"


def test_workers_give_the_same_records():
    """Spawned workers measure exactly what the process itself measures, in the order of the points."""
    from pathmdn_verify.report.measure import run_points
    pts = [p for p in points("quick") if p.op in ("stable_chunk16", "log_chunk16")][:3]
    seen = []
    one, facts_one = run_points(pts, "cpu", "tf32", 1, lambda p, finished: seen.append((p.id, finished)))
    two, facts_two = run_points(pts, "cpu", "tf32", 2, lambda p, finished: None)
    assert seen == [(p.id, f) for p in pts for f in (False, True)]
    assert facts_one["interpreter_fidelity"] == facts_two["interpreter_fidelity"] is not None   # from the workers
    strip = lambda recs: [{k: v for k, v in r.items() if k != "seconds"} for r in recs]   # noqa: E731
    assert strip(one) == strip(two) and [r["id"] for r in two] == [p.id for p in pts]
