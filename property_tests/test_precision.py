"""Working-precision helpers and the budget rule: rounding is exact where it must be, and the budget
rule rejects what it exists to reject (non-finite output, errors beyond c times the reference)."""
import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from verify.budget import judge
from verify.precision import Precision, round_bf16, truncate_tf32
from verify.strategies import bf16_values


@given(bf16_values())
def test_bf16_values_are_fixed_points_of_rounding(x):
    t = torch.tensor([x], dtype=torch.float32)
    assert torch.equal(round_bf16(t), t)


@given(st.floats(-2.0 ** 100, 2.0 ** 100, width=32, allow_subnormal=False))
def test_tf32_truncation_keeps_ten_mantissa_bits_toward_zero(x):
    t = torch.tensor([x], dtype=torch.float32)
    y = truncate_tf32(t)
    assert torch.equal(truncate_tf32(y), y) and abs(y.item()) <= abs(x)
    assert abs(x - y.item()) <= abs(x) * 2.0 ** -10


def test_rounded_matmul_backward_rounds_its_operands():
    prec = Precision.of("bf16")
    a = torch.tensor([[1 + 2.0 ** -12]], requires_grad=True)
    b = torch.tensor([[1.0]], requires_grad=True)
    prec.mm(a, b).backward(torch.tensor([[1 + 2.0 ** -12]]))
    assert a.grad.item() == 1.0 and b.grad.item() == 1.0   # both rounded to bf16


def test_budget_rejects_nonfinite_and_excess_error():
    prec = Precision.of("bf16")
    oracle = torch.linspace(-1, 1, 101, dtype=torch.float64)
    ref = oracle + 1e-3
    assert judge("o", oracle.clone(), oracle, ref, prec, 4).ratio == 0
    bad = oracle.clone()
    bad[3] = math.nan
    assert judge("o", bad, oracle, ref, prec, 4).ratio == math.inf
    v = judge("o", oracle + 5e-2, oracle, ref, prec, 4)
    assert v.ratio > 1 and v.decided_by in ("normwise-relative", "max-abs")


def test_budget_for_an_exactly_zero_tensor_uses_max_abs_at_the_given_scale():
    prec = Precision.of("fp32", "tf32")
    zero = torch.zeros(4, dtype=torch.float64)
    noise = torch.full((4,), 1e-4, dtype=torch.float64)
    assert judge("dk", noise, zero, zero, prec, 8, scale=1.0).ratio <= 1      # 1e-4 < 8 * 2^-11
    assert judge("dk", noise * 100, zero, zero, prec, 8, scale=1.0).ratio > 1
