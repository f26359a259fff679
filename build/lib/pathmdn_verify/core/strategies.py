"""Hypothesis strategy helpers that every op's strategy shares (docs/design.md section 7); the strategies,
regimes and sizes per profile of each op live with its record (verify/ops/).

A regime fixes the hard part of a case (beta near 2, log mu at its floor, ...); hypothesis draws the
rest (T, head dims, GQA, varlen, seed) within the profile's sizes.  Values are drawn in float64 from a
seeded generator and rounded to the kernel dtype (round to nearest even) by the op's input builder: hypothesis'
own `floats(width=16)` is IEEE half, not bf16, so bf16 values come from `bf16_values` where a strategy
needs them directly.
"""
from __future__ import annotations

from functools import lru_cache

from allpairspy import AllPairs
from hypothesis import strategies as st

from pathmdn_verify.core.bits import bf16_from_bits
from pathmdn_verify.core.inputs import VALUE_PATTERNS

# Backward passes differentiate the float64 oracle through every step of its walk: cap T there.
BWD_MAX_T = {"quick": 160, "ci": 160, "full": 1024}


def capped(Ts: tuple[int, ...], max_T: int | None) -> tuple[int, ...]:
    """Ts without the values above max_T, keeping the order (and at least the largest allowed)."""
    if max_T is None:
        return Ts
    kept = tuple(t for t in Ts if t <= max_T)
    return kept if kept else (max_T,)


def drawn(x):
    """x as a strategy: itself when it is one, else just(x) (a regime field is a value or a strategy)."""
    return x if isinstance(x, st.SearchStrategy) else st.just(x)


def value_patterns() -> st.SearchStrategy:
    """(pattern, scale exponent) of a case's free tensors (pathmdn_verify.core.inputs.patterned): a failing example shrinks
    toward all-ones values of scale 1, so that a minimal example is small in its values too, not only in T
    and D.  The kernel checks keep seeded values (their examples, and so their verdicts, stay as listed)."""
    return st.tuples(st.sampled_from(VALUE_PATTERNS), st.integers(-4, 4))


@lru_cache(maxsize=None)
def _rows(factors: tuple[tuple[str, tuple], ...]) -> tuple[tuple[tuple[str, object], ...], ...]:
    if len(factors) < 2:                        # AllPairs needs two factors; none varied: one empty row
        return tuple(((n, v),) for n, levels in factors for v in levels) or ((),)
    names = [n for n, _ in factors]
    return tuple(tuple(zip(names, r)) for r in AllPairs([levels for _, levels in factors]))


def shape_rows(**levels: tuple) -> st.SearchStrategy[dict]:
    """One row of a covering array of strength 2 over the shape fields' levels (allpairspy; the levels in the
    order given, so that hypothesis shrinks toward the first row, the first level of each): every pair of
    levels of two fields appears in some row, and every row is one compile key of the kernels (head dims,
    heads, batch are constexprs; varlen and an optional input switch constexpr flags).  A product of
    independent draws gave nearly every example of a run a key of its own (PaTH at full: 216 combinations for
    90 drawn examples per pass), each compiled for every kernel it launches; the rows' few keys repeat across
    the checks of an op, so that Triton's cache serves them.  The same rows on every machine and run."""
    factors = tuple((n, tuple(v)) for n, v in levels.items() if len(v) > 1)
    fixed = {n: v[0] for n, v in levels.items() if len(v) == 1}
    return st.sampled_from(_rows(factors)).map(lambda row: fixed | dict(row))


def batch_levels(Bs: tuple[int, ...]) -> tuple:
    """The `batch` field's levels: each dense batch size, then "varlen" (one packed sequence, B = 1): one field,
    so that no row pairs a varlen batch with B > 1."""
    return (*Bs, "varlen")


@st.composite
def batch_for(draw, T: int, batch) -> tuple[int, tuple[int, ...] | None]:
    """(B, cu_seqlens) for a row's `batch` level: (batch, None) for a dense batch size; for "varlen", B = 1
    and a split of [0, T) into 2 or 3 non-empty sequences (dense below T = 3)."""
    if batch != "varlen":
        return batch, None
    if T < 3:
        return 1, None
    n = draw(st.integers(2, 3))
    cuts = sorted(draw(st.sets(st.integers(1, T - 1), min_size=n - 1, max_size=n - 1)))
    return 1, (0, *cuts, T)


def bf16_values(min_value: float = -1e4, max_value: float = 1e4) -> st.SearchStrategy:
    """Every finite bf16 number in [min_value, max_value], drawn by bit pattern."""
    return st.integers(0, 0xFFFF).map(bf16_from_bits).filter(
        lambda x: x == x and min_value <= x <= max_value)
