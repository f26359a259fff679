"""`verify coverage` of the PaTH backward past T = 512 (fla's super-block stages): about 30 s of CPU."""
from __future__ import annotations

from test_coverage import assert_reached


def test_path_backward_past_the_super_block_is_reached(tmp_path):
    assert_reached(tmp_path, ["kernel.fla.path_attn.bwd.fp32.gate_weak"])
