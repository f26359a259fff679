"""The return contract (pathmdn_verify.core.contract) on stand-in ops: the right outputs come back as a tuple of
the op's outputs; a missing, extra or non-tensor output, a wrong dtype, device or shape is a UsageError naming what
the op returns and what came back; float32 outputs (final states) are held to float32 whatever dtype is checked;
the decode pass names its own output."""
from types import SimpleNamespace

import pytest
import torch

from pathmdn_verify.core import contract
from pathmdn_verify.core.errors import UsageError

ONE = SimpleNamespace(name="path_attn", impl="mine", outputs=("o",), float32_outputs=lambda x=None: set())
THREE = SimpleNamespace(name="mdn_recurrent", impl="mine", outputs=("o", "S_T", "M_T"),
                        float32_outputs=lambda x=None: {"S_T", "M_T"})
NORM = SimpleNamespace(name="rms_norm_gated", impl="mine", outputs=("y", "r"),   # r in fp32 when asked for
                       float32_outputs=lambda x=None: {"r"} if (x or {}).get("residual_in_fp32") else set())
o = torch.zeros(1, 8, 2, 16, dtype=torch.bfloat16)
S = torch.zeros(1, 2, 16, 16)


def test_what_the_op_returns_is_accepted():
    assert contract.outputs(ONE, o, torch.bfloat16, "cpu") == (o,)
    assert contract.outputs(THREE, (o, S, S), torch.bfloat16, "cpu") == (o, S, S)
    assert contract.outputs(THREE, [o, S, S], torch.bfloat16, "cpu") == (o, S, S)       # a list is a sequence too
    contract.shapes(THREE, (o, S, S), (o.shape, S.shape, S.shape), torch.bfloat16, "cpu")
    assert contract.outputs(ONE, o, torch.bfloat16, "cpu", ("k_cache",)) == (o,)          # decode: its own output


@pytest.mark.parametrize("op,raw,says", [
    (ONE, (o, None), "a tuple of 2 (Tensor [1, 8, 2, 16] bfloat16 on cpu, None)"),
    (ONE, (o, o), "a tuple of 2"),
    (ONE, None, "returned a NoneType"),
    (ONE, o.float(), "returned a Tensor [1, 8, 2, 16] float32 on cpu"),
    (THREE, o, "mdn_recurrent returns a tuple (o bfloat16 on cpu, S_T float32 on cpu, M_T float32 on cpu); mine "
               "returned a Tensor"),
    (THREE, (o, S.bfloat16(), S), "a tuple of 3 (Tensor [1, 8, 2, 16] bfloat16 on cpu, Tensor [1, 2, 16, 16] "
                                  "bfloat16 on cpu"),
    (THREE, (o, S, S, S), "a tuple of 4"),
    (THREE, (o, S), "a tuple of 2"),
])
def test_a_broken_return_is_a_usage_error_saying_both(op, raw, says):
    with pytest.raises(UsageError) as err:
        contract.outputs(op, raw, torch.bfloat16, "cpu")
    assert says in str(err.value) and f"{op.name} returns" in str(err.value) and "mine returned" in str(err.value)


def test_a_wrong_device_is_refused():
    with pytest.raises(UsageError, match="o bfloat16 on cuda; mine returned a Tensor .* on cpu"):
        contract.outputs(ONE, o, torch.bfloat16, "cuda")


def test_a_wrong_shape_names_the_oracles():
    with pytest.raises(UsageError, match=r"returns o \[1, 8, 2, 16\] bfloat16 on cpu; mine returned a Tensor "
                                          r"\[1, 2, 8, 16\]"):
        contract.shapes(ONE, (o.transpose(1, 2),), (o.shape,), torch.bfloat16, "cpu")
    with pytest.raises(UsageError, match=r"S_T \[1, 2, 16, 16\] float32"):
        contract.shapes(THREE, (o, S[:, :1], S), (o.shape, S.shape, S.shape), torch.bfloat16, "cpu")


def test_an_output_an_option_asks_in_float32_is_held_to_it():
    """A norm's residual kept in fp32 (residual_in_fp32): float32 then, the dtype checked otherwise; the same
    tensors refused the other way."""
    r32, r16 = torch.zeros(1, 8, 16), torch.zeros(1, 8, 16, dtype=torch.bfloat16)
    y = r16.clone()
    assert contract.outputs(NORM, (y, r32), torch.bfloat16, "cpu", x={"residual_in_fp32": True}) == (y, r32)
    assert contract.outputs(NORM, (y, r16), torch.bfloat16, "cpu", x={}) == (y, r16)
    with pytest.raises(UsageError, match="r float32 on cpu"):
        contract.outputs(NORM, (y, r16), torch.bfloat16, "cpu", x={"residual_in_fp32": True})
    with pytest.raises(UsageError, match="r bfloat16 on cpu"):
        contract.outputs(NORM, (y, r32), torch.bfloat16, "cpu", x={})
