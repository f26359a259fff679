"""`verify localize` on fla's GDN chunk and FoX kernels (verify/stages/gdn_stages.py, fox_stages.py): a copy of
fla with one planted bug (one wrong line in one stage) is localized to exactly that stage, the unmodified kernels
to none; the listed GDN dg failure is localized to the kernel that computes it; and localize resolves the stages
of every searched kernel check id (one judged stage for the single-kernel passes), or says in one line why not.
Each kernel run is `verify localize` on a saved example (test_localize_slow.run_localize)."""

import pytest
from test_localize_slow import assert_localized, run_localize

from pathmdn_verify import cli, ops
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.ops.attention_ops import PathCase
from pathmdn_verify.ops.gdn_ops import GdnCase
from pathmdn_verify.ops.mdn_ops import MdnCase
from pathmdn_verify.platform.mutation import Mutant, materialize


# GDN: two chunks (T = 70 > 64) and an initial state, so the state recurrence and dh have work.  FoX: three
# 64-key blocks and two 128-query blocks, a gate (the gate cumsum and dg are judged), GQA.
GDN_FWD = ("kernel.fla.gdn_chunk.fwd.fp32.typical", GdnCase(T=70, Dk=32, Dv=32, H=2, initial_state=True, seed=3))
GDN_BWD = ("kernel.fla.gdn_chunk.bwd.fp32.typical", GDN_FWD[1])
FOX_FWD = ("kernel.fla.forgetting_attn.fwd.fp32.gate_mixed", PathCase(T=160, HQ=2, H=1, gate="mixed", seed=3))
FOX_BWD = ("kernel.fla.forgetting_attn.bwd.fp32.gate_mixed", FOX_FWD[1])

CHUNK_FWD, DELTA_H, WY, FOX = ("ops/gated_delta_rule/chunk_fwd.py", "ops/common/chunk_delta_h.py",
                               "ops/gated_delta_rule/wy_fast.py", "ops/attn/parallel.py")
PLANTED = {m.name: m for m in (
    Mutant("gdn_kkt_beta_of_column", "GDN kkt: the first 16-token block of beta K K^T scaled by beta of the column",
           CHUNK_FWD, "    b_A00 = b_A00 * b_b0[:, None]\n", "    b_A00 = b_A00 * b_b0[None, :]\n", ()),
    Mutant("gdn_dh_not_decayed", "GDN backward: dh carried to the earlier chunk without the chunk's decay", DELTA_H,
           "            b_dh1 *= bg_last_exp\n", "", ()),
    Mutant("gdn_dbeta_without_u", "GDN backward: dbeta without the term of u = A diag(beta) V", WY,
           "        b_db += tl.sum(b_dvb * b_v, 1)\n", "", ()),
    Mutant("fox_o_not_rescaled", "FoX forward: the output accumulator not rescaled when the row max grows (the lse "
           "is)", FOX, "        b_o = b_o * b_r[:, None] + tl.dot(b_p.to(b_q.dtype), b_v)",
           "        b_o = b_o + tl.dot(b_p.to(b_q.dtype), b_v)", (), count=2),
    Mutant("fox_dk_unscaled", "FoX backward: dk without the attention scale", FOX, "    b_dk = b_dk * scale\n", "",
           ()),
)}


def localize(tmp_path, check_id, case, mutant=None):
    root = mutant and materialize(PLANTED.get(mutant) or ops.mutants()[mutant], tmp_path / "root")
    return run_localize(tmp_path, check_id, case, root)


@pytest.mark.parametrize("check_id, case, stages", [
    (*GDN_FWD, 5), (*GDN_BWD, 12), (*FOX_FWD, 3), (*FOX_BWD, 7)], ids=["gdn", "gdn-bwd", "fox", "fox-bwd"])
def test_unmodified_kernels_localize_nothing(tmp_path, check_id, case, stages):
    proc, doc = localize(tmp_path, check_id, case)
    assert proc.returncode == 0 and doc["first_divergent"] is None and doc["status"] == "pass", proc.stdout
    assert len({r["stage"] for r in doc["stages"]}) == stages and all(r["ratio"] <= 1 for r in doc["stages"])
    assert "no stage leaves its budget" in proc.stdout


@pytest.mark.parametrize("check_id, case, mutant, stage", [
    (*GDN_FWD, "gdn_kkt_beta_of_column", "kkt + solve: A diag(beta)"),
    (*GDN_FWD, "gdn_chunk_state_decay_dropped", "states: h, v_new, S_T"),     # an op record's mutant
    (*GDN_BWD, "gdn_dh_not_decayed", "bwd: dh, dh0, dv"),
    (*GDN_BWD, "gdn_dbeta_without_u", "bwd: dk, dv, dbeta, dg (WY terms)"),
    (*FOX_FWD, "fox_gate_cumsum_off_by_one", "gate cumsum"),      # outside the cumsum: the tensor the kernel gets
    (*FOX_FWD, "fox_o_not_rescaled", "output o"),                 # lse stays right
    (*FOX_BWD, "fox_dk_unscaled", "bwd: dk/dv kernel (dk, dv, dg_k)"),
], ids=lambda p: p if isinstance(p, str) and not p.startswith("kernel") and " " not in p else None)
def test_planted_bug_is_localized_to_its_stage(tmp_path, check_id, case, mutant, stage):
    assert_localized(*localize(tmp_path, check_id, case, mutant), stage)


def test_the_listed_gdn_dg_failure_is_localized_to_chunk_bwd_dqkwg(tmp_path):
    """kernel.fla.gdn_chunk.bwd.fp32.gate_near0 (an expected failure: dg over budget) on the example its ci
    search reports: the o and S terms of dg that chunk_bwd_dqkwg writes leave their budget, while its dq and dk,
    every earlier stage and the WY terms of dg stay within."""
    check_id = "kernel.fla.gdn_chunk.bwd.fp32.gate_near0"
    proc, doc = localize(tmp_path, check_id, GdnCase(T=64, Dk=128, Dv=32, gate="near0", seed=1015))
    rows = {(r["stage"], r["tensor"]): r for r in doc["stages"]}
    assert doc["first_divergent"] == {"stage": "bwd: dq, dk, dw, dg (o and S terms)", "source": "chunk_bwd_dqkwg",
                                      "tensor": "dg (o, S terms)"}, proc.stdout
    assert rows[("bwd: dk, dv, dbeta, dg (WY terms)", "dg (WY terms)")]["verdict"] == "within"
    assert rows[("bwd: gradients", "dg")]["verdict"] == "DIVERGES"


# The passes whose stage list is one judged stage: a fused kernel or a PyTorch function with no intermediate read.
ONE_STAGE = [("kernel.fla.gdn_recurrent.fwd.fp32.typical", GdnCase(T=8, seed=1), "fused recurrent kernel (one stage)"),
             ("kernel.fla.mdn_recurrent.bwd.fp32.typical", MdnCase(T=8, seed=1), "gradients (one stage)"),
             ("kernel.fla.mdn_chunk16.bwd.bf16.typical", MdnCase(T=20, seed=1), "gradients (one stage)"),
             ("kernel.fla.path_attn.decode.fp32.beta_uniform", PathCase(T=70, seed=1), "key cache (one kernel)")]


@pytest.mark.parametrize("check_id, case, stage", ONE_STAGE, ids=lambda p: p if isinstance(p, str) and
                         p.startswith("kernel") else None)
def test_single_kernel_passes_are_one_stage(tmp_path, check_id, case, stage):
    proc, doc = localize(tmp_path, check_id, case)
    assert proc.returncode == 0 and {r["stage"] for r in doc["stages"]} == {stage}, proc.stdout + proc.stderr
    assert f"{stage}" in proc.stdout and "no stage leaves its budget" in proc.stdout


def test_localize_resolves_stages_for_every_searched_kernel_check(registry, capsys, monkeypatch):
    """Every searched kernel id gets past localize's stage lookup to the input file (missing here: exit 2, 'no
    such file'), without --sanitize; a pass whose record defines no stages is exit 2 with one line naming it."""
    searched = [c for c in registry if CheckId.parse(c).searched]
    assert {CheckId.parse(c).op for c in searched} >= {"gdn_chunk", "gdn_recurrent", "forgetting_attn", "path_attn",
                                                       "mdn_chunk16", "mdn_recurrent"}
    for cid in searched:
        assert cli.main(["localize", "--id", cid, "--inputs", "/nonexistent.pt", "--device", "cpu"]) == 2, cid
        err = capsys.readouterr().err
        assert "no such file" in err and err.count("\n") == 1 and "Traceback" not in err, (cid, err)
    monkeypatch.delitem(ops.OPS["gdn_chunk"].stages, "bwd")     # a negative control: a pass without stages
    assert cli.main(["localize", "--id", GDN_BWD[0], "--inputs", "/nonexistent.pt", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "gdn_chunk defines no stages for its bwd pass" in err and err.count("\n") == 1
