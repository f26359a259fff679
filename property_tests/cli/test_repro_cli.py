"""`verify repro` end to end on cheap checks: the bundle of a failing check's own example, whose repro.py (run here,
fla's MDN chunk path being PyTorch code) measures what the toolkit measured and exits 1, and 0 when its budgets
allow the error (the control); an example that passes here is refused and leaves nothing; --needs-gpu writes one
anyway, which exits 77 on a CPU; a bf16 Triton kernel's bundle is marked for a GPU by itself; an example that
fails only by an out-of-bounds access (which fla alone makes unchecked) is refused."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from pathmdn_verify import cli
from pathmdn_verify.repro.make import BF16_ON_CPU


def repro(*argv: str) -> int:
    return cli.main(["repro", *argv, "--profile", "quick", "--device", "cpu"])


def run_script(folder) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, folder / "repro.py"], capture_output=True, text=True, timeout=600)


def test_a_bundle_measures_what_the_toolkit_measured(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert repro("kernel.fla.mdn_chunk16.fwd.bf16.logmu_floor", "--out", str(out)) == 0
    assert "wrote" in capsys.readouterr().out
    doc = json.loads((out / "bundle.json").read_text())
    measured = {t["name"]: t["ratio"] for t in doc["measured"]["tensors"]}
    done = run_script(out)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"EXCEEDS o: rel {doc['measured']['tensors'][0]['err_rel']:.3g}" in done.stdout
    assert f"{measured['o']:.3g}x the budget" in done.stdout and doc["needs_gpu"] is None
    for t in doc["tensors"]:                               # the control: budgets that allow any finite error
        t["rel"], t["abs"] = 1e30, 1e30
    (out / "bundle.json").write_text(json.dumps(doc))
    done = run_script(out)
    assert done.returncode == 0 and "PASS: every tensor within its budget" in done.stdout, done.stdout


def test_an_example_that_passes_here_is_refused(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert repro("kernel.fla.mdn_recurrent.fwd.fp32.typical", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "passes on cpu" in err and "nothing to reproduce" in err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the bundle runs (exit 1 or 0), not 77")
def test_a_gpu_bundle_is_written_from_a_passing_example_and_says_so(tmp_path):
    out = tmp_path / "bundle"
    assert repro("kernel.fla.mdn_recurrent.fwd.fp32.typical", "--needs-gpu", "an NVIDIA H200, for the test",
                 "--out", str(out)) == 0
    assert json.loads((out / "bundle.json").read_text())["measured"]["kind"] is None      # it passed here
    done = run_script(out)
    assert done.returncode == 77 and "needs an NVIDIA GPU (an NVIDIA H200, for the test)" in done.stdout


def test_a_bf16_triton_bundle_is_marked_for_a_gpu(tmp_path):
    out = tmp_path / "bundle"
    assert repro("kernel.fla.path_attn.fwd.bf16.magnitude", "--case", "T=160 logit_gain=100000.0 seed=0",
                 "--out", str(out)) == 0
    doc = json.loads((out / "bundle.json").read_text())
    assert doc["needs_gpu"] == BF16_ON_CPU and doc["measured"]["kind"] == "non_finite"
    assert "triton-lang/triton#11584" in (out / "ISSUE.md").read_text()


def test_an_out_of_bounds_example_is_refused(tmp_path, capsys):
    """Its failure is the toolkit's bounds check's (fidelity part bounds); fla alone would access past dv unchecked."""
    from pathlib import Path
    saved = Path(__file__).resolve().parents[2] / "docs" / "evidence" / "path_bwd_gate_weak_T63.pt"
    out = tmp_path / "bundle"
    assert repro("kernel.fla.path_attn.bwd.fp32.gate_weak", "--inputs", str(saved), "--out", str(out)) == 2
    assert "out-of-bounds access that only the toolkit's bounds check sees" in capsys.readouterr().err
    assert not out.exists()
