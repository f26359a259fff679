"""PaTH and FoX (softmax attention): their case type, input builder, regimes and hypothesis strategy,
input validation, and records (docs/design.md sections 3 and 7).

One place defines what "beta near 2" or "aligned w" means; the oracle checks call `path_inputs` with
fixed seeds and the kernel checks draw the case fields through `path_cases`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify import same_dtype
from pathmdn_verify.core import validate
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.inputs import case_label, cu_seqlens_tensor, on_device, patterned
from pathmdn_verify.platform.mutation import Mutant
from pathmdn_verify.core.records import (
    BUDGET_FACTOR_BLOCKWISE,
    ConventionProbe,
    Decode,
    Fixed,
    OpRecord,
    Structure,
    scale_default_probe,
)
from pathmdn_verify.core.strategies import batch_for, batch_levels, capped, drawn, shape_rows
from pathmdn_verify.stages import fox_stages, one_stage, path_stages

BETA_REGIMES = ("uniform", "near2_2", "near2_4", "near2_7", "two", "tiny")
W_REGIMES = ("random", "aligned", "antialigned")
GATE_REGIMES = ("none", "mixed", "weak", "strong")


@dataclass(frozen=True)
class PathCase:
    """One PaTH / FoX input: shapes, regimes and seed.  cu_seqlens (varlen) requires B == 1."""
    T: int = 16
    D: int = 16
    Dv: int = 16
    B: int = 1
    HQ: int = 1
    H: int = 1
    beta: str = "uniform"
    w: str = "random"
    gate: str = "none"
    logit_gain: float = 1.0      # multiplies q and k: large values saturate the softmax
    cu_seqlens: tuple[int, ...] | None = None
    seed: int = 0
    values: str = "seeded"       # q, k, v: seeded, or ones / one_hot (pathmdn_verify.core.inputs.patterned), times 2^value_scale
    value_scale: int = 0

    def label(self) -> str:
        return case_label(self)


def _beta(regime: str, shape, gen) -> torch.Tensor:
    u = torch.rand(shape, generator=gen, dtype=torch.float64)
    if regime == "uniform":
        return 2 * u.clamp_min(1e-3)
    if regime.startswith("near2_"):
        return torch.full(shape, 2 - 10.0 ** -int(regime.split("_")[1]), dtype=torch.float64)
    if regime == "two":
        return torch.full(shape, 2.0, dtype=torch.float64)
    if regime == "tiny":
        return 1e-8 * (1 + u)
    raise ValueError(f"unknown beta regime {regime!r}; known: {BETA_REGIMES}")


def _w(regime: str, shape, gen) -> torch.Tensor:
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if regime == "random":
        pass
    elif regime in ("aligned", "antialigned"):
        base = torch.randn(shape[:2] + (1,) + shape[3:], generator=gen, dtype=torch.float64)
        x = base + 1e-3 * x                         # nearly parallel: ill-conditioned UT solve
        if regime == "antialigned":
            sign = torch.tensor([(-1.0) ** t for t in range(shape[1])], dtype=torch.float64)
            x = x * sign[None, :, None, None]
    else:
        raise ValueError(f"unknown w regime {regime!r}; known: {W_REGIMES}")
    return x / x.norm(dim=-1, keepdim=True)


def _gate(regime: str, shape, gen) -> torch.Tensor | None:
    if regime == "none":
        return None
    z = torch.randn(shape, generator=gen, dtype=torch.float64)
    if regime == "mixed":
        return F.logsigmoid(2 * z)
    if regime == "weak":                            # f close to 1: log f ~ -1e-3
        return F.logsigmoid(7 + z)
    if regime == "strong":                          # f ~ 0.05: attention decays within a few tokens
        return F.logsigmoid(-3 + z)
    raise ValueError(f"unknown gate regime {regime!r}; known: {GATE_REGIMES}")


def path_inputs(case: PathCase, dtype=torch.float64, device="cpu", gate_dtype=torch.float32,
                w_dtype=torch.float32) -> dict:
    """q, k, v in dtype; w, beta, g in their own dtypes (fla keeps them in fp32); cu_seqlens int32."""
    if case.cu_seqlens is not None and case.B != 1:
        raise ValueError("varlen (cu_seqlens) requires B == 1")
    gen = torch.Generator().manual_seed(case.seed)
    B, T = case.B, case.T
    q = case.logit_gain * torch.randn(B, T, case.HQ, case.D, generator=gen, dtype=torch.float64)
    k = case.logit_gain * torch.randn(B, T, case.H, case.D, generator=gen, dtype=torch.float64)
    v = torch.randn(B, T, case.H, case.Dv, generator=gen, dtype=torch.float64)
    q, k, v = (patterned(t, case.values, case.value_scale) for t in (q, k, v))
    w = _w(case.w, (B, T, case.H, case.D), gen)
    beta = _beta(case.beta, (B, T, case.H), gen)
    g = _gate(case.gate, (B, T, case.HQ), gen)
    w = w.to(w_dtype)
    return on_device({"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype), "w": w / w.norm(dim=-1, keepdim=True),
                      "beta": beta.to(w_dtype), "g": None if g is None else g.to(gate_dtype),
                      "cu_seqlens": cu_seqlens_tensor(case.cu_seqlens)},
                     device)


# Regimes: name -> PathCase fields
PATH_REGIMES = {
    "beta_uniform": {},
    "beta_near2": {"beta": st.sampled_from(["near2_2", "near2_4", "near2_7"])},
    "beta_two": {"beta": "two"},
    "w_aligned": {"w": "aligned"},
    "w_antialigned": {"w": "antialigned"},
    "saturated": {"logit_gain": 4.0},
    # |q|, |k| beyond fp16's largest value (65504): gains 2e4 .. 1e6 give max |q| ~ 8e4 .. 4e6, values any fp32 or
    # bf16 tensor holds (the report's magnitude sweep found PaTH and FoX non-finite there on an H200)
    "magnitude": {"logit_gain": st.sampled_from([2e4, 1e5, 1e6])},
    "gate_strong": {"gate": "strong"},
    "gate_weak": {"gate": "weak"},
}
FOX_REGIMES = {k: PATH_REGIMES[k] for k in ("saturated", "magnitude", "gate_strong", "gate_weak")} | \
    {"gate_mixed": {"gate": "mixed"}}

# Hypothesis' first example (its simplest) and its shrinking favour the first element of each size.  At quick
# and full the first T spans several kernel blocks (PaTH 64, FoX's query block 128), which a bug in
# cross-block code needs; at ci the boundary cases of the structure (below) reach every block boundary, so
# the first draw is the cheap T = 37, inside one block (measured: a PaTH backward at T = 160 costs 1.5-2.0 s
# under the interpreter, 4-5x one at 37), and 160 stays among the draws.
SIZES = {   # (T values, head dims D, value dims Dv, (HQ, H) pairs, batch sizes)
    "quick": ((160, 1, 23), (16,), (16,), ((1, 1), (2, 1)), (1,)),
    "ci": ((37, 1, 100, 160), (16, 32), (16, 32), ((1, 1), (2, 1), (4, 2)), (1, 2)),
    "full": ((4096, 1, 100, 1000), (16, 32, 64, 128), (16, 64, 128), ((1, 1), (2, 1), (4, 2)), (1, 2)),
}


@st.composite
def path_cases(draw, regime: dict, profile: str, gated: bool | None = None, max_T: int | None = None):
    """PathCase for one regime; gated=True forces a forget gate, None lets hypothesis choose (a row's gate
    level, unless the regime fixes the gate).  The shape fields come from one of the op's `shape_rows`."""
    Ts, Ds, Dvs, heads, Bs = SIZES[profile]
    T = draw(st.sampled_from(capped(Ts, max_T)))
    row = draw(shape_rows(D=Ds, Dv=Dvs, heads=heads, batch=batch_levels(Bs),
                          gate=(False, True) if gated is None else (bool(gated),)))
    B, cu = draw(batch_for(T, row["batch"]))
    fields = {name: draw(drawn(v)) for name, v in regime.items()}
    if "gate" not in fields and gated is not False:
        fields["gate"] = "mixed" if row["gate"] else "none"
    HQ, H = row["heads"]
    return PathCase(T=T, D=row["D"], Dv=row["Dv"], B=B, HQ=HQ, H=H, cu_seqlens=cu, seed=draw(st.integers(0, 2**16)),
                    **fields)


def _boundary_case(T, D, Dv, HQ, H, cu_seqlens, seed, g=True):
    return PathCase(T=T, D=D, Dv=Dv, HQ=HQ, H=H, cu_seqlens=cu_seqlens, gate="mixed" if g else "none", seed=seed)


# fla-core 0.6.0 on the H200's tiles (fla/ops/path_attn/parallel.py): BS = 64 (the UT / Householder chunk),
# BT = 128 (the query and key blocks of the parallel loops), S = 512 (the backward's super-block, NUM_BLOCKS =
# cdiv(T, S) transformed query copies); the decode cache (prepare_k_cache.py) walks the later BS-blocks.
# The gate g switches USE_G / USE_GATE in every kernel, cu_seqlens IS_VARLEN, HQ > H the GQA reduction.
# The decode check judges the key cache alone, which prepare_k_cache builds in BS = 64 blocks (BT=BS there)
# from k, w and beta: its only constant is the chunk (the forward's 128-token blocks produce o, not judged
# there; the fwd checks cover them).
# At ci the super-block gets one level, T = 514: one boundary crossed, and the varlen batch (0, 1, 514) has a
# long sequence of 513 tokens, past it too (511 and 512 stay inside one super-block, whose 128-token blocks
# the other levels cover).  A PaTH backward at T = 1026 costs 15-25 s under the interpreter, 4x one at 514:
# 2c + 2 runs at full (on a GPU) and, at every profile, as one regression case of bwd.fp32.beta_uniform (K == V,
# where the array's T > 300 cases have K != V and meet the listed dv defect).
PATH_STRUCTURE = Structure(
    lengths={"fwd": {"chunk": 64, "block": 128}, "bwd": {"chunk": 64, "block": 128, "super_block": 512},
             "decode": {"chunk": 64}},
    dims={"quick": (16, 32), "ci": (16, 32), "full": (64, 128)}, build=_boundary_case,
    present=lambda case: {"g": case.gate != "none"}, options={"fwd": ("g",), "bwd": ("g",)},
    heads=((1, 1), (2, 1)), levels={"super_block": {"ci": ("c+2",)}}, costly={"ci": 300, "full": 600},
    value_regimes=("magnitude",))
# FoX (fla/ops/attn/parallel.py on hopper): query block BT = 128, key block BS = 64 in the forward and the
# backward; the forget gate g switches USE_G (parallel_forgetting_attn passes g, None included, to parallel_attn,
# which takes the ungated path then), cu_seqlens IS_VARLEN.
FOX_STRUCTURE = Structure(
    lengths={"fwd": {"key_block": 64, "query_block": 128}, "bwd": {"key_block": 64, "query_block": 128}},
    dims={"quick": (16, 32), "ci": (16, 32), "full": (64, 128)}, build=_boundary_case,
    present=lambda case: {"g": case.gate != "none"}, options={"fwd": ("g",), "bwd": ("g",)},
    heads=((1, 1), (2, 1)), value_regimes=("magnitude",))


def validate_inputs(x: dict, head_dims: tuple[int, ...]) -> None:
    """PaTH / FoX: q [B, T, HQ, D]; k, w [B, T, H, D]; v [B, T, H, Dv]; beta [B, T, H]; g [B, T, HQ];
    ||w_t|| = 1, beta in (0, 2], g = log f <= 0."""
    q, k, v = x["q"], x["k"], x["v"]
    for n, t in (("q", q), ("k", k), ("v", v)):
        validate.rank(n, t, 4, "[B, T, H, D]")
    B, T, HQ, D = q.shape
    H = k.shape[2]
    validate.tokens(T)
    validate.shape("k", k, (B, T, H, D), "[B, T, H, D] (B, T, D of q)")
    validate.shape("v", v, (B, T, H, v.shape[3]), "[B, T, H, Dv] (B, T, H of k)")
    validate.shape("w", x.get("w"), k.shape, "the shape of k [B, T, H, D]")
    validate.shape("beta", x.get("beta"), (B, T, H), "[B, T, H]")
    validate.shape("g", x.get("g"), (B, T, HQ), "[B, T, HQ]")
    validate.heads(HQ, H)
    for n, d in (("q/k", D), ("v", v.shape[3])):
        if d not in head_dims:
            raise UsageError(f"{n}: head dim {d} not supported by the kernel (supported: {head_dims})")
    validate.cu_seqlens(x.get("cu_seqlens"), B, T)
    validate.finite(x)
    if x.get("w") is not None:
        validate.unit_norm("w", x["w"])
    validate.interval("beta", x.get("beta"), 0.0, 2.0, lo_open=True, hi_open=False)
    validate.interval("g (log forget gate)", x.get("g"), -float("inf"), 0.0, lo_open=True, hi_open=False)



# Lines of the kernel package the checks deliberately do not reach (verify coverage): regex of source lines ->
# (kind, why).  coverage.py's own exclusion: "exclude" drops the matched lines and the block a matched line
# opens (and the branch into it) from the counts, "partial" accepts a branch of the matched line that only
# ever goes one way.  Not reached is not verified: each reason says why that is a deliberate limit of the
# toolkit, not a gap in the checks.
PATH_NOT_REACHED = {
    r"^[ \t]*if cu_seqlens is not None and q\.shape\[0\] != 1:": (
        "exclude", "fla's refusal of varlen input with batch > 1: pathmdn_verify.core.validate rejects that input first"),
    r"^[ \t]*if RETURN_H:": (
        "exclude", "parallel.py always calls the backward's prepare kernel with return_h=False"),
    r"^[ \t]*if BS == BT:": (
        "exclude", "parallel.py never picks equal tile sizes (BS 64 or 32, BT 128 or 64 with BS < BT)"),
}

FOX_NOT_REACHED = {
    r"^def _build_parallel_attn_(fwd|bwd)_kernel\(": (
        "exclude", "fla's TileLang backend of the attention kernels (ops/attn/backends/tilelang): another backend, "
                   "which neither the Triton path on CUDA nor the CPU interpreter runs"),
    r"^def naive_attn_decoding_kernel\(": (
        "exclude", "the one-step decoding kernel that ForgettingAttention and PaTHAttention call while generating: "
                   "verified through their layer checks (layer.fla.fox.*.generation, layer.fla.path.*.generation)"),
}

# Planted bugs (pathmdn_verify.platform.mutation.Mutant): each must turn one of its killer checks red (`verify mutants`).
PATH_FWD, PATH_PRE, PATH_API = ("ops/path_attn/parallel_path_fwd.py", "ops/path_attn/intra_chunk_preprocess_fwd.py",
                                "ops/path_attn/parallel.py")
FOX_FILE = "ops/attn/parallel.py"
PATH_MUTANTS = (
    # PaTH (Triton)
    Mutant("path_zero_mask", "PaTH forward: a zero causal mask instead of -inf inside the diagonal block", PATH_FWD,
           'b_s = tl.where(m_s[:, None], b_s * sm_scale, float("-inf"))',
           "b_s = tl.where(m_s[:, None], b_s * sm_scale, 0.0)",
           ("kernel.fla.path_attn.fwd.bf16.beta_uniform",)),
    Mutant("path_beta_clipped", "PaTH: beta clipped below 2 (no exact reflections)", PATH_API,
           "o, k_cache = ParallelPATHAttentionFunction.apply(q, k, v, w, beta, g, scale, cu_seqlens, use_cache)",
           "o, k_cache = ParallelPATHAttentionFunction.apply(q, k, v, w, beta.clamp(max=1.99), g, scale, "
           "cu_seqlens, use_cache)",
           # not state_tracking.fp32: it is a listed failure (xfail), which this mutant cannot turn red
           ("kernel.fla.path_attn.bwd.fp32.beta_two", "kernel.fla.path_attn.fwd.fp32.beta_two")),
    Mutant("path_householder_reversed", "PaTH forward: in-block query transform uses U^T, i.e. the Householder "
           "product in reversed order", PATH_PRE,
           "b_qwT = tl.dot(b_qw, b_T.to(b_q.dtype))", "b_qwT = tl.dot(b_qw, tl.trans(b_T).to(b_q.dtype))",
           ("kernel.fla.path_attn.fwd.fp32.beta_uniform",)),
    Mutant("path_transition_ut_untransposed", "PaTH forward: block transition F_b built from U instead of U^T "
           "(the UT factor without its transpose)", PATH_PRE,
           "b_Twb = tl.dot(b_T, b_w)", "b_Twb = tl.dot(tl.trans(b_T), b_w)",
           # killed where a check's boundary cases cross a 128-token block (T = 129, 130, 258): 10x, 3.2x
           ("kernel.fla.path_attn.fwd.fp32.saturated", "kernel.fla.path_attn.fwd.bf16.w_aligned")),
    Mutant("path_transition_no_identity", "PaTH forward: cross-block transition F_b = -W^T U^T W (the \"I -\" "
           "dropped, as printed in the paper)", PATH_FWD,
           "        b_s2 = tl.dot(b_q.to(b_w1.dtype), b_w1)\n        b_q -= tl.dot(b_s2.to(b_w2.dtype), b_w2)\n\n",
           "        b_s2 = tl.dot(b_q.to(b_w1.dtype), b_w1)\n        b_q = -tl.dot(b_s2.to(b_w2.dtype), b_w2)\n\n",
           ("kernel.fla.path_attn.fwd.fp32.saturated", "kernel.fla.path_attn.fwd.bf16.w_aligned")),
    Mutant("path_transition_mask_dropped", "PaTH forward: in the diagonal block, the Householders of a key sub-block "
           "also applied to the queries that precede it (mask dropped)", PATH_FWD,
           "        b_s2 = tl.where(m_s[:, None], b_s2, 0)\n", "",
           ("kernel.fla.path_attn.fwd.fp32.w_antialigned", "kernel.fla.path_attn.fwd.fp32.beta_two")),
    Mutant("path_gate_unscaled", "PaTH forward: in-block forget gate added after the attention scale (FoX's "
           "convention, not PaTH's declared gate_scaled=True)", PATH_PRE,
           "b_A = b_A + (b_g_cumsum[:, None] - b_g_cumsum[None, :])",
           "b_A = b_A + (b_g_cumsum[:, None] - b_g_cumsum[None, :]) / scale",
           ("kernel.fla.path_attn.convention.gate_scaled",)),
    Mutant("path_gate_cumsum_off_by_one", "PaTH: exclusive instead of inclusive cumsum of the log forget gate "
           "(gate sums over s = j..i-1)", PATH_API,
           "g_cumsum = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, output_dtype=torch.float32) if g is not None",
           "g_cumsum = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, output_dtype=torch.float32) - g if g is not None",
           ("kernel.fla.path_attn.fwd.fp32.gate_strong",)),
    Mutant("path_kv_dims_swapped", "PaTH forward: the in-block output is read with the key head dim K as its row "
           "stride instead of V (hides while K == V)", PATH_FWD,
           "p_o = o + (bos * HQ + i_hq) * V + o_q[:, None] * (HQ*V)",
           "p_o = o + (bos * HQ + i_hq) * K + o_q[:, None] * (HQ*K)",
           ("kernel.fla.path_attn.convention.gate_scaled",)),
    Mutant("path_tail_block_dropped", "PaTH forward: T // BT query blocks instead of cdiv(T, BT): the rows past the "
           "last full block are never computed when T is not a multiple of the block", PATH_FWD,
           "NT = triton.cdiv(T, BT) if cu_seqlens is None", "NT = T // BT if cu_seqlens is None",
           # the unwritten rows are NaN (pathmdn_verify.platform.setup.prepare), not whatever the allocator reused
           ("kernel.fla.path_attn.fwd.fp32.beta_uniform",)),
    # PaTH stages only the coverage regression cases of pathmdn_verify.ops reach (T > 512 backward, varlen decode)
    Mutant("path_bwd_superblock_query_frame", "PaTH backward: dq against an earlier 512-token super-block's keys "
           "read the queries transformed to the wrong super-block (idx_j for idx_j + 1; runs only for T > 512)",
           "ops/path_attn/parallel_path_bwd_inter_dqh.py", "(bos.to(tl.int64) * NUM_BLOCKS + idx_j + 1) * HQ",
           "(bos.to(tl.int64) * NUM_BLOCKS + idx_j) * HQ",
           # not fp32.gate_weak (its T = 576 regression case): at ci seed 0 that check meets fla's out-of-bounds
           # dv atomic first (a listed exception, which hides the mutant); bf16.w_aligned's T = 514 case is clean
           ("kernel.fla.path_attn.bwd.bf16.w_aligned", "kernel.fla.path_attn.bwd.fp32.gate_weak")),
    # structural: reached only by the boundary cases (no forget gate AND T > 512: the ungated specialisation of
    # the kernel that adds later super-blocks' queries to dk, dv; the T = 576 regression case has a gate)
    Mutant("path_bwd_ungated_superblock_unnormalised", "PaTH backward, no forget gate: the later super-blocks' "
           "attention in dk, dv not normalised by the query's log-sum-exp (USE_GATE False only; runs only for T > 512)",
           "ops/path_attn/parallel_path_bwd_inter_dkv.py",
           "b_A_softmax = tl.math.exp2(b_A * sm_scale - b_l[None, :])",
           "b_A_softmax = tl.math.exp2(b_A * sm_scale - (b_l[None, :] if USE_GATE else 0.0))",
           ("kernel.fla.path_attn.bwd.bf16.w_aligned",)),
    Mutant("path_decode_varlen_ignored", "PaTH decode cache: cu_seqlens ignored (one sequence: the keys of a "
           "sequence updated by the next sequence's tokens)", "ops/path_attn/prepare_k_cache.py",
           "'IS_VARLEN': lambda args: args['offsets'] is not None,", "'IS_VARLEN': lambda args: False,",
           ("kernel.fla.path_attn.decode.fp32.beta_uniform",)),
    # structural: reached only by the boundary cases (a varlen prefill whose long sequence spans 3 or more
    # 64-key blocks of the cache: (0, 1, 130); the (0, 70, 160) regression case spans 2)
    Mutant("path_decode_varlen_far_blocks_dropped", "PaTH decode cache, varlen: a block's keys take the "
           "Householders of the next 64-key block only (a sequence of 3 or more blocks keeps stale keys)",
           "ops/path_attn/prepare_k_cache.py", "    for k_block_idx in range(i_t + 1, tl.cdiv(T, BT)):\n",
           "    NB = tl.cdiv(T, BT)\n    if IS_VARLEN:\n        NB = tl.minimum(NB, (i_t + 2).to(tl.int32))\n"
           "    for k_block_idx in range(i_t + 1, NB):\n",
           ("kernel.fla.path_attn.decode.fp32.beta_near2",)),
)


# Planted bugs (pathmdn_verify.platform.mutation.Mutant): each must turn one of its killer checks red (`verify mutants`).
FOX_MUTANTS = (
    # FoX (Triton)
    # structural: reached only by the boundary cases (T > 256: a third 128-token query block)
    Mutant("fox_third_query_block_skips_near_keys", "FoX: query blocks from the third on (T > 256) skip the 64-key "
           "block just before their own (forward and dq)", FOX_FILE,
           "    for i_s in range(i_start, i_t * BT, BS):\n",
           "    for i_s in range(i_start, i_t * BT - tl.minimum(i_t // 2, 1) * BS, BS):\n",
           # killed by the boundary case T = 258 of the gate_strong check (5.5x; gate_mixed's 35x before the g factor
           # moved that case); saturated softmax hides it (0.27x)
           ("kernel.fla.forgetting_attn.fwd.fp32.gate_strong", "kernel.fla.forgetting_attn.fwd.fp32.gate_mixed"),
           count=2),
    Mutant("fox_gate_dropped_offdiag", "FoX: the forget gate dropped from the off-diagonal key blocks (forward and "
           "backward)", FOX_FILE,
           "            b_s += b_gq[:, None] - b_gk[None, :]\n\n        if USE_WINDOW:",
           "            pass\n\n        if USE_WINDOW:",
           ("kernel.fla.forgetting_attn.fwd.fp32.gate_mixed", "kernel.fla.forgetting_attn.fwd.fp32.saturated"), count=2),
    Mutant("fox_gate_scaled", "FoX: forget gate multiplied by the attention scale in the forward and dq kernels "
           "(against the declared gate_scaled=False)", FOX_FILE,
           "b_s += b_gq[:, None] - b_gk[None, :]", "b_s += (b_gq[:, None] - b_gk[None, :]) * scale",
           ("kernel.fla.forgetting_attn.convention.gate_scaled",), count=4),
    # magnitude: reached only by the magnitude regime (|q|, |k| past 65504); every other regime keeps |q| < 30
    Mutant("fox_logits_from_fp16", "FoX: the logits formed from q and k rounded to fp16 (which overflows past "
           "65504; its precision is tf32's), forward and backward", FOX_FILE,
           "        b_s = tl.dot(b_q, b_k) * scale * RCP_LN2\n",
           "        b_s = tl.dot(b_q.to(tl.float16), b_k.to(tl.float16)) * scale * RCP_LN2\n",
           # the magnitude regime's overflow is the clean kernel's listed non-finite too (fp fusion): the backward
           # in saturated logits sees the rounding (ratio 3.5 at ci on the CPU, 1.83 with strong gates)
           ("kernel.fla.forgetting_attn.bwd.fp32.saturated", "kernel.fla.forgetting_attn.bwd.fp32.gate_strong"),
           count=4),
    # structural: only without a forget gate (USE_G off) and past the first 128-query block (off-diagonal keys)
    Mutant("fox_ungated_offdiag_logits_base_e", "FoX without a forget gate: the off-diagonal key blocks' logits "
           "miss the log2(e) factor of the base-2 softmax (it is applied only on the gated path)", FOX_FILE,
           "        b_s = tl.dot(b_q, b_k) * scale * RCP_LN2\n\n        if USE_G:\n"
           "            b_gk = tl.load(g_cumsum + (bos + o_k) * HQ + i_hq, mask=m_k, other=0).to(tl.float32)\n"
           "            b_s += b_gq[:, None] - b_gk[None, :]\n\n        if USE_WINDOW:",
           "        b_s = tl.dot(b_q, b_k) * scale\n\n        if USE_G:\n            b_s *= RCP_LN2\n"
           "            b_gk = tl.load(g_cumsum + (bos + o_k) * HQ + i_hq, mask=m_k, other=0).to(tl.float32)\n"
           "            b_s += b_gq[:, None] - b_gk[None, :]\n\n        if USE_WINDOW:",
           # the ungated boundary cases past 128 tokens (T = 129, 130, 258) land in the bf16 saturated check at ci
           ("kernel.fla.forgetting_attn.fwd.bf16.saturated",)),
    Mutant("fox_gate_cumsum_off_by_one", "FoX: exclusive instead of inclusive cumsum of the log forget gate", FOX_FILE,
           "g_cumsum = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, scale=RCP_LN2) if g is not None",
           "g_cumsum = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, scale=RCP_LN2) - g * RCP_LN2 if g is not None",
           ("kernel.fla.forgetting_attn.fwd.fp32.gate_strong",)),
)


# Drawn examples per check where the structure's boundary cases run too (they cover the block boundaries the
# draws reach by luck): 2 at ci instead of 3, so that `verify all` at ci stays within its budget on 2 cores.
BOUNDED_EXAMPLES = {"quick": 2, "ci": 2, "full": 5}


PATH_LAYOUT = ('q [B, T, HQ, D], k [B, T, H, D], v [B, T, H, Dv] in the dtype checked; w [B, T, H, D] fp32 with unit '
    'rows, beta [B, T, H] fp32 in (0, 2]; g [B, T, HQ] fp32, the log forget gate (<= 0), or None; '
    'cu_seqlens int32 [N + 1] (varlen, B == 1) or None; scale (None: 1/sqrt(D)); HQ a multiple of H '
    '(query head h reads key head h // (HQ // H)); returns o [B, T, HQ, Dv] = softmax(scale * (path '
    'logits + gate)) v')
FOX_LAYOUT = ('q [B, T, HQ, D], k [B, T, H, D], v [B, T, H, Dv] in the dtype checked; g [B, T, HQ] fp32, the log '
    'forget gate (<= 0); cu_seqlens int32 [N + 1] (varlen, B == 1) or None; scale (None: 1/sqrt(D)); '
    'returns o [B, T, HQ, Dv] = softmax(scale * q k^T + gate) v')


def _attention_op(name, title, fla_fn, conv, oracle_fn, same_dtype_fn, names, grads, regimes, gated, entry,
                  option_probes=(), **extra):
    """A softmax-attention op: fla_fn(**x, scale), oracle_fn(**x, scale, gate_scaled) and
    same_dtype_fn(**x, prec, scale, gate_scaled) under the measured gate convention conv.gate_scaled."""
    probe_case = PathCase(T=64, D=16, Dv=32, gate="mixed", seed=3)   # Dv != D shows a K/V head-dim mix-up
    gate_probe = ConventionProbe(
        "gate_scaled", f"measures whether fla {name} multiplies the log forget gate by the attention scale",
        f"gate_scaled={not conv.gate_scaled}", probe_case,
        lambda op, x, s: op.oracle(**x, scale=s, gate_scaled=not op.conventions.gate_scaled))
    return OpRecord(
        name=name, title=title, kernel=lambda scale, **x: fla_fn(**x, scale=scale), conventions=conv,
        oracle=lambda scale, gate_scaled=conv.gate_scaled, **x: oracle_fn(**x, scale=scale, gate_scaled=gate_scaled),
        same_dtype=lambda prec, scale, **x: same_dtype_fn(**x, prec=prec, scale=scale, gate_scaled=conv.gate_scaled),
        make_inputs=path_inputs, required=names[0], optional=names[1], grad_inputs=grads,
        outputs=("o",), regimes=regimes, cases=lambda fields, profile, max_T: path_cases(
            fields, profile, gated=gated, max_T=max_T),
        budget_factor=BUDGET_FACTOR_BLOCKWISE,
        error_inputs=lambda x: validate_inputs(x, conv.head_dims),
        sample_case=PathCase(T=8, HQ=2, H=1, gate="mixed", seed=1), query_inputs=("q", "g"),
        examples=BOUNDED_EXAMPLES,
        probes=(gate_probe, scale_default_probe(name, probe_case), *option_probes), refusal=fla_ops.missing_backward,
        entry=entry,
        layout=PATH_LAYOUT if name == "path_attn" else FOX_LAYOUT, **extra)


SCALE_PROBED = Fixed("probe", "scale_default", "scale=None is 1/sqrt(D); every other check gives it")
# FoX's sliding window (query i sees keys i - W + 1 .. i): the forward against the oracle's windowed logits, at T = 200
# with W = 40, where the second 128-query block starts at key block 1 (i_start = (128 - 39) // 64 * 64)
FOX_WINDOW_PROBE = ConventionProbe(
    "sliding_window", "measures that fla parallel_forgetting_attn with window_size=40 attends to the last 40 keys",
    "no window", PathCase(T=200, D=16, Dv=32, gate="weak", seed=3), kind="option",
    given=fla_ops.given_with(window_size=40), options=("window_size",),
    meaning=lambda fn, x, s: fn(**x, scale=s, window=40))

PATH_ATTN = _attention_op(
    "path_attn", "path_attn", fla_ops.path_attn, fla_ops.PATH_CONVENTIONS, P.path_attn,
    lambda **kw: same_dtype.path_attn(**kw),
    names=(("q", "k", "v", "w", "beta"), ("g", "cu_seqlens")), grads=("q", "k", "v", "w", "beta", "g"),
    regimes=PATH_REGIMES, gated=None, adapt_inputs=fla_ops.path_inputs_as_taken, entry=fla_ops._path_entry,
    regression_cases={
        # passed only once the same-dtype implementation formed delta from the stored O: at T = 1 the exact dk
        # is 0 and fla's is 1.73e-2 (on the H200 too); was 2.2x budget (D = 16, seed 1; the H200's full draw)
        "bwd.fp32.saturated": [PathCase(T=1, B=2, logit_gain=4.0, seed=1)],
        # coverage: fla's backward crosses its 512-token super-block (S = 512 in parallel.py) only for T > 512,
        # which the ci draws (T <= 160) never reach: one 64-token block past it; a weak gate keeps the terms
        # across it large
        "bwd.fp32.gate_weak": [PathCase(T=576, gate="weak", seed=1)],
        # coverage: three super-blocks (the first, a middle one and the last: chunk_cumprod_householder's suffix and
        # whole products across a middle one), which ci's boundary cases (T <= 514) never reach; a one-token sequence
        # beside one of 1025 tokens, K == V (with K != V the listed dv defect fails the check); 9 s on the 2-core CPU
        # (37 s with two query heads)
        "bwd.fp32.beta_uniform": [PathCase(T=1026, gate="mixed", cu_seqlens=(0, 1, 1026), seed=2)],
        # coverage: the varlen path of the decode cache (prepare_k_cache), two sequences of two blocks each
        "decode.fp32.beta_uniform": [PathCase(T=160, cu_seqlens=(0, 70, 160), seed=2)],
        # non-finite on the H200 from |q| ~ 4.6e5 (the report's magnitude sweep): the queries of a later 128-token
        # block are transformed by the earlier blocks' Householder factors in fp16 (T > 128 needed)
        **{f"{p}.{d}.magnitude": [PathCase(T=160, logit_gain=1e5, seed=0)] for p in ("fwd", "bwd")
           for d in ("bf16", "fp32")}},
    decode=Decode(
        kernel=lambda scale, **x: fla_ops.path_attn_cache(**x, scale=scale),
        oracle=lambda k, w, beta, cu_seqlens=None, **_: P.decode_cache(k, w, beta, cu_seqlens),
        same_dtype=lambda k, w, beta, prec, cu_seqlens=None, **_: same_dtype.decode_keys(k, w, beta, prec,
                                                                                          cu_seqlens),
        output="k_cache", regimes=("beta_uniform", "beta_near2"),
        cases=lambda fields, profile: path_cases(fields, profile, gated=False)),
    device_cases=tuple((dtype, case) for dtype in ("fp32", "bf16") for case in (
        PathCase(T=256, D=64, Dv=64, seed=1), PathCase(T=256, D=64, Dv=64, gate="mixed", beta="near2_4", seed=2))),
    stages={"fwd": lambda op, x, dtype, fp32_dot: path_stages.stages(op, x, dtype, fp32_dot),
            "bwd": lambda op, x, dtype, fp32_dot: path_stages.stages(op, x, dtype, fp32_dot, backward=True),
            # the decode cache is one kernel (parallel_path_fwd_kernel_prepare_k_cache) with no intermediate result
            "decode": one_stage("key cache (one kernel)", "prepare_k_cache_fn", "decode")},
    package=("fla.ops.path_attn",), report="path", mutants=PATH_MUTANTS, not_reached=PATH_NOT_REACHED,
    structure=PATH_STRUCTURE, entry_params={"g": "g", "cu_seqlens": "cu_seqlens", "scale": SCALE_PROBED,
                                            "use_cache": Fixed("pass", "decode", "the decode cache (k_cache)")})

FORGETTING_ATTN = _attention_op(
    "forgetting_attn", "forgetting_attn (FoX)", fla_ops.forgetting_attn, fla_ops.FOX_CONVENTIONS, P.fox_attn,
    lambda **kw: same_dtype.fox_attn(**kw),
    names=(("q", "k", "v"), ("g", "cu_seqlens")), grads=("q", "k", "v", "g"),
    regimes=FOX_REGIMES, gated=None, entry=fla_ops.fox_entry,
    regression_cases={
        # passed only once the same-dtype implementation formed delta from the stored bf16 O; was 1.6x budget
        "bwd.bf16.saturated": [PathCase(T=23, gate="mixed", logit_gain=4.0, seed=0)],
        # on the H200 the ungated path is non-finite from |q| ~ 4.6e5 (the report's magnitude sweep, T = 1024,
        # D = 64) and NaN from the second 128-query block at this T, D and gain; the gated one stays finite
        **{f"{p}.{d}.magnitude": [PathCase(T=160, gate="mixed", logit_gain=1e5, seed=0),
                                  PathCase(T=160, D=32, Dv=32, logit_gain=1e5, seed=0)]
           for p in ("fwd", "bwd") for d in ("bf16", "fp32")}},
    device_cases=tuple((dtype, PathCase(T=256, D=64, Dv=64, gate="mixed", seed=3)) for dtype in ("fp32", "bf16")),
    stages={"fwd": lambda op, x, dtype, fp32_dot: fox_stages.stages(op, x, dtype, fp32_dot),
            "bwd": lambda op, x, dtype, fp32_dot: fox_stages.stages(op, x, dtype, fp32_dot, backward=True)},
    package=("fla.ops.forgetting_attn", "fla.ops.attn"), report="fox", mutants=FOX_MUTANTS, structure=FOX_STRUCTURE,
    not_reached=FOX_NOT_REACHED, option_probes=(FOX_WINDOW_PROBE,),
    entry_params={"cu_seqlens": "cu_seqlens", "scale": SCALE_PROBED,
                  "window_size": Fixed("probe", "sliding_window", "the forward with a window of 40 keys")})
