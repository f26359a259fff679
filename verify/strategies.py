"""Hypothesis strategies for kernel inputs: shapes by profile, regimes by name (docs/design.md section 7).

A regime fixes the hard part of a case (beta near 2, log mu at its floor, ...); hypothesis draws the
rest (T, head dims, GQA, varlen, seed) within the profile's sizes.  Values are drawn in float64 from a
seeded generator and rounded to the kernel dtype (round to nearest even) in verify.inputs: hypothesis'
own `floats(width=16)` is IEEE half, not bf16, so bf16 values come from `bf16_values` where a strategy
needs them directly.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from verify.inputs import GdnCase, MdnCase, PathCase

# PaTH / FoX regimes: name -> PathCase fields
PATH_REGIMES = {
    "beta_uniform": {},
    "beta_near2": {"beta": st.sampled_from(["near2_2", "near2_4", "near2_7"])},
    "beta_two": {"beta": "two"},
    "w_aligned": {"w": "aligned"},
    "w_antialigned": {"w": "antialigned"},
    "saturated": {"logit_gain": 4.0},
    "gate_strong": {"gate": "strong"},
    "gate_weak": {"gate": "weak"},
}
FOX_REGIMES = {k: PATH_REGIMES[k] for k in ("saturated", "gate_strong", "gate_weak")} | {"gate_mixed": {"gate": "mixed"}}

# The first T of each profile spans several kernel blocks (PaTH 64, FoX's query block 128): hypothesis'
# first examples, and its shrinking, favour the first element, and a bug in cross-block code needs it.
SIZES = {   # (T values, head dims D, value dims Dv, (HQ, H) pairs, batch sizes)
    "quick": ((160, 1, 23), (16,), (16,), ((1, 1), (2, 1)), (1,)),
    "ci": ((160, 1, 37, 100), (16, 32), (16, 32), ((1, 1), (2, 1), (4, 2)), (1, 2)),
    "full": ((4096, 1, 100, 1000), (16, 32, 64, 128), (16, 64, 128), ((1, 1), (2, 1), (4, 2)), (1, 2)),
}
# Backward passes differentiate the float64 oracle through every step of its walk: cap T there.
BWD_MAX_T = {"quick": 160, "ci": 160, "full": 1024}


def capped(Ts: tuple[int, ...], max_T: int | None) -> tuple[int, ...]:
    """Ts without the values above max_T, keeping the order (and at least the largest allowed)."""
    if max_T is None:
        return Ts
    kept = tuple(t for t in Ts if t <= max_T)
    return kept if kept else (max_T,)


def _value(x):
    return x if isinstance(x, st.SearchStrategy) else st.just(x)


@st.composite
def cu_seqlens_for(draw, T: int):
    """None (dense) or a split of [0, T) into 2 or 3 non-empty sequences."""
    if T < 3 or not draw(st.booleans()):
        return None
    n = draw(st.integers(2, 3))
    cuts = sorted(draw(st.sets(st.integers(1, T - 1), min_size=n - 1, max_size=n - 1)))
    return (0, *cuts, T)


@st.composite
def path_cases(draw, regime: dict, profile: str, gated: bool | None = None, varlen: bool = True,
               max_T: int | None = None):
    """PathCase for one regime; gated=True forces a forget gate, None lets hypothesis choose."""
    Ts, Ds, Dvs, heads, Bs = SIZES[profile]
    T = draw(st.sampled_from(capped(Ts, max_T)))
    HQ, H = draw(st.sampled_from(heads))
    cu = draw(cu_seqlens_for(T)) if varlen else None
    fields = {name: draw(_value(v)) for name, v in regime.items()}
    if "gate" not in fields and gated is not False:
        fields["gate"] = "mixed" if gated or draw(st.booleans()) else "none"
    return PathCase(T=T, D=draw(st.sampled_from(Ds)), Dv=draw(st.sampled_from(Dvs)),
                    B=1 if cu else draw(st.sampled_from(Bs)), HQ=HQ, H=H, cu_seqlens=cu,
                    seed=draw(st.integers(0, 2**16)), **fields)


MDN_REGIMES = {
    "typical": {},
    "logmu_floor": {"log_mu": "floor"},
    "logmu_below_floor": {"log_mu": "below"},
    "alpha_near1": {"alpha": "near1"},
    "alpha_small": {"alpha": "small"},
    "beta_near_max": {"beta": "near_max"},
    "beta_near0": {"beta": "near0"},
    "eta_near0": {"eta": "near0"},
    "eta_near2": {"eta": "near2"},
    "initial_state": {"initial_state": True},
}

MDN_SIZES = {   # (T values, Dk, Dv, H, B)
    "quick": ((100, 1, 37), (16,), (16,), (1,), (1,)),
    "ci": ((100, 1, 37, 128), (16, 32), (16, 32), (1, 2), (1, 2)),
    "full": ((4096, 1, 100, 1000), (64, 128), (64, 128), (1, 2), (1, 2)),
}


@st.composite
def mdn_cases(draw, regime: dict, profile: str, max_T: int | None = None):
    Ts, Dks, Dvs, Hs, Bs = MDN_SIZES[profile]
    return MdnCase(T=draw(st.sampled_from(capped(Ts, max_T))), Dk=draw(st.sampled_from(Dks)), Dv=draw(st.sampled_from(Dvs)),
                   H=draw(st.sampled_from(Hs)), B=draw(st.sampled_from(Bs)),
                   seed=draw(st.integers(0, 2**16)), **regime)


GDN_REGIMES = {
    "typical": {},
    "gate_near0": {"gate": "near0"},
    "gate_near1": {"gate": "near1"},
    "beta_near0": {"beta": "near0"},
    "beta_near1": {"beta": "near1"},      # the top of the post-sigmoid domain the docstring asks for
    "beta_near2": {"beta": "near2"},      # the top of allow_neg_eigval's [0, 2)
    "initial_state": {"initial_state": True},
}
# GDN's chunk is 64: each profile's first T spans two chunks.  Few, small sizes: the fused recurrent kernel
# runs token by token under the CPU interpreter.
GDN_SIZES = {   # (T values, Dk, Dv, H, B)
    "quick": ((80, 1, 17), (16,), (16,), (1,), (1,)),
    "ci": ((80, 1, 37), (16, 32), (16, 32), (1, 2), (1, 2)),
    "full": ((4096, 1, 100, 1000), (64, 128), (64, 128), (1, 2), (1, 2)),
}


@st.composite
def gdn_cases(draw, regime: dict, profile: str, max_T: int | None = None):
    """GdnCase for one regime; hypothesis chooses dense or varlen (cu_seqlens, then B = 1)."""
    Ts, Dks, Dvs, Hs, Bs = GDN_SIZES[profile]
    T = draw(st.sampled_from(capped(Ts, max_T)))
    cu = draw(cu_seqlens_for(T))
    return GdnCase(T=T, Dk=draw(st.sampled_from(Dks)), Dv=draw(st.sampled_from(Dvs)), H=draw(st.sampled_from(Hs)),
                   B=1 if cu else draw(st.sampled_from(Bs)), cu_seqlens=cu, seed=draw(st.integers(0, 2**16)),
                   **regime)


def bf16_values(min_value: float = -1e4, max_value: float = 1e4) -> st.SearchStrategy:
    """Every finite bf16 number in [min_value, max_value], drawn by bit pattern."""
    def to_float(bits: int) -> float:
        return torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item()
    return st.integers(0, 0xFFFF).map(to_float).filter(
        lambda x: x == x and min_value <= x <= max_value)
