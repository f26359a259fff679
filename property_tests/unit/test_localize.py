"""`verify localize` in this process: case labels round-trip, a check's own inputs saved by label, bad input is
exit 2 with one line.  PATH, MDN and BWD are the cases test_localize_slow.py localizes."""
import pytest

from pathmdn_verify import cli, ops
from pathmdn_verify.core import examples as example
from pathmdn_verify.ops.attention_ops import PathCase
from pathmdn_verify.ops.mdn_ops import MdnCase


# T = 160 spans three PaTH key blocks (BS = 64) and two query blocks (BT = 128); no gate, which would hide
# the long-range logits.  MDN: chunk 16 (the chunk size fla's log-form coefficients survive in bf16), 3 chunks.
PATH = ("kernel.fla.path_attn.fwd.fp32.beta_uniform", PathCase(T=160, HQ=2, H=1, seed=3))
MDN = ("kernel.fla.mdn_chunk16.fwd.bf16.initial_state", MdnCase(T=40, H=2, initial_state=True, seed=3))
# The backward at T = 70: two key blocks, so the cross-block kernels have work; a gate, so dg is judged.
BWD = ("kernel.fla.path_attn.bwd.fp32.beta_uniform", PathCase(T=70, gate="mixed", seed=5))


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
