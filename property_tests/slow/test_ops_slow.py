"""The op table drives every command, end to end: the sanitizer replays gdn_* and decode checks clean, and a toy
op defined outside the toolkit (plugins/toy_op.py: one record, one `declare`) gets list, kernels, compare,
localize, coverage, report and a mutant that kills it, without touching any other file."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pathmdn_verify import ops
from pathmdn_verify.core import examples
from pathmdn_verify.platform.mutation import materialize

PLUGINS = Path(__file__).parents[1] / "plugins"
TOY = "kernel.fla.toy_scalar_gate"


@pytest.mark.parametrize("check_id, case", [
    ("kernel.fla.gdn_chunk.fwd.fp32.typical", "T=70 Dk=32 Dv=32 H=2 initial_state=True seed=3"),
    ("kernel.fla.path_attn.decode.fp32.beta_uniform", "T=70 HQ=2 H=1 cu_seqlens=(0, 30, 70) seed=3")])
def test_the_sanitizer_replays_gdn_and_decode_checks_clean(check_id, case, tmp_path):
    op = ops.record(check_id)
    examples.save(examples.from_label(op, "fp32", case), tmp_path / "x.pt")
    proc = subprocess.run([sys.executable, "-m", "pathmdn_verify", "localize", "--id", check_id, "--device", "cpu", "--sanitize",
                           "--inputs", str(tmp_path / "x.pt"), "--json", str(tmp_path / "out.json")],
                          capture_output=True, text=True)
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["sanitizer"]["status"] == "clean", proc.stdout[-2000:] + proc.stderr[-2000:]


def _verify(tmp_path, *args, env_extra=None):
    env = dict(os.environ, VERIFY_EXTRA_CHECKS="toy_op",
               PYTHONPATH=os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "pathmdn_verify", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    return proc


@pytest.fixture
def toy_declared_here_only():
    """The toy op's declaration (its import below) is undone after the test: the op table and the check registry
    are this process's, which later tests share (pytest-xdist)."""
    from pathmdn_verify.core.registry import REGISTRY
    table, checks = dict(ops.OPS), dict(REGISTRY)
    yield
    ops.OPS.clear(), ops.OPS.update(table)
    REGISTRY.clear(), REGISTRY.update(checks)
    sys.modules.pop("toy_op", None)


def test_a_toy_op_gets_every_command_from_its_record_alone(tmp_path, toy_declared_here_only):
    listed = _verify(tmp_path, "list", "-k", "toy_scalar_gate")
    assert listed.returncode == 0, listed.stderr
    ids = [line.split()[0] for line in listed.stdout.splitlines()]
    assert ids == [f"{TOY}.{p}.{d}.decay" for p in ("fwd", "bwd") for d in ("bf16", "fp32")]
    mutants = _verify(tmp_path, "mutants", "--list", "-k", "toy_scalar_gate")      # a command's, not checks
    assert mutants.returncode == 0 and "mutant.toy_scalar_gate_gate_scaled" in mutants.stdout, mutants.stderr

    run = _verify(tmp_path, "kernels", "-k", "toy_scalar_gate", "--profile", "quick", "--workers", "1",
                  "--json", "k.json")
    doc = json.loads((tmp_path / "k.json").read_text())
    assert run.returncode == 0 and [c["status"] for c in doc["checks"]] == ["pass"] * 4, run.stdout[-3000:]

    sys.path.insert(0, str(PLUGINS))
    try:
        import toy_op
    finally:
        sys.path.remove(str(PLUGINS))
    from pathmdn_verify.ops.attention_ops import PathCase
    case = PathCase(T=70, D=32, Dv=16, HQ=2, H=1, seed=4)
    examples.save(toy_op.make_inputs(case, toy_op.torch.float32), tmp_path / "x.pt")
    compared = _verify(tmp_path, "compare", "--op", "toy_scalar_gate", "--inputs", "x.pt", "--device", "cpu")
    assert compared.returncode == 0 and "pass" in compared.stdout, compared.stdout + compared.stderr

    localized = _verify(tmp_path, "localize", "--id", f"{TOY}.fwd.fp32.decay", "--device", "cpu", "--inputs", "x.pt",
                        "--json", "loc.json")
    loc = json.loads((tmp_path / "loc.json").read_text())
    assert localized.returncode == 0 and [s["stage"] for s in loc["stages"]] == ["output"], localized.stdout

    covered = _verify(tmp_path, "coverage", "--id", f"{TOY}.fwd.fp32.decay", "--profile", "quick", "--json", "cov.json")
    cov = json.loads((tmp_path / "cov.json").read_text())
    assert covered.returncode == 0 and list(cov["ops"]) == ["toy_scalar_gate"], covered.stdout[-3000:]
    assert cov["ops"]["toy_scalar_gate"]["executed"] > 0

    reported = _verify(tmp_path, "report", "--profile", "quick", "-k", "toy_scalar_gate and fwd and fp32",
                       "--device", "cpu", "--workers", "1", "--out", "rep")
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert reported.returncode == 0 and rep["points"], reported.stdout[-2000:] + reported.stderr[-2000:]
    assert all(pt["id"].split(".")[1] == "toy_scalar_gate" and pt["status"] == "pass" for pt in rep["points"])

    # the toy's mutant applies to the installed kernels and its killer turns red on it (green above)
    mutant = ops.mutants().get("toy_scalar_gate_gate_scaled") or toy_op.TOY.mutants[0]
    root = materialize(mutant, tmp_path / "mutant")
    killed = _verify(tmp_path, "kernels", "--id", mutant.killers[0], "--profile", "quick", "--workers", "1",
                     "--kernel-root", str(root), "--json", "m.json")
    assert killed.returncode == 1 and json.loads((tmp_path / "m.json").read_text())["checks"][0]["status"] == "fail"
