"""`verify coverage` on fla itself: a forward check leaves the backward kernels unrun; the varlen decode cache and
MDN's explicit p (coverage regression cases of verify/ops/) are reached."""
from __future__ import annotations

import json

from test_coverage import assert_reached

from pathmdn_verify import cli


def test_forward_checks_leave_the_backward_kernels_unrun(tmp_path, capsys):
    """On fla itself: a forward check runs the forward kernels and none of the backward ones."""
    out = tmp_path / "cov.json"
    assert cli.main(["coverage", "--id", "kernel.fla.path_attn.convention.gate_scaled", "--profile", "quick",
                     "--json", str(out), "--html", str(tmp_path / "html")]) == 0
    r = json.loads(out.read_text())["ops"]["path_attn"]
    never = {k.split(":")[1] for k in r["kernels_never_ran"]}
    assert "parallel_path_fwd_kernel" not in never and "intra_chunk_preprocess_bwd_kernel" in never
    assert (tmp_path / "html" / "path_attn" / "index.html").is_file()
    assert "kernels never ran" in capsys.readouterr().out


def test_varlen_decode_and_mdn_explicit_p_are_reached(tmp_path):
    assert_reached(tmp_path, ["kernel.fla.path_attn.decode.fp32.beta_uniform", "kernel.fla.mdn_chunk16.fwd.bf16.typical"])
