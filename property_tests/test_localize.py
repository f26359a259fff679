"""`verify localize` names the stage where a planted bug sits: a copy of fla with one mutant (one wrong line
in one stage; an op record's or one here) is localized to exactly that stage, and the unmodified kernels
(PaTH forward and backward, MDN chunk forward) to none.
Each run is a fresh `verify localize --kernel-root` subprocess on a saved example, so the CPU interpreter's
fidelity layer is installed before fla's kernels are imported."""
import json
import subprocess
import sys

import pytest

from pathmdn_verify import cli, ops
from pathmdn_verify.core import examples as example
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.platform.mutation import Mutant, materialize
from pathmdn_verify.ops import mutants as _mutants
from pathmdn_verify.ops.attention_ops import PathCase
from pathmdn_verify.ops.mdn_ops import MdnCase

MUTANTS = _mutants()

pytestmark = pytest.mark.slow     # end to end: subprocesses over copies of fla (the slow tier)

# T = 160 spans three PaTH key blocks (BS = 64) and two query blocks (BT = 128); no gate, which would hide
# the long-range logits.  MDN: chunk 16 (the chunk size fla's log-form coefficients survive in bf16), 3 chunks.
PATH = ("kernel.fla.path_attn.fwd.fp32.beta_uniform", PathCase(T=160, HQ=2, H=1, seed=3))
MDN = ("kernel.fla.mdn_chunk16.fwd.bf16.initial_state", MdnCase(T=40, H=2, initial_state=True, seed=3))
# The backward at T = 70: two key blocks, so the cross-block kernels have work; a gate, so dg is judged.
BWD = ("kernel.fla.path_attn.bwd.fp32.beta_uniform", PathCase(T=70, gate="mixed", seed=5))
DELTA_DROPPED = Mutant("path_bwd_delta_dropped", "PaTH backward: in-block dA = P .* dP without the - delta term",
                       "ops/path_attn/intra_chunk_preprocess_bwd_prepare.py",
                       "b_dA = ((b_dp - delta[:, None]) * b_A_softmax * scale)", "b_dA = (b_dp * b_A_softmax * scale)", ())


def localize(tmp_path, check_id, case, mutant=None, *extra):
    x = example.build(ops.record(check_id), CheckId.parse(check_id).dtype, case, "cpu")
    inputs, out = tmp_path / "x.pt", tmp_path / "out.json"
    example.save(x, inputs)
    cmd = [sys.executable, "-m", "pathmdn_verify", "localize", "--id", check_id, "--device", "cpu", "--inputs", str(inputs),
           "--json", str(out), *extra]
    if mutant:
        cmd += ["--kernel-root", str(materialize(MUTANTS.get(mutant, mutant), tmp_path / "root"))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


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
    proc, doc = localize(tmp_path, check_id, case, mutant)
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


def test_case_labels_round_trip():
    case = PathCase(T=100, D=32, HQ=4, H=2, beta="near2_2", logit_gain=4.0, cu_seqlens=(0, 19, 33, 100), seed=2069)
    assert example.case_from_label(PathCase, case.label()) == case
    assert example.case_from_label(MdnCase, MdnCase(T=1, alpha="near1", initial_state=True).label()).initial_state


def test_save_label_writes_the_checks_own_inputs(tmp_path):
    """The runner's way to save a faulting example: by the label the check reported."""
    op = ops.record("kernel.fla.path_attn.bwd.bf16.beta_uniform")
    case = PathCase(T=5, D=32, Dv=32, HQ=2, H=2, gate="mixed", seed=4)
    example.save(example.from_label(op, "bf16", case.label()), tmp_path / "x.pt")
    saved, built = example.load(str(tmp_path / "x.pt"), op, "bf16", "cpu"), example.build(op, "bf16", case, "cpu")
    assert all(built[n] is None and saved[n] is None or built[n].equal(saved[n]) for n in built)


@pytest.mark.parametrize("argv, says", [
    (["--id", "kernel.fla.nope.fwd.bf16.x"], "no op 'nope'"),
    (["--id", "kernel.fla.path_attn.fwd.bf16.no_such_regime", "--device", "cpu"], "no such check"),
    (["--id", "kernel.my_impl.path_attn.fwd.fp32.typical"], "not supported for implementation my_impl"),
    (["--id", PATH[0], "--inputs", "/nonexistent.pt", "--device", "cpu"], "no such file"),
    (["--id", PATH[0], "--examples", "0"], "must be at least 1"),
])
def test_bad_input_is_exit_2_with_one_line(argv, says, capsys):
    assert cli.main(["localize", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
