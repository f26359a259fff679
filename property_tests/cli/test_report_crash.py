"""`verify report` measures its points in the runner's workers: a point whose kernel kills its worker is a
failing point of kind crashed, and the report goes on (the other points measured, exit 0)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema

from pathmdn_verify.report import document

HERE = Path(__file__).resolve().parent
PLUGINS = HERE.parent / "plugins"


def test_a_crashing_point_is_a_point_of_kind_crashed(tmp_path):
    env = dict(os.environ, VERIFY_EXTRA_CHECKS="crashing_op",
               PYTHONPATH=os.pathsep.join(p for p in (str(HERE), str(PLUGINS), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "pathmdn_verify", "report", "--device", "cpu", "--out", "rep",
                           "-k", "T.toy_crash_at_64.fwd.fp32"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    jsonschema.validate(doc, json.loads(document.SCHEMA_FILE.read_text()))
    by_x = {p["nominal"]: p for p in doc["points"]}
    assert sorted(by_x) == [16, 64, 160]
    crashed = by_x[64]
    assert (crashed["status"], crashed["kind"]) == ("fail", "crashed"), crashed
    assert "SIGSEGV" in crashed["message"]
    assert all(by_x[T]["status"] == "pass" and by_x[T]["tensors"] for T in (16, 160))   # the others measured
