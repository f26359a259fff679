"""`verify localize` names the stage where a planted bug sits: a copy of fla with one mutant (one wrong line
in one stage; an op record's or one here) is localized to exactly that stage, and the unmodified kernels
(PaTH forward and backward, MDN chunk forward) to none.
Each run is `verify localize` (--kernel-root for a mutant) on a saved example, in this process: its stages run
in a fresh worker, which installs the CPU interpreter's fidelity layer before it imports the tree's fla."""
import getpass
import json
import os
import subprocess
import sys
import tempfile

import pytest
from helpers import run_cli
from test_localize import BWD, MDN, PATH

from pathmdn_verify import ops
from pathmdn_verify.core import examples as example
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.platform.mutation import Mutant, materialize
from pathmdn_verify.ops import mutants as _mutants

MUTANTS = _mutants()
DELTA_DROPPED = Mutant("path_bwd_delta_dropped", "PaTH backward: in-block dA = P .* dP without the - delta term",
                       "ops/path_attn/intra_chunk_preprocess_bwd_prepare.py",
                       "b_dA = ((b_dp - delta[:, None]) * b_A_softmax * scale)", "b_dA = (b_dp * b_A_softmax * scale)", ())


def localize(tmp_path, check_id, case, mutant=None):
    """`verify localize` of check_id on the example `case`, in fla or in a copy with `mutant` planted."""
    return run_localize(tmp_path, check_id, case, mutant and materialize(MUTANTS.get(mutant, mutant), tmp_path / "root"))


def run_localize(tmp_path, check_id, case, root=None):
    """(the process, its JSON document) of `verify localize` (helpers.run_cli: in this process) on a saved
    example, with the tree `root` as --kernel-root when given.  The run's temporary folder is one of its own,
    which it must leave empty (the saved example for the sanitizer too)."""
    x = example.build(ops.record(check_id), CheckId.parse(check_id).dtype, case, "cpu")
    inputs, out = tmp_path / "x.pt", tmp_path / "out.json"
    example.save(x, inputs)
    args = ["localize", "--id", check_id, "--device", "cpu", "--inputs", inputs, "--json", out]
    if root:
        args += ["--kernel-root", root]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR",        # torch's cache stays where it was (its default)
                              os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"))
    proc, doc = run_cli(*args, env=dict(os.environ, TMPDIR=str(tmp), TORCHINDUCTOR_CACHE_DIR=inductor))
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not list(tmp.iterdir()), list(tmp.iterdir())
    return proc, doc


@pytest.mark.parametrize("check_id, case", [PATH, MDN, BWD], ids=["path", "mdn", "path-bwd"])
def test_unmodified_kernels_localize_nothing(tmp_path, check_id, case):
    proc, doc = localize(tmp_path, check_id, case)
    assert proc.returncode == 0 and doc["first_divergent"] is None and doc["status"] == "pass", proc.stdout
    assert len({r["stage"] for r in doc["stages"]}) >= 8 and all(r["ratio"] <= 1 for r in doc["stages"])
    assert "no stage leaves its budget" in proc.stdout


@pytest.mark.parametrize("check_id, case, mutant, stage", [
    (*PATH, "path_householder_reversed", "Qbar"),                 # U^T for U in the in-block query transform
    (*PATH, "path_transition_ut_untransposed", "F (block transition)"),   # w2 = U^T W: invisible in o with a gate
    (*MDN, "mdn_mu_cumsum_off_by_one", "log gates"),
    (*MDN, "mdn_gamma_diag_deleted", "Gamma^-"),
    (*BWD, DELTA_DROPPED, "bwd: in-block dA, dv, dg"),
], ids=lambda p: p.name if isinstance(p, Mutant) else p if isinstance(p, str) and not p.startswith("kernel") else None)
def test_planted_bug_is_localized_to_its_stage(tmp_path, check_id, case, mutant, stage):
    assert_localized(*localize(tmp_path, check_id, case, mutant), stage)


def assert_localized(proc, doc, stage: str) -> None:
    """localize failed at `stage`, every stage before it within its budget."""
    assert proc.returncode == 1 and doc["status"] == "fail", proc.stdout + proc.stderr[-2000:]
    assert doc["first_divergent"]["stage"] == stage, proc.stdout
    first = [r["stage"] for r in doc["stages"]].index(stage)
    assert all(r["verdict"] == "within" for r in doc["stages"][:first])
    assert f"first divergent stage: {stage}" in proc.stdout


def test_example_from_the_checks_search(tmp_path):
    """--seed reruns the check's search and localizes the example it reports (a label rebuilt exactly)."""
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "pathmdn_verify", "localize", "--id", MDN[0], "--device", "cpu",
                           "--profile", "quick", "--examples", "1", "--seed", "2", "--json", str(out)],
                          capture_output=True, text=True)
    doc = json.loads(out.read_text())
    assert proc.returncode == 0 and "seed=" in doc["example"] and doc["first_divergent"] is None, proc.stdout
