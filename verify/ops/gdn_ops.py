"""Gated DeltaNet: its case type, input builder, regimes and hypothesis strategy, input validation, and the
records of fla's chunk_gated_delta_rule and fused_recurrent_gated_delta_rule.  GDN has no oracle of its own:
it runs the MDN oracle and same-dtype implementation with no momentum (`gdn_as_mdn`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import gdn_oracle as GDN_LITERAL
from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify import same_dtype
from pathmdn_verify.core import validate
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import op_of
from pathmdn_verify.core.inputs import case_label, cu_seqlens_tensor, linear_draws, on_device
from pathmdn_verify.platform.mutation import Mutant
from pathmdn_verify.core.records import (
    BUDGET_FACTOR_BLOCKWISE,
    BUDGET_FACTOR_SEQUENTIAL,
    ConventionProbe,
    Fixed,
    OpRecord,
    Structure,
    scale_default_probe,
)
from pathmdn_verify.core.strategies import batch_for, batch_levels, capped, shape_rows
from pathmdn_verify.stages import gdn_stages, one_stage


@dataclass(frozen=True)
class GdnCase:
    """One Gated DeltaNet input.  cu_seqlens (varlen) requires B == 1."""
    T: int = 16
    Dk: int = 16
    Dv: int = 16
    B: int = 1
    H: int = 1
    HV: int | None = None        # value heads (grouped value attention: a multiple of H); None: H
    gate: str = "typical"        # alpha = exp(g): typical U(0.5, 0.99); near1: g ~ -1e-3; near0: alpha ~ 1e-3;
    #                              none: g left out (the fused recurrent kernel's no decay)
    beta: str = "typical"        # typical U(0.05, 0.95); near0 ~1e-4; near1 = 1 - ~1e-4; near2 = 2 - ~1e-4;
    #                              none: beta left out (the fused recurrent kernel's beta = 1)
    initial_state: bool = False
    final_state: bool = True     # S_T returned (the canonical call's default); False: output_final_state=False
    qk_norm: float = 1.0         # norm of every q_t and k_t (1: as use_qk_l2norm_in_kernel would make them)
    cu_seqlens: tuple[int, ...] | None = None
    seed: int = 0

    def label(self) -> str:
        return case_label(self)


def gdn_inputs(case: GdnCase, dtype=torch.float64, device="cpu") -> dict:
    """q, k [B, T, H, Dk] of norm case.qk_norm, v [B, T, HV, Dv] in dtype; g = log alpha and beta [B, T, HV] in
    fp32; S0 [N, HV, Dk, Dv] in fp32 when case.initial_state (N sequences: B, or the number of cu_seqlens
    segments); cu_seqlens int32."""
    if case.cu_seqlens is not None and case.B != 1:
        raise ValueError("varlen (cu_seqlens) requires B == 1")
    gen = torch.Generator().manual_seed(case.seed)
    B, HV = case.B, case.HV or case.H
    q, k, v, u = linear_draws(case, gen)
    q, k = case.qk_norm * q, case.qk_norm * k
    g = {"typical": torch.log(u(0.5, 0.99)), "near1": -u(1e-4, 1e-3), "near0": torch.log(u(1e-3, 1e-2)),
         "none": u(0.5, 0.99)}[case.gate]
    beta = {"typical": u(0.05, 0.95), "near0": u(1e-5, 1e-4), "near1": 1 - u(1e-4, 1e-3),
            "near2": 2 - u(1e-4, 1e-3), "none": u(0.05, 0.95)}[case.beta]      # drawn alike: the later draws stay
    N = B if case.cu_seqlens is None else len(case.cu_seqlens) - 1
    S0 = 0.5 * torch.randn(N, HV, case.Dk, case.Dv, generator=gen, dtype=torch.float64) if case.initial_state else None
    return on_device({"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype),
                      "g": None if case.gate == "none" else g.float(),
                      "beta": None if case.beta == "none" else beta.float(),
                      "S0": None if S0 is None else S0.float(),
                      "output_final_state": None if case.final_state else False,
                      "cu_seqlens": cu_seqlens_tensor(case.cu_seqlens)},
                     device)


GDN_REGIMES = {
    "typical": {},
    "gate_near0": {"gate": "near0"},
    "gate_near1": {"gate": "near1"},
    "beta_near0": {"beta": "near0"},
    "beta_near1": {"beta": "near1"},      # the top of the post-sigmoid domain the docstring asks for
    "beta_near2": {"beta": "near2"},      # the top of allow_neg_eigval's [0, 2)
    "initial_state": {"initial_state": True},
}
# The fused recurrent kernel takes beta left out (ones): its cases go to a regime of their own, every other regime
# giving beta, so that its listed fault with grouped value heads (docs/findings.md) is that check's alone.
GDN_RECURRENT_REGIMES = {**{r: {"beta": "typical", **f} for r, f in GDN_REGIMES.items()}, "beta_absent": {"beta": "none"}}
# GDN's chunk is 64: the first T of quick and full spans two chunks (hypothesis' first example and its
# shrinking favour it); at ci the chunk's boundary cases (GDN_STRUCTURE) reach 63, 64, 65 and 130, so the
# first draw is the cheap T = 37 and 80 stays among the draws (as attention.SIZES).  Few, small sizes: the
# fused recurrent kernel runs token by token under the CPU interpreter.
GDN_SIZES = {   # (T values, Dk, Dv, H, B)
    "quick": ((80, 1, 17), (16,), (16,), (1,), (1,)),
    "ci": ((37, 1, 80), (16, 32), (16, 32), (1, 2), (1, 2)),
    "full": ((4096, 1, 100, 1000), (64, 128), (64, 128), (1, 2), (1, 2)),
}

GDN_LAYOUT = ('q, k [B, T, H, K], v [B, T, HV, V] in the dtype checked (HV a multiple of H: value head j reads key '
    'head j // (HV // H)); g [B, T, HV] fp32, log alpha; beta [B, T, HV] fp32; S0 [N, HV, K, V] fp32 or '
    'None; cu_seqlens int32 [N + 1] (varlen, B == 1) or None; scale (None: 1/sqrt(K)); returns (o [B, T, '
    'HV, V], S_T [N, HV, K, V]) of S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = '
    'scale S_t^T q_t')


@st.composite

def gdn_cases(draw, regime: dict, profile: str, max_T: int | None = None):
    """GdnCase for one regime; its shape fields (varlen: cu_seqlens, then B = 1) from one of the `shape_rows`."""
    Ts, Dks, Dvs, Hs, Bs = GDN_SIZES[profile]
    T = draw(st.sampled_from(capped(Ts, max_T)))
    row = draw(shape_rows(Dk=Dks, Dv=Dvs, H=Hs, batch=batch_levels(Bs)))
    B, cu = draw(batch_for(T, row["batch"]))
    return GdnCase(T=T, Dk=row["Dk"], Dv=row["Dv"], H=row["H"], B=B, cu_seqlens=cu, seed=draw(st.integers(0, 2**16)),
                   **regime)


def _boundary_case(T, D, Dv, HQ, H, cu_seqlens, seed, initial_state=False, final_state=True, g_given=True,
                   beta_given=True):
    """A GDN boundary case; a heads pair (HQ, H) is (HV, H) here: HV value heads (grouped value attention where
    HV > H)."""
    return GdnCase(T=T, Dk=D, Dv=Dv, H=H, HV=HQ if HQ != H else None, cu_seqlens=cu_seqlens,
                   initial_state=initial_state, final_state=final_state, gate="typical" if g_given else "none",
                   beta="typical" if beta_given else "none", seed=seed)


def _present(case) -> dict:
    return {"initial_state": case.initial_state, "final_state": case.final_state}


def _present_recurrent(case) -> dict:
    return {**_present(case), "g_given": case.gate != "none", "beta_given": case.beta != "none"}


# fla-core 0.6.0's chunk GDN (fla/ops/gated_delta_rule/chunk.py, fla/ops/common/chunk_delta_h.py) on the H200's
# tiles: the chunk BT = 64 (its fused kkt + solve in 16-token sub-blocks), the state kept as [64, BV] register
# blocks chosen by `if K > 64 / > 128 / > 192` (so Dk 32 and 128 take different code), the initial state
# switches USE_INITIAL_STATE forward and backward, cu_seqlens IS_VARLEN, HV > H (v, g, beta with more heads than
# q, k) the grouped-value offsets i_h // (HV // H).  g is required by the chunk kernels
# (USE_G always on).
GDN_STRUCTURE = Structure(
    lengths={"fwd": {"chunk": 64}, "bwd": {"chunk": 64}}, dims={"quick": (16, 32), "ci": (32, 128), "full": (64, 128)},
    build=_boundary_case, present=_present,
    options={"fwd": ("initial_state", "final_state"), "bwd": ("initial_state", "final_state")},
    heads=((1, 1), (2, 2), (4, 2)))
# fla-core 0.6.0's fused recurrent GDN (fla/ops/gated_delta_rule/fused_recurrent.py, forward only): one program
# per (V block, sequence, value head) walks its sequence one token a step, with the whole key dim in one register
# block BK = next_power_of_2(K) (lanes past K masked) and V in blocks of BV = min(8, next_power_of_2(V)), NV =
# cdiv(V, BV) of them (the last one masked where 8 does not divide V).  No constant over T: the step is one token
# (the launcher's num_stages=3 does not pipeline the loop: on an H100 Triton 3.6 compiles it to plain loads, no
# async copies), so T = 2c + 2 = 4 alone, room for both varlen splits (0, 1, 4) and (0, 2, 4), whose second
# sequence starts at bos > 0; T = 1 is drawn.  Head dims 8 and 20 (100 at full): K = 8 fills BK, K = 20 leaves 12
# masked lanes; V = 8 is one V block, V = 20 three with the last half masked (the drawn 16 and 32 are whole
# blocks).  HV > H the grouped-value head map i_hv // (HV / H); the initial state USE_INITIAL_STATE, cu_seqlens
# IS_VARLEN, g given or left out USE_G (no decay without it), beta left out the launcher's ones, the final state
# STORE_FINAL_STATE.  The entry point's other options are measured by the record's probes (GDN_ENTRY_PARAMS); beta per
# element (IS_BETA_HEADWISE false) and gk / gv are not varied (GDN_ENTRY_PARAMS says why); scale=None is resolved in
# Python before the launch (the scale_default probe).
GDN_RECURRENT_STRUCTURE = Structure(
    lengths={"fwd": {"step": 1}}, dims={"quick": (8, 20), "ci": (8, 20), "full": (8, 100)},
    build=_boundary_case, present=_present_recurrent,
    options={"fwd": ("initial_state", "final_state", "g_given", "beta_given")}, heads=((1, 1), (2, 2), (4, 2)),
    levels={"step": {p: ("2c+2",) for p in ("quick", "ci", "full")}})


# The MDN recurrences (GDN's oracle and same-dtype implementation) run on the CPU under --references auto: they are
# sequential (many small launches), about 2x slower on an H200 than on its host's CPU, and there the same-dtype
# results differ from the CPU's in the last bits (verify/ops/mdn_ops.py).
REFERENCES_ON = "cpu"
GDN_NOT_REACHED = {
    r"^def \w*_npu\w*\(|^def _(g_contig_base|t_block_ptr)\(": (
        "exclude", "fla's Ascend NPU backend (ops/gated_delta_rule/backends/triton_ascend): another device's kernels"),
    r"^def gdn_gate_(fwd|bwd|chunk_cumsum_scalar)_kernel\(": (
        "exclude", "the gate computed in the kernel (use_gate_in_kernel=True with A_log, dt_bias), which "
                   "GatedDeltaNet passes: verified through the layer checks (layer.fla.gdn.*) and, forward only, "
                   "the gate_in_kernel probes; the op's searched checks give g"),
}


def validate_inputs(x: dict) -> None:
    """Gated DeltaNet: q, k [B, T, H, Dk]; v [B, T, HV, Dv] with HV value heads a multiple of H (grouped value
    attention); g, beta [B, T, HV]; S0 [N, HV, Dk, Dv] (N sequences); g = log alpha <= 0, beta in [0, 2]."""
    B, T, H, Dk, Dv = validate.linear_qkv(x, grouped_values=True)
    HV = x["v"].shape[2]
    for n in ("g", "beta"):
        validate.shape(n, x.get(n), (B, T, HV), "[B, T, HV]")
    validate.cu_seqlens(x.get("cu_seqlens"), B, T)
    N = B if x.get("cu_seqlens") is None else x["cu_seqlens"].numel() - 1
    validate.shape("S0", x.get("S0"), (N, HV, Dk, Dv), "[N, HV, Dk, Dv] (N sequences)")
    validate.finite(x)
    validate.interval("g (log alpha)", x.get("g"), -float("inf"), 0.0, lo_open=True, hi_open=False)
    validate.interval("beta", x.get("beta"), 0.0, 2.0, lo_open=False, hi_open=False)
    if x.get("output_final_state") not in (None, True, False):
        raise UsageError(f"output_final_state: {x['output_final_state']!r}, not a bool")


# GDN is MDN without momentum: with mu = 0 (log mu = -inf), p = alpha k and eta = 1 the MDN step is
# S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, GDN's rule (proved by the check
# symbolic.mdn.gdn_reduction; property_tests/unit/test_kernels.py checks this composition against GDN's literal
# rule, with a negative control).  The MDN oracle and same-dtype
# implementation run once per sequence of cu_seqlens.

def gdn_as_mdn(mdn_fn, q, k, v, g=None, beta=None, S0=None, cu_seqlens=None, scale=None, value_groups="consecutive",
               output_final_state=None, **kw):
    """(o, S_T [N, HV, K, V], or None where output_final_state is False) of GDN from an MDN function (MDN.recurrence,
    same_dtype.mdn) with log mu = -inf, eta = 1, sequence by sequence of cu_seqlens (or the whole batch); the
    function's outputs after M_T (the oracle's terms) follow, along T as o.  g left out is no decay (log alpha
    0), beta left out 1.  With HV = G H value heads (grouped value attention) value head j reads key head j // G
    (value_groups "consecutive", fla's convention) or j % H ("strided", the alternative its probe rules out)."""
    g = torch.zeros(v.shape[:3], dtype=v.dtype, device=v.device) if g is None else g
    beta = torch.ones(v.shape[:3], dtype=v.dtype, device=v.device) if beta is None else beta
    G = v.shape[2] // q.shape[2]
    if G > 1:
        q, k = ((t.repeat_interleave(G, dim=2) if value_groups == "consecutive" else t.repeat(1, 1, G, 1))
                for t in (q, k))
    per_sequence = []
    for n, (s, e) in enumerate(P.segments(q.shape[1], cu_seqlens)):
        t = slice(s, e)
        init = None if S0 is None else (S0 if cu_seqlens is None else S0[n:n + 1])
        o, S, _, *more = mdn_fn(q[:, t], k[:, t], v[:, t], g[:, t], torch.full_like(g[:, t], -math.inf), beta[:, t],
                                torch.ones_like(g[:, t]), S0=init, M0=None if init is None else torch.zeros_like(init),
                                scale=scale, **kw)
        per_sequence.append((o, S, *more))
    o, S, *more = zip(*per_sequence)
    return (torch.cat(o, dim=1), None if output_final_state is False else torch.cat(S, dim=0),
            *(torch.cat(m, dim=1) for m in more))


def _gdn_terms(scale, **x):
    o, S, terms = gdn_as_mdn(MDN.recurrence, **x, scale=scale, with_terms=True)
    return (o, S), {"o": terms}


GDN_PROBE_CASE = GdnCase(T=40, seed=5)


def _gdn_probes(name):
    return (
        scale_default_probe(name, GDN_PROBE_CASE),
        ConventionProbe("gate_natural_log", f"measures that fla {name} takes g = ln alpha (not log2 alpha)",
                        "alpha = 2^g", GDN_PROBE_CASE, lambda op, x, s: op.oracle(**{**x, "g": x["g"] * math.log(2)},
                                                                                   scale=s)),
        ConventionProbe("beta_as_given", f"measures that fla {name} uses beta as given (no sigmoid in the kernel)",
                        "beta -> sigmoid(beta)", GDN_PROBE_CASE,
                        lambda op, x, s: op.oracle(**{**x, "beta": torch.sigmoid(x["beta"])}, scale=s)),
        ConventionProbe("qk_as_given", f"measures that fla {name} uses q, k as given (use_qk_l2norm_in_kernel=False)",
                        "q, k l2-normalised", GdnCase(T=40, qk_norm=0.5, seed=5),
                        lambda op, x, s: op.oracle(**{**x, "q": x["q"] / x["q"].norm(dim=-1, keepdim=True),
                                                      "k": x["k"] / x["k"].norm(dim=-1, keepdim=True)}, scale=s)),
        ConventionProbe("final_state_k_by_v", f"measures that fla {name} returns S_T as [N, H, K, V] "
                                              "(state_v_first=False)", "S_T transposed ([V, K])",
                        GdnCase(T=40, initial_state=True, seed=5),
                        lambda op, x, s: tuple(t.transpose(-1, -2) for t in op.oracle(**x, scale=s)), output="S_T"),
        ConventionProbe("varlen_resets_state", f"measures that fla {name} restarts the state at each cu_seqlens "
                                               "boundary", "one sequence (no reset)",
                        GdnCase(T=40, cu_seqlens=(0, 15, 40), seed=5),
                        lambda op, x, s: op.oracle(**{**x, "cu_seqlens": None}, scale=s)),
        ConventionProbe("value_groups_consecutive", f"measures that fla {name}'s value head j reads key head "
                                                    "j // (HV / H) (grouped value attention)",
                        "value head j reads key head j % H", GdnCase(T=40, H=2, HV=4, seed=5),
                        lambda op, x, s: op.oracle(**x, scale=s, value_groups="strided")))



# The entry points' other options, each measured on one case by a probe (pathmdn_verify.core.records.Fixed): the
# kernel with the option given against the oracle under the option's meaning, and away from the oracle without it.

def _l2(t):
    """Rows l2-normalised as fla's in-kernel q / k norm: t / sqrt(sum(t^2) + 1e-6)."""
    return t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)


def _inputs_as(**change):
    """An option's meaning that is a change of the inputs: fn on the inputs with each named one replaced by f(x)."""
    def meaning(fn, x, s):
        return fn(**{**x, **{n: f(x) for n, f in change.items()}}, scale=s)
    return meaning


def _state_v_first(keyword: str):
    """The kernel given S0 as [N, HV, V, K] and `keyword`=True (state_v_first, or its deprecated name), its S_T
    transposed back to [N, HV, K, V]."""
    def given(op, x, s):
        y = {**x, "S0": None if x.get("S0") is None else x["S0"].transpose(-1, -2).contiguous()}
        with fla_ops.entry_keywords(**{keyword: True}):
            o, S = op.kernel(**y, scale=s)
        return o, None if S is None else S.transpose(-1, -2)
    return given


def _gate_parameters(x, dt_bias: bool) -> dict:
    """A_log and dt_bias [HV] (fp32) of the in-kernel gate g = -exp(A_log) softplus(g_raw + dt_bias)."""
    HV, dev = x["v"].shape[2], x["v"].device
    out = {"A_log": torch.linspace(-1.0, 0.5, HV, device=dev)}
    return {**out, "dt_bias": torch.linspace(-2.0, 0.0, HV, device=dev)} if dt_bias else out


def _gate_in_kernel(dt_bias: bool):
    def given(op, x, s):
        with fla_ops.entry_keywords(use_gate_in_kernel=True, **_gate_parameters(x, dt_bias)):
            return op.kernel(**x, scale=s)

    def gated(x):
        p = {n: t.to(x["g"].dtype) for n, t in _gate_parameters(x, dt_bias).items()}
        return -torch.exp(p["A_log"]) * torch.nn.functional.softplus(x["g"] + p.get("dt_bias", 0.0))
    return given, _inputs_as(g=gated)


def _decays(x, gk: bool, gv: bool) -> dict:
    """Per-key and per-value log decays gk [B, T, HV, K], gv [B, T, HV, V] in [log 0.9, 0] (fp32, seeded)."""
    B, T, HV, V = x["v"].shape
    gen = torch.Generator().manual_seed(11)
    draw = lambda d: torch.log(0.9 + 0.1 * torch.rand(B, T, HV, d, generator=gen)).to(x["v"].device)  # noqa: E731
    return {**({"gk": draw(x["q"].shape[-1])} if gk else {}), **({"gv": draw(V)} if gv else {})}


def _key_value_decays(gk: bool, gv: bool):
    """The fused recurrent kernel with gk / gv, against references/gdn_oracle.py's literal walk in the inputs' dtype
    (float64: the oracle; fp32: the same-dtype walk a recurrent kernel is)."""
    def given(op, x, s):
        with fla_ops.entry_keywords(**_decays(x, gk, gv)):
            return op.kernel(**x, scale=s)

    def meaning(fn, x, s):
        decays = {n: t.to(x["v"].dtype) for n, t in _decays(x, gk, gv).items()}
        return GDN_LITERAL.recurrence(x["q"], x["k"], x["v"], x.get("g"), beta=x.get("beta"), S0=x.get("S0"),
                                      cu_seqlens=x.get("cu_seqlens"), scale=s, **decays)
    return given, meaning


def _varlen_metadata(op, x, s):
    """The chunk kernels with cu_seqlens_cpu and chunk_indices (64-token chunks) precomputed, as a layer passes them."""
    from fla.ops.utils import prepare_chunk_indices
    cu = x["cu_seqlens"].long()
    with fla_ops.entry_keywords(cu_seqlens_cpu=cu.cpu(), chunk_indices=prepare_chunk_indices(cu, 64)):
        return op.kernel(**x, scale=s)


def _option_probes(name: str, chunk: bool) -> tuple:
    sigmoid = lambda x: torch.sigmoid(x["beta"])    # noqa: E731
    gate, gate_meaning = _gate_in_kernel(True)
    gate_a, gate_a_meaning = _gate_in_kernel(False)
    state_case = GdnCase(T=40, initial_state=True, seed=5)      # square: its transpose is an alternative of its shape
    probes = [
        ConventionProbe("qk_l2norm_in_kernel", f"measures that fla {name} with use_qk_l2norm_in_kernel=True "
                        "l2-normalises q and k", "q, k as given", GdnCase(T=40, qk_norm=0.5, seed=5), kind="option",
                        given=fla_ops.given_with(use_qk_l2norm_in_kernel=True), options=("use_qk_l2norm_in_kernel",),
                        meaning=_inputs_as(q=lambda x: _l2(x["q"]), k=lambda x: _l2(x["k"]))),
        ConventionProbe("beta_sigmoid_in_kernel", f"measures that fla {name} with use_beta_sigmoid_in_kernel=True "
                        "uses sigmoid(beta)", "beta as given", GDN_PROBE_CASE, kind="option",
                        given=fla_ops.given_with(use_beta_sigmoid_in_kernel=True),
                        options=("use_beta_sigmoid_in_kernel",), meaning=_inputs_as(beta=sigmoid)),
        ConventionProbe("neg_eigval", f"measures that fla {name} with allow_neg_eigval=True (and the beta sigmoid) "
                        "uses 2 sigmoid(beta)", "sigmoid(beta)", GDN_PROBE_CASE, kind="option",
                        given=fla_ops.given_with(use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True),
                        options=("allow_neg_eigval", "use_beta_sigmoid_in_kernel"),
                        meaning=_inputs_as(beta=lambda x: 2 * sigmoid(x)),
                        alternative=lambda op, x, s: op.oracle(**{**x, "beta": sigmoid(x)}, scale=s)),
        ConventionProbe("neg_eigval_needs_sigmoid", f"measures that fla {name} refuses allow_neg_eigval=True without "
                        "the beta sigmoid", r"allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True",
                        GDN_PROBE_CASE, kind="refused", given=fla_ops.given_with(allow_neg_eigval=True),
                        options=("allow_neg_eigval",)),
        ConventionProbe("state_v_first", f"measures that fla {name} with state_v_first=True takes and returns the "
                        "state as [N, HV, V, K]", "S_T as [K, V]", state_case, kind="option",
                        given=_state_v_first("state_v_first"), options=("state_v_first",), output="S_T",
                        meaning=_inputs_as(), alternative=lambda op, x, s: tuple(
                            None if t is None else t.transpose(-1, -2) for t in op.oracle(**x, scale=s))),
        ConventionProbe("transpose_state_layout", f"measures that fla {name}'s deprecated transpose_state_layout=True "
                        "is state_v_first=True", "S_T as [K, V]", state_case, kind="option",
                        given=_state_v_first("transpose_state_layout"), options=("transpose_state_layout",),
                        output="S_T", meaning=_inputs_as(), alternative=lambda op, x, s: tuple(
                            None if t is None else t.transpose(-1, -2) for t in op.oracle(**x, scale=s))),
        ConventionProbe("gate_in_kernel", f"measures that fla {name} with use_gate_in_kernel=True, A_log and dt_bias "
                        "uses g = -exp(A_log) softplus(g + dt_bias)", "g as given", GDN_PROBE_CASE, kind="option",
                        given=gate, options=("use_gate_in_kernel", "A_log", "dt_bias"), meaning=gate_meaning),
        ConventionProbe("gate_in_kernel_no_bias", f"measures that fla {name} with use_gate_in_kernel=True and A_log "
                        "alone uses g = -exp(A_log) softplus(g)", "g as given", GDN_PROBE_CASE, kind="option",
                        given=gate_a, options=("use_gate_in_kernel", "A_log"), meaning=gate_a_meaning)]
    if chunk:
        probes += [ConventionProbe(f"chunk_size_{c}", f"measures fla {name} with chunk_size={c} against the oracle",
                                   "", GdnCase(T=40, initial_state=True, seed=5), kind="option",
                                   given=fla_ops.given_with(chunk_size=c), options=("chunk_size",),
                                   meaning=_inputs_as(), discriminates=False) for c in (16, 32)]
        probes.append(ConventionProbe("varlen_metadata_no_effect", f"measures that fla {name} gives the same bits "
                                      "with cu_seqlens_cpu and chunk_indices precomputed", "",
                                      GdnCase(T=140, cu_seqlens=(0, 3, 70, 140), initial_state=True, seed=5),
                                      kind="no_effect", given=_varlen_metadata,
                                      options=("cu_seqlens_cpu", "chunk_indices")))
    else:
        for n, gk, gv in (("key_decay", True, False), ("value_decay", False, True)):
            given, meaning = _key_value_decays(gk, gv)
            probes.append(ConventionProbe(n, f"measures fla {name} with {'gk' if gk else 'gv'} (per-"
                                          f"{'key' if gk else 'value'} log decays) against the literal rule",
                                          "no such decay", GdnCase(T=20, Dk=16, Dv=20, initial_state=True, seed=5),
                                          kind="option", given=given, options=("gk",) if gk else ("gv",),
                                          meaning=meaning))
    return tuple(probes)


def _entry_params(chunk: bool) -> dict:
    """Each option of the entry point (with a default) -> the record's optional input that varies it, or a Fixed."""
    probe = lambda name, why: Fixed("probe", name, why)      # noqa: E731
    out = {"scale": probe("scale_default", "scale=None is 1/sqrt(K); every other check gives it"),
           "initial_state": "S0", "output_final_state": "output_final_state", "cu_seqlens": "cu_seqlens",
           "use_qk_l2norm_in_kernel": probe("qk_l2norm_in_kernel", "the layer passes True (layer.fla.gdn.*)"),
           "use_beta_sigmoid_in_kernel": probe("beta_sigmoid_in_kernel,neg_eigval", "beta a logit"),
           "allow_neg_eigval": probe("neg_eigval,neg_eigval_needs_sigmoid", "beta in (0, 2), with the sigmoid only"),
           "state_v_first": probe("state_v_first", "the state's layout: [V, K] instead of [K, V]"),
           "transpose_state_layout": probe("transpose_state_layout", "read from **kwargs: state_v_first's old name"),
           "use_gate_in_kernel": probe("gate_in_kernel,gate_in_kernel_no_bias", "the layer's in-kernel gate"),
           "A_log": probe("gate_in_kernel,gate_in_kernel_no_bias", "the in-kernel gate's decay rate"),
           "dt_bias": probe("gate_in_kernel", "the in-kernel gate's bias")}
    if chunk:
        return {**out, "chunk_size": probe("chunk_size_16,chunk_size_32", "read from **kwargs; 64 elsewhere"),
                "cu_seqlens_cpu": Fixed("no_effect", "varlen_metadata_no_effect", "a host copy of cu_seqlens"),
                "chunk_indices": Fixed("no_effect", "varlen_metadata_no_effect", "precomputed 64-token chunks"),
                "cp_context": Fixed("multi_device", "FLACPContext", "context parallelism over a process group")}
    return {**out, "g": "g", "beta": "beta", "gk": probe("key_decay", "per-key decays (KDA-style gates)"),
            "gv": probe("value_decay", "per-value decays")}


# Planted bugs (pathmdn_verify.platform.mutation.Mutant): each must turn one of its killer checks red (`verify mutants`).
GDN_MUTANTS = (
    # Gated DeltaNet (Triton)
    # structural: a tile config other than the first (--configs cover runs every config; first never does)
    Mutant("gdn_chunk_o_bk32_state_dropped", "GDN chunk output: the inter-chunk term q @ h dropped when BK == 32 "
           "(chunk_fwd_kernel_o's third config: caught only when that config runs)", "ops/common/chunk_o.py",
           "        else:\n            b_o = tl.dot(b_q, b_h, b_o)\n",
           "        elif BK != 32:\n            b_o = tl.dot(b_q, b_h, b_o)\n",
           ("kernel.fla.gdn_chunk.fwd.fp32.initial_state", "kernel.fla.gdn_chunk.fwd.bf16.initial_state")),
    # structural: reached only by the boundary cases (Dk = 128: the state's second 64-row register block)
    Mutant("gdn_chunk_second_k_block_not_decayed", "GDN chunk: the state's rows 64..127 (K > 64) not decayed by the "
           "chunk's gate (only the first 64-row block is)", "ops/common/chunk_delta_h.py",
           "            if K > 64:\n                b_h2 *= b_g_last\n", "",
           ("kernel.fla.gdn_chunk.fwd.fp32.initial_state", "kernel.fla.gdn_chunk.fwd.bf16.gate_near0")),
    # structural: a long sequence in a varlen batch (its states' slots must start after the earlier sequences'
    # chunks; i_n * NT is right only while every sequence has as many chunks as this one)
    Mutant("gdn_chunk_varlen_state_offset", "GDN chunk, varlen: sequence n's chunk states stored and read from slot "
           "n * NT (its own chunk count) instead of the earlier sequences' chunk total (hides while the sequences "
           "have equal chunk counts)", "ops/common/chunk_delta_h.py",
           "        boh = tl.load(chunk_offsets + i_n).to(tl.int64)\n", "        boh = (i_n * NT).to(tl.int64)\n",
           # the boundary case (0, 1, 130) at ci, which boundaries.assign gives to fp32 beta_near1: a 129-token
           # sequence of 3 chunks after a 1-chunk one (fp32 beta_near0 held it until the final state became a
           # factor of the boundary cases)
           ("kernel.fla.gdn_chunk.fwd.fp32.beta_near1",), count=2),
    # structural: reached only by the boundary cases (Dk = 128 with Dv = 32 and an initial state: the state's
    # second 64-row block masked by the wrong head dim, which hides whenever Dk == Dv; cc4d4d2's ci had Dk <= 32)
    Mutant("gdn_chunk_initial_state_rows_masked_by_v", "GDN chunk, K > 64: the initial state's rows 64..127 loaded "
           "under the mask o_k < V instead of o_k < K (read as 0 when Dv < Dk; the same bits when Dk == Dv)",
           "ops/common/chunk_delta_h.py", "                m_h0_2 = m_k2[:, None] & m_v[None, :]\n",
           "                m_h0_2 = (o_k2 < V)[:, None] & m_v[None, :]\n",
           # the ci boundary cases Dk = 128, Dv = 32 with an initial state: bf16 gate_near0 and beta_near0
           ("kernel.fla.gdn_chunk.fwd.bf16.gate_near0", "kernel.fla.gdn_chunk.fwd.bf16.beta_near0")),
    # structural: reached only by the boundary cases with grouped value heads (HV = 4 > H = 2)
    Mutant("gdn_chunk_gva_dq_first_group_only", "GDN chunk backward, grouped value heads: dq takes the first value "
           "head of each key head's group instead of the sum over the group (the same when HV == H)",
           "ops/common/chunk_o.py", "        dq = dq.view(B, T, H, HV // H, K).sum(3)\n",
           "        dq = dq.view(B, T, H, HV // H, K)[:, :, :, 0]\n",
           ("kernel.fla.gdn_chunk.bwd.fp32.typical",)),
    Mutant("gdn_recurrent_gate_base2", "GDN fused recurrent: the state decayed by 2^g instead of e^g (fla's chunk "
           "kernels work in base 2; the recurrent one takes g = ln alpha)", "ops/gated_delta_rule/fused_recurrent.py",
           "            b_h *= exp(b_g)\n", "            b_h *= tl.exp2(b_g)\n",
           ("kernel.fla.gdn_recurrent.convention.gate_natural_log", "kernel.fla.gdn_recurrent.fwd.fp32.typical")),
    # structural: reached only by the boundary cases of the fused recurrent kernel (GDN_RECURRENT_STRUCTURE): no
    # drawn case has grouped value heads, and the value_groups probe's one dense sequence starts at bos = 0
    Mutant("gdn_recurrent_gate_offset_by_key_heads", "GDN fused recurrent, grouped value heads: a sequence's "
           "first gate read at bos * H instead of bos * HV (g has HV heads; the same when HV == H or bos == 0)",
           "ops/gated_delta_rule/fused_recurrent.py", "        p_g = g + bos * HV + i_hv\n",
           "        p_g = g + bos * H + i_hv\n",
           # the regression case of fp32 gate_near0 (the boundary cases with HV = 4 and bos > 0 leave g or beta out)
           ("kernel.fla.gdn_recurrent.fwd.fp32.gate_near0",)),
    # structural: reached only by the boundary cases of the fused recurrent kernel (Dv = 20: V blocks of BV = 8,
    # the last one partial; the drawn Dv 16 and 32 are whole blocks)
    Mutant("gdn_recurrent_v_blocks_rounded_down", "GDN fused recurrent: the launcher's count of V blocks rounded "
           "down (V // BV instead of cdiv(V, BV)), so the last, partial block of o and S_T is never computed (the "
           "same when BV divides V)", "ops/gated_delta_rule/fused_recurrent.py", "    NV = triton.cdiv(V, BV)\n",
           "    NV = V // BV\n",
           # at ci boundaries.assign gives the cases with Dv = 20 to fp32 typical, bf16 gate_near1 and bf16 beta_near0
           ("kernel.fla.gdn_recurrent.fwd.fp32.typical", "kernel.fla.gdn_recurrent.fwd.bf16.beta_near0")),
    # structural: reached only by the boundary cases that leave g out (the drawn cases and the regimes give it)
    Mutant("gdn_recurrent_decay_without_g", "GDN fused recurrent: without g the state still decays (by 0.99 a step) "
           "instead of being kept", "ops/gated_delta_rule/fused_recurrent.py",
           "        if USE_GK:\n            b_gk = tl.load(p_gk, mask=mask_k, other=0).to(tl.float32)\n",
           "        if not USE_G:\n            b_h *= 0.99\n        if USE_GK:\n"
           "            b_gk = tl.load(p_gk, mask=mask_k, other=0).to(tl.float32)\n",
           ("kernel.fla.gdn_recurrent.fwd.bf16.typical", "kernel.fla.gdn_recurrent.fwd.fp32.beta_near0")),
    Mutant("gdn_chunk_state_decay_dropped", "GDN chunk: the in-chunk decay of the keys entering the chunk state "
           "dropped", "ops/common/chunk_delta_h.py",
           "b_v = b_v * tl.where(m_t, exp2(b_g_last - b_g), 0)[:, None]", "b_v = b_v * tl.where(m_t, 1.0, 0)[:, None]",
           # bf16: the fp32 checks wait for a TF32 same-dtype implementation (fla's chunk dots are TF32)
           ("kernel.fla.gdn_chunk.fwd.bf16.typical",)),
)


def _gdn_op(name, chunk, budget_factor, passes, stages, dot=None, device_cases=(), structure=None,
            regression_cases=None):
    gates = ("g", "beta")            # required by the chunk kernels; the fused recurrent one takes them optional
    return OpRecord(
        name=name, title=name,
        kernel=lambda scale, **x: fla_ops.gated_delta_rule(**x, scale=scale, chunk=chunk),
        conventions=fla_ops.GDN_CONVENTIONS,
        oracle=lambda scale, **x: gdn_as_mdn(MDN.recurrence, **x, scale=scale),
        same_dtype=lambda prec, scale, **x: gdn_as_mdn(same_dtype.mdn, **x, scale=scale, prec=prec),
        make_inputs=gdn_inputs, required=("q", "k", "v", *(gates if chunk else ())),
        optional=(*(() if chunk else gates), "S0", "output_final_state", "cu_seqlens"),
        grad_inputs=("q", "k", "v", "g", "beta", "S0"), outputs=("o", "S_T"), fp32_outputs=("S_T",),
        regimes=GDN_REGIMES if chunk else GDN_RECURRENT_REGIMES,
        cases=gdn_cases, budget_factor=budget_factor, error_inputs=validate_inputs, passes=passes, dot=dot,
        sample_case=GdnCase(T=8, seed=1, initial_state=True, cu_seqlens=(0, 3, 8)),
        terms=_gdn_terms,
        probes=_gdn_probes(name) + _option_probes(name, chunk), entry=functools.partial(fla_ops.gdn_entry, chunk),
        entry_params=_entry_params(chunk),
        examples={"quick": 1, "ci": 2, "full": 5},     # the CPU interpreter runs GDN token by token: few draws
        device_cases=device_cases, package=("fla.ops.gated_delta_rule",), not_reached=GDN_NOT_REACHED,
        refusal=fla_ops.missing_backward, layout=GDN_LAYOUT, unsupported=fla_ops.gdn_unsupported(chunk),
        references=REFERENCES_ON, regression_cases=regression_cases or {},
        mutants=tuple(m for m in GDN_MUTANTS if op_of(m.killers[0]) == name), structure=structure, stages=stages)


# fla's fused recurrent GDN has no backward (its autograd backward raises NotImplementedError) and no tl.dot:
# its fp32 arithmetic is IEEE.  The chunk kernels' fp32 dots are Triton's default (TF32 on the GPU).
GDN_CHUNK = _gdn_op(
    "gdn_chunk", True, BUDGET_FACTOR_BLOCKWISE, ("fwd", "bwd"),
    {"fwd": lambda op, x, dtype, fp32_dot: gdn_stages.stages(op, x, dtype, fp32_dot),
     "bwd": lambda op, x, dtype, fp32_dot: gdn_stages.stages(op, x, dtype, fp32_dot, backward=True)},
    device_cases=tuple((dtype, GdnCase(T=256, Dk=64, Dv=64, initial_state=True, seed=4)) for dtype in ("fp32", "bf16")),
    structure=GDN_STRUCTURE,
    # coverage: grouped value heads in the backward of a check that passes (at ci the boundary cases give the fp32
    # backward's HV > H pair to gate_near0, a listed check, whose own failure the ratchet judges by kind only)
    regression_cases={"bwd.fp32.typical": [GdnCase(T=70, H=2, HV=4, initial_state=True, seed=6)]})
GDN_RECURRENT = _gdn_op(
    "gdn_recurrent", False, BUDGET_FACTOR_SEQUENTIAL, ("fwd",),
    # one Triton kernel walks the tokens with the state in registers: it writes nothing in between
    {"fwd": one_stage("fused recurrent kernel (one stage)", "fused_recurrent_gated_delta_rule_fwd_kernel", "fwd")},
    dot="ieee", device_cases=(("fp32", GdnCase(T=256, Dk=64, Dv=64, gate="near1", seed=5)),),
    structure=GDN_RECURRENT_STRUCTURE,
    # grouped value heads with g and beta given in a second sequence (bos > 0): the head offsets of g
    regression_cases={"fwd.fp32.gate_near0": [GdnCase(T=4, Dk=8, Dv=8, H=2, HV=4, gate="near0", cu_seqlens=(0, 2, 4),
                                                      seed=6)]})

