"""Working-precision helpers and the budget rule: rounding is exact where it must be, and the budget
rule rejects what it exists to reject (non-finite output, errors beyond c times the same-dtype error)."""
import doctest
import fractions
import itertools
import math

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from pathmdn_verify.core import bits, inputs
from pathmdn_verify.core.bits import round_bf16, truncate_tf32
from pathmdn_verify.core.budget import verdict
from pathmdn_verify.core.precision import Precision, matmul
from pathmdn_verify.core.strategies import bf16_values


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


def test_doctests():
    assert doctest.testmod(bits).failed == 0
    assert doctest.testmod(inputs).failed == 0


@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=8))
def test_torch_and_numpy_bit_helpers_agree(xs):
    """The torch forms (same-dtype implementation) and the numpy forms (fidelity layer) round the same way."""
    t, a = torch.tensor(xs, dtype=torch.float32), np.array(xs, dtype=np.float32)
    assert np.array_equal(truncate_tf32(t).numpy(), truncate_tf32(a))
    assert np.array_equal(round_bf16(t).numpy(), bits.bf16_bits_to_f32(bits.f32_to_bf16_bits(a)))


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
    assert verdict("o", oracle.clone(), oracle, ref, prec, 4).ratio == 0
    bad = oracle.clone()
    bad[3] = math.nan
    assert verdict("o", bad, oracle, ref, prec, 4).ratio == math.inf
    v = verdict("o", oracle + 5e-2, oracle, ref, prec, 4)
    assert v.ratio > 1 and v.decided_by in ("normwise-relative", "max-abs")


def test_budget_for_an_exactly_zero_tensor_uses_max_abs_at_the_given_scale():
    prec = Precision.of("fp32", "tf32")
    zero = torch.zeros(4, dtype=torch.float64)
    noise = torch.full((4,), 1e-4, dtype=torch.float64)
    assert verdict("dk", noise, zero, zero, prec, 8, scale=1.0).ratio <= 1      # 1e-4 < 8 * 2^-11
    assert verdict("dk", noise * 100, zero, zero, prec, 8, scale=1.0).ratio > 1


def test_fixed_order_matmul_is_the_stated_blockwise_fp32_accumulation():
    """acc_{s+1} = fl32(acc_s + block sum), written out literally for one output element."""
    from pathmdn_verify.core.precision import BLOCK_K, fixed_order_matmul
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 37, generator=gen), torch.randn(37, 2, generator=gen)
    acc = torch.tensor(0.0)
    for s in range(0, 37, BLOCK_K):
        acc = (acc.double() + (a[0, s:s + BLOCK_K].double() * b[s:s + BLOCK_K, 0].double()).sum()).float()
    assert fixed_order_matmul(a, b)[0, 0] == acc     # a block's float64 sum is exact to far below fp32
    exact = a.double() @ b.double()
    assert (fixed_order_matmul(a, b) - exact).abs().max() <= 4 * 2.0 ** -24 * (a.abs().double() @ b.abs().double()).max()


def test_fixed_order_matmul_is_the_pairwise_tree_bit_for_bit():
    """Every output element equals the stated order written out in Python floats (float64): exact products,
    the pairwise tree within each block of BLOCK_K, one fp32 rounding per block; on operands spanning 2^+-60
    with cancelling signs, so that a block's float64 sum is inexact and another order would round otherwise."""
    import struct

    from pathmdn_verify.core.precision import BLOCK_K, fixed_order_matmul
    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]

    def tree(xs):
        while len(xs) > 1:
            xs = [xs[i] + xs[i + 1] for i in range(0, len(xs), 2)]
        return xs[0]
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 3, 45, generator=g) * torch.exp2(torch.randint(-60, 60, (2, 3, 45), generator=g).float())
    b = torch.randn(45, 4, generator=g) * torch.exp2(torch.randint(-60, 60, (45, 4), generator=g).float())
    out, inexact = fixed_order_matmul(a, b), 0
    for n, i, j in itertools.product(range(2), range(3), range(4)):
        acc = 0.0
        for s in range(0, 48, BLOCK_K):
            prods = [float(a[n, i, k]) * float(b[k, j]) if k < 45 else 0.0 for k in range(s, s + BLOCK_K)]
            block = tree(prods)
            inexact += block != sum(map(fractions.Fraction, prods))
            acc = f32(acc + block)
        assert float(out[n, i, j]) == acc, (n, i, j)
    assert inexact > 0       # the data reach the roundings whose order the definition fixes


def test_same_dtype_implementations_call_no_blas_and_give_the_same_bits_under_any_thread_count():
    """By construction: no fp32 matmul, solve or library reduction reaches torch from the same-dtype
    implementations (forward and backward), only float64 products of inner extent 2 (two exact products, one
    rounding whatever the library's order), so the BLAS, its thread count and the CPU cannot change them."""
    from torch.overrides import TorchFunctionMode

    from pathmdn_verify import same_dtype
    from pathmdn_verify.core.inputs import floats_as
    from pathmdn_verify.ops.attention_ops import PathCase, path_inputs
    from pathmdn_verify.ops.mdn_ops import MdnCase, mdn_inputs
    library = {"matmul", "mm", "bmm", "__matmul__", "linalg_solve_triangular", "softmax", "sum", "einsum", "mv"}

    class NoLibraryArithmetic(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            pair = func is torch.Tensor.__matmul__ and all(t.dtype == torch.float64 for t in args[:2]) \
                and args[0].shape[-1] == 2
            assert pair or getattr(func, "__name__", "") not in library, func
            return func(*args, **(kwargs or {}))

    prec = Precision.of("bf16")
    xm = floats_as(mdn_inputs(MdnCase(T=70, Dk=8, Dv=8, initial_state=True, seed=1), torch.bfloat16), torch.float32)
    xp = floats_as(path_inputs(PathCase(T=70, D=16, Dv=16, gate="mixed", seed=1), torch.bfloat16), torch.float32)

    def run():
        leaves = {n: xp[n].clone().requires_grad_() for n in ("q", "k", "v", "w", "beta", "g")}
        with NoLibraryArithmetic():
            o = same_dtype.path_attn(**{**xp, **leaves}, prec=prec, scale=0.25, gate_scaled=True)
            o.backward(torch.ones_like(o))
            outs = [o.detach(), *(t.grad for t in leaves.values()), *same_dtype.mdn(**xm, prec=prec)]
        return outs

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run()
        torch.set_num_threads(2)
        two = run()
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(x, y) for x, y in zip(one, two))


def test_operand_rounding_under_vmap_sees_plain_tensors():
    """Under torch.vmap (the references' heads at once) the dot format's rounding gets the whole batch as a plain
    tensor: truncate_tf32's bit view has no batching rule in torch 2.11 (the H200's), so a rounding run per batch
    element fails there.  The batched product equals each element's, bit for bit, with either operand unbatched."""
    from torch._C._functorch import is_batchedtensor

    def rnd(x):
        assert not is_batchedtensor(x), "the rounding ran on a vmap-batched tensor"
        return truncate_tf32(x)
    g = torch.Generator().manual_seed(0)
    a, b, b0 = (torch.randn(*s, generator=g) for s in ((3, 5, 40), (3, 40, 4), (40, 4)))
    out = torch.vmap(lambda x, y: matmul(x, y, rnd))(a, b)
    shared = torch.vmap(lambda x: matmul(x, b0, rnd))(a)
    for n in range(3):
        assert torch.equal(out[n], matmul(a[n], b[n], rnd)) and torch.equal(shared[n], matmul(a[n], b0, rnd))


def test_fixed_order_matmul_is_the_same_bits_in_row_slices(monkeypatch):
    """A product too large to form at once runs in row slices (a bounded float64 buffer): the same bits."""
    from pathmdn_verify.core import precision
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(2, 37, 50, generator=g), torch.randn(50, 9, generator=g)
    whole = precision.fixed_order_matmul(a, b)
    monkeypatch.setattr(precision, "MAX_BLOCK_ELEMENTS", 300)       # 300 // (16 * 9 * 2) = 1 row at a time
    assert torch.equal(precision.fixed_order_matmul(a, b), whole)
