"""The Triton-interpreter fidelity layer (verify/platform/fidelity.py) in this process: its parts, its argument
checks and the arithmetic its patches and canaries rest on.  Everything that runs a kernel runs in a child
process: test_fidelity_slow.py (which takes PARTS from here)."""
from __future__ import annotations

import pytest

PARTS = ("bf16_dot", "bf16_round", "autotune", "tf32", "dot_order", "numpy_index", "loop_index", "bf16_arith",
         "bf16_scalar", "tl_alias", "torch_cpu_device", "lang_cache", "np_dtypes",
         "lazy_types", "device_calls", "bounds", "bf16_guard", "fp32_fma")


def test_parts_list_matches_layer():
    from pathmdn_verify.platform import fidelity
    assert fidelity.PARTS == PARTS


def _uninstalled(installs, parts) -> set[str]:
    """The parts no row of an INSTALLS table selects."""
    return set(parts) - {p for selecting, _ in installs for p in selecting}


def test_every_part_is_a_row_of_the_install_table():
    """activate installs INSTALLS row by row: each part selects a row (the control: a table without bounds' row)."""
    from pathmdn_verify.platform import fidelity
    assert _uninstalled(fidelity.INSTALLS, PARTS) == set()
    assert _uninstalled([r for r in fidelity.INSTALLS if r[0] != ("bounds",)], PARTS) == {"bounds"}


def test_bad_arguments_refused():
    from pathmdn_verify.platform import fidelity
    from pathmdn_verify.core.errors import UsageError
    with pytest.raises(UsageError):
        fidelity.activate(fp32_dot="fp16")
    with pytest.raises(UsageError):
        fidelity.activate(parts=("bf16_dot", "no_such_part"))


def test_fixed_order_dot_is_the_once_rounded_sum():
    """dot_order's accumulation: float64 in a fixed order, rounded once; equal to the correctly rounded
    exact sum (math.fsum) on seeded data, so the same on every machine (elementwise IEEE, no BLAS)."""
    import math

    import numpy as np

    from pathmdn_verify.platform.fidelity import fixed_order_dot
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((16, 64), (64, 8)))
    d = rng.standard_normal((16, 8)).astype(np.float32)
    got = fixed_order_dot(a, b, d)
    want = np.array([[math.fsum([float(d[i, j])] + [float(a[i, k]) * float(b[k, j]) for k in range(64)])
                      for j in range(8)] for i in range(16)]).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(got, want)


def test_bf16_fma_canary_discriminates():
    """The canary's x*y + x and x - x*y data (seed 0) tell one rounding (the GPU's fma.rn.bf16) from two
    (mul.bf16 then add.bf16): the emulation cannot pass it by rounding the product first."""
    from fractions import Fraction

    import torch

    from pathmdn_verify.core.bits import bf16_rne
    g = torch.Generator().manual_seed(2)
    x, y = (torch.randn(16, generator=g).to(torch.bfloat16).double().tolist() for _ in range(2))
    pairs = [(Fraction(a), Fraction(b)) for a, b in zip(x, y)]
    once = [bf16_rne(a * b + a) for a, b in pairs] + [bf16_rne(a - a * b) for a, b in pairs]
    twice = ([bf16_rne(Fraction(bf16_rne(a * b)) + a) for a, b in pairs]
             + [bf16_rne(a - Fraction(bf16_rne(a * b))) for a, b in pairs])
    assert sum(p != q for p, q in zip(once, twice)) >= 3


def test_exact_bf16_conversions():
    """The numpy helpers the patches use, against the rational RNE oracle of the canaries."""
    import math

    import numpy as np

    from pathmdn_verify.checks.fidelity_canaries import _F32_CAST_CASES
    from pathmdn_verify.core.bits import (
        bf16_bits_to_f32,
        bf16_rne,
        f32_to_bf16_bits,
        f64_to_bf16_bits,
    )
    xs = np.array(_F32_CAST_CASES, dtype=np.float32)
    got = bf16_bits_to_f32(f32_to_bf16_bits(xs))
    assert [float(g) for g in got] == [bf16_rne(float(x)) for x in xs]
    rng = np.random.default_rng(0)
    ys = rng.standard_normal(2000) * np.exp2(rng.integers(-140, 130, 2000))
    ys = np.concatenate([ys, [1 + 2.0 ** -8 + 2.0 ** -40, 3.5e38, -1e-45]])
    got64 = bf16_bits_to_f32(f64_to_bf16_bits(ys))
    want = [bf16_rne(float(y)) for y in ys]
    assert all(float(g) == w or (math.isinf(w) and math.isinf(g)) for g, w in zip(got64, want))
    assert np.isnan(bf16_bits_to_f32(f32_to_bf16_bits(np.array([np.nan], np.float32))))[0]
