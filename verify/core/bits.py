"""Bit-level number formats, in one place: bf16 rounding and TF32 truncation as an NVIDIA GPU performs
them, on torch tensors (the same-dtype implementation's `Precision`, the canaries) and on numpy arrays (the
interpreter fidelity layer, whose tensors hold bf16 as uint16 bit patterns), and the exact rational bf16
rounding that the canaries and tests take as the truth (docs/design.md section 8).

bf16 is the top 16 bits of a float32 (8 significant bits); TF32 is a float32 with its 13 low mantissa bits
cleared (11 significant bits), which is how the H200's fp32 tensor-core dots read their operands.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import torch

TF32_DROPPED = 0x1FFF        # the 13 low mantissa bits of a float32 that TF32 does not keep


# ------------------------------------------------------------------------------------- scalars

def f32_bits(x: float) -> int:
    """The IEEE bit pattern of x rounded to float32.

    >>> hex(f32_bits(1.0))
    '0x3f800000'
    """
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_from_bits(bits: int) -> float:
    """The float32 whose bit pattern is bits.

    >>> f32_from_bits(0x3F808000) == 1 + 2**-8
    True
    """
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def rne(x, significant: int) -> float:
    """The value of a binary format with `significant` bits and fp32's exponent range (bf16: 8, fp32: 24)
    nearest to x (int, float or Fraction, finite), ties to even, overflow to inf: exact, by rational arithmetic
    (exponent >= -126, subnormal spacing 2^(-127 - significant + 1)); an independent check of the bit-level
    conversions below.

    >>> rne(1 + 2**-8, 8), rne(1 + 3 * 2**-8, 8), rne(257, 8), rne(1 + 2**-24, 24), rne(1 + 3 * 2**-24, 24)
    (1.0, 1.015625, 256.0, 1.0, 1.000000238418579)
    """
    f = Fraction(x)
    if f == 0:
        return math.copysign(0.0, x) if isinstance(x, float) else 0.0
    sign, a = (-1 if f < 0 else 1), abs(f)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1                                       # now 2^e <= a < 2^(e+1)
    ulp = Fraction(2) ** (max(e, -126) - (significant - 1))
    n, r = divmod(a, ulp)
    n = int(n)
    if r > ulp / 2 or (r == ulp / 2 and n % 2 == 1):
        n += 1
    v = n * ulp
    if v >= Fraction(2) ** 128:
        return sign * math.inf
    return sign * float(v)


def bf16_rne(x) -> float:
    """rne(x, 8): the bf16 value nearest to x.

    >>> bf16_rne(1 + 2**-8), bf16_rne(1 + 3 * 2**-8), bf16_rne(257)
    (1.0, 1.015625, 256.0)
    """
    return rne(x, 8)


def f32_rne(x) -> float:
    """rne(x, 24): the fp32 value nearest to x (as a Python float).

    >>> f32_rne(1 + 2**-12 + 2**-26) == 1 + 2**-12, f32_rne(2**-12 + 2**-26) == 2**-12 + 2**-26
    (True, True)
    """
    return rne(x, 24)


# ------------------------------------------------------------------------------- torch tensors

def round_bf16(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 -> fp32, round to nearest even (torch's cast).

    >>> round_bf16(torch.tensor([1 + 3 * 2**-8])).item()
    1.015625
    """
    return x.to(torch.bfloat16).float()


def bf16_from_bits(bits: int) -> float:
    """The bf16 number whose bit pattern is bits (0 .. 0xFFFF).

    >>> bf16_from_bits(0x3F80), bf16_from_bits(0xC020)
    (1.0, -2.5)
    """
    return torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item()


def truncate_tf32(x):
    """fp32 -> TF32 by truncation: clear the 13 low mantissa bits (round toward zero), of a torch tensor (as
    fp32) or of a numpy array (as float32).

    >>> truncate_tf32(torch.tensor([1 + 2**-10 + 2**-11])).item() == 1 + 2**-10
    True
    >>> float(truncate_tf32(np.array([-(1 + 2**-10 + 2**-11)], np.float32))[0]) == -(1 + 2**-10)
    True
    """
    if isinstance(x, torch.Tensor):
        return (x.float().contiguous().view(torch.int32) & ~TF32_DROPPED).view(torch.float32)
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return (u & np.uint32(~TF32_DROPPED & 0xFFFFFFFF)).view(np.float32)


def round_tf32_half_away(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> TF32 rounding half away from zero on the 13 dropped bits (a model of the dot that the canaries
    measure against truncation; the H200 truncates).

    >>> round_tf32_half_away(torch.tensor([1 + 2**-11])).item() == 1 + 2**-10
    True
    """
    return ((x.float().contiguous().view(torch.int32) + (TF32_DROPPED + 1) // 2) & ~TF32_DROPPED).view(torch.float32)


# --------------------------------------------------------------------------------- numpy arrays

def bf16_bits_to_f32(bits):
    """bf16 bit patterns (uint16) -> float32, exactly (bf16 is the top half of a float32).

    >>> bf16_bits_to_f32(np.array([0x3F80, 0xC020], np.uint16)).tolist()
    [1.0, -2.5]
    """
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> bf16 bit patterns, round to nearest even; NaN stays NaN (quiet, sign kept).

    >>> [hex(b) for b in f32_to_bf16_bits(np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32))]
    ['0x3f80', '0x3f82']
    """
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16   # wraps only for NaNs
    is_nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(is_nan, (u >> 16) | np.uint32(0x0040), rounded).astype(np.uint16)


def f64_to_bf16_bits(x):
    """float64 -> bf16 bit patterns, one correct rounding to nearest even (via round-to-odd float32,
    which has 16 spare bits, so the second rounding cannot double-round).

    >>> hex(f64_to_bf16_bits(np.array([1 + 2**-8 + 2**-40]))[0])     # a float32 detour would tie and round down
    '0x3f81'
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        too_far = np.abs(f.astype(np.float64)) > np.abs(x)
        f = np.where(too_far, np.nextafter(f, np.float32(0)), f).astype(np.float32)
        sticky = (f.astype(np.float64) != x) & ~np.isnan(x)
    u = f.view(np.uint32) | sticky.astype(np.uint32)
    return f32_to_bf16_bits(u.view(np.float32))
