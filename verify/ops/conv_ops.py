"""fla's short convolution (fla/modules/causal_conv1d: ShortConvolution's kernels): its case type, input builder,
regimes and hypothesis strategy, input validation, and the records of causal_conv1d (forward and backward,
`short_conv`) and causal_conv1d_update (the single-token step generation takes, `short_conv_update`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from pathmdn_verify import same_dtype
from pathmdn_verify.core import validate
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import op_of
from pathmdn_verify.core.inputs import case_label, cu_seqlens_tensor, on_device
from pathmdn_verify.core.records import BUDGET_FACTOR_BLOCKWISE, ConventionProbe, Fixed, OpRecord, Structure
from pathmdn_verify.core.strategies import batch_for, batch_levels, capped, shape_rows
from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.platform.mutation import Mutant
from pathmdn_verify.references import module_oracle as MOD
from pathmdn_verify.stages import one_stage


@dataclass(frozen=True)
class ConvCase:
    """One short-convolution input: x [B, T, D], weight [D, W]; each option given (True / a value) or left out.
    For the update, T is the number of one-token sequences N."""
    T: int = 16
    D: int = 16
    W: int = 4
    B: int = 1
    bias: bool = False
    residual: bool = False
    initial_state: bool = False      # the convolution's S0; the update always has its cache
    final_state: bool = False        # output_final_state=True
    activation: str | None = None    # left out (None), or "silu" / "swish"
    layout: str | None = None        # the update's x as fla gets it (fla_ops.UPDATE_LAYOUTS; None: [N, 1, D])
    strided_upstream: bool = False   # the backward's upstream gradients a view that is not contiguous
    cu_seqlens: tuple[int, ...] | None = None
    seed: int = 0

    def label(self) -> str:
        return case_label(self)


def conv_inputs(case: ConvCase, dtype=torch.float64, device="cpu") -> dict:
    """x [B, T, D] ~ N(0, 1), weight [D, W] ~ N(0, 1/W), bias [D], residual [B, T, D], S0 [N, D, W] (N sequences)
    in dtype; cu_seqlens int32; the options as given (None: left out)."""
    if case.cu_seqlens is not None and case.B != 1:
        raise ValueError("varlen (cu_seqlens) requires B == 1")
    gen = torch.Generator().manual_seed(case.seed)
    draw = lambda *shape, s=1.0: (s * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)  # noqa: E731
    B, T, D, W = case.B, case.T, case.D, case.W
    N = B if case.cu_seqlens is None else len(case.cu_seqlens) - 1
    x, weight, bias, residual, S0 = draw(B, T, D), draw(D, W, s=W ** -0.5), draw(D), draw(B, T, D), draw(N, D, W)
    return on_device({"x": x, "weight": weight, "bias": bias if case.bias else None,
                      "residual": residual if case.residual else None, "S0": S0 if case.initial_state else None,
                      "output_final_state": True if case.final_state else None, "activation": case.activation,
                      "cu_seqlens": cu_seqlens_tensor(case.cu_seqlens)}, device)


def update_inputs(case: ConvCase, dtype=torch.float64, device="cpu") -> dict:
    """x [N, 1, D] (N = case.T sequences, one token each), its cache [N, D, W], weight, bias, residual [N, 1, D]."""
    x = conv_inputs(ConvCase(T=case.T, D=case.D, W=case.W, bias=case.bias, residual=case.residual, seed=case.seed),
                    dtype, device)
    gen = torch.Generator().manual_seed(case.seed + 1)
    cache = torch.randn(case.T, case.D, case.W, generator=gen, dtype=torch.float64).to(dtype).to(device)
    swap = lambda t: None if t is None else t.transpose(0, 1).contiguous()      # noqa: E731  [1, N, D] -> [N, 1, D]
    return {"x": swap(x["x"]), "cache": cache, "weight": x["weight"], "bias": x["bias"],
            "residual": swap(x["residual"]), "activation": case.activation, "layout": case.layout}


# The final state is requested in its own regime only: fla's backward drops the gradient of its oldest slot (a
# listed defect, docs/findings.md), which would make every check given a case with it fail.
CONV_REGIMES = {
    "typical": {"final_state": False},
    "silu": {"activation": "silu", "final_state": False},
    "initial_state": {"initial_state": True, "final_state": False},   # a prefill that continues a cache
    "final_state": {"final_state": True},                             # a prefill that fills one
}
UPDATE_REGIMES = {"typical": {}, "silu": {"activation": "silu"}}
# (T values, D, W, B): D 40 leaves a partial channel block for every BD of the autotuned configs (16 .. 128); W 3
# pads the taps to BW = 4 (masked), W 4 fills them.
CONV_SIZES = {
    "quick": ((40,), (16,), (4,), (1,)),
    "ci": ((37, 1, 80), (16, 40), (4, 3), (1, 2)),
    "full": ((4096, 1, 100, 1000), (64, 200), (4, 3, 2), (1, 2)),
}


@st.composite
def conv_cases(draw, regime: dict, profile: str, max_T: int | None = None, update: bool = False):
    """ConvCase for one regime; its shape fields from one of the `shape_rows` (the update has no varlen)."""
    Ts, Ds, Ws, Bs = CONV_SIZES[profile]
    T = draw(st.sampled_from(capped(Ts, max_T)))
    row = draw(shape_rows(D=Ds, W=Ws, batch=Bs if update else batch_levels(Bs)))
    B, cu = (1, None) if update else draw(batch_for(T, row["batch"]))
    T = T * row["batch"] if update else T          # the update: N = B T one-token sequences
    return ConvCase(T=T, D=row["D"], W=row["W"], B=B, cu_seqlens=cu, seed=draw(st.integers(0, 2**16)), **regime)


def validate_conv(x: dict) -> None:
    """x [B, T, D]; weight [D, W]; bias [D]; residual [B, T, D]; S0 [N, D, W] (N sequences); activation None, silu
    or swish."""
    validate.rank("x", x["x"], 3, "[B, T, D]")
    B, T, D = x["x"].shape
    validate.tokens(T)
    validate.rank("weight", x["weight"], 2, "[D, W]")
    W = x["weight"].shape[1]
    validate.shape("weight", x["weight"], (D, W), "[D, W] (D of x)")
    validate.shape("bias", x.get("bias"), (D,), "[D]")
    validate.shape("residual", x.get("residual"), (B, T, D), "[B, T, D] (of x)")
    validate.cu_seqlens(x.get("cu_seqlens"), B, T)
    N = B if x.get("cu_seqlens") is None else x["cu_seqlens"].numel() - 1
    validate.shape("S0", x.get("S0"), (N, D, W), "[N, D, W] (N sequences)")
    _activation(x.get("activation"), (None, "silu", "swish"))
    validate.finite(x)


def validate_update(x: dict) -> None:
    """x [N, 1, D]; cache [N, D, W]; weight [D, W]; bias [D]; residual [N, 1, D]."""
    validate.rank("x", x["x"], 3, "[N, 1, D]")
    N, one, D = x["x"].shape
    validate.tokens(one)
    validate.shape("x", x["x"], (N, 1, D), "[N, 1, D] (one token per sequence)")
    validate.rank("weight", x["weight"], 2, "[D, W]")
    W = x["weight"].shape[1]
    validate.shape("cache", x["cache"], (N, D, W), "[N, D, W]")
    validate.shape("bias", x.get("bias"), (D,), "[D]")
    validate.shape("residual", x.get("residual"), (N, 1, D), "[N, 1, D]")
    _activation(x.get("activation"), (None, "silu", "swish"))
    if x.get("layout") not in (None, *fla_ops.UPDATE_LAYOUTS):
        raise UsageError(f"layout: {x['layout']!r}, not one of {fla_ops.UPDATE_LAYOUTS}")
    validate.finite(x)


def _activation(value, allowed: tuple) -> None:
    if value not in allowed:
        raise UsageError(f"activation: {value!r}, not one of {allowed}")


def _boundary_case(T, D, Dv, HQ, H, cu_seqlens, seed, width=4, **options):
    """A boundary case: D channels (Dv = D: the convolution has one dim), width W."""
    return ConvCase(T=T, D=D, W=width, cu_seqlens=cu_seqlens, seed=seed, **options)


def _present(case) -> dict:
    return {"bias": case.bias, "residual": case.residual, "initial_state": case.initial_state,
            "final_state": case.final_state, "activation": case.activation, "width": case.W,
            "layout": case.layout, "strided_upstream": case.strided_upstream}


# fla-core 0.6.0's short convolution (fla/modules/causal_conv1d/ops.py) on the H200's tiles: the forward and backward
# kernels take the time axis in blocks of BT = 64 (chunk_size; with cu_seqlens, chunk_indices of 64-token blocks per
# sequence) and the channels in blocks of BD (autotuned, 16 .. 128: D 40 leaves a partial block for each); the taps
# in BW = next_power_of_2(W) lanes (W 3 masks one).  With an initial state, the block holding tokens < W reads the
# state's slots (the forward's `i_t * BT >= W` branch; the backward's third branch adds the state's dw terms), later
# blocks do not; a final state's gradient enters the last block (`i_t * BT + BT >= T - W`); the final state
# (causal_conv1d_update_states) and dh0 (compute_dh0_kernel) change path where a sequence is shorter than W (the
# initial state's slots pass through): T at the width's c - 1 .. 2c + 2 (3, 4, 5, 10) and the varlen splits (0, 1, T)
# and (0, 4 | 5, T) reach sequences shorter than, as long as and longer than W; 130 one longer than two blocks.
# bias HAS_BIAS, residual HAS_RESIDUAL, the initial state USE_INITIAL_STATE, the final state USE_FINAL_STATE in the
# backward, the activation ACTIVATION (the backward recomputes the pre-activation y), cu_seqlens IS_VARLEN, a
# strided upstream gradient the dy strides.
CONV_OPTIONS = ("bias", "residual", "initial_state", "final_state", "activation", "width")
CONV_STRUCTURE = Structure(
    lengths={"fwd": {"width": 4, "chunk": 64}, "bwd": {"width": 4, "chunk": 64}},
    dims={"quick": (16, 40), "ci": (16, 40), "full": (16, 200)}, build=_boundary_case, present=_present,
    dims_pair=False, options={"fwd": CONV_OPTIONS, "bwd": (*CONV_OPTIONS, "strided_upstream")},
    # the final state last-but-one: the covering array's filler rows leave it out, so that fp32's backward cases do
    # not crowd into its regime (listed: fla drops the gradient of its oldest slot)
    option_levels={"activation": (None, "silu"), "width": (4, 3), "final_state": (True, False)})
# causal_conv1d_update (one program per (channel block, sequence); BD autotuned 8 .. 256): N sequences of one token
# (the case's T; 1 and 4), the cache shifted in BW lanes (W 3 masked), x as [N, 1, D], [1, N, D] or [N, D] (its
# strides chosen by rank and shape).
UPDATE_STRUCTURE = Structure(
    lengths={"fwd": {"sequences": 1}}, dims={"quick": (16, 40), "ci": (16, 40), "full": (16, 200)},
    build=_boundary_case, present=_present, varlen=False, dims_pair=False,
    options={"fwd": ("bias", "residual", "activation", "width", "layout")},
    option_levels={"activation": (None, "silu"), "width": (4, 3), "layout": (None, "1ND", "ND")},
    levels={"sequences": {p: ("c", "2c+2") for p in ("quick", "ci", "full")}})


def _flipped(x):
    return {**x, "weight": x["weight"].flip(-1)}


def _varlen_metadata(op, x, s):
    """The convolution with cu_seqlens_cpu and chunk_indices (64-token blocks) precomputed, as a layer passes them."""
    from fla.ops.utils import prepare_chunk_indices
    cu = x["cu_seqlens"].long()
    with fla_ops.entry_keywords(cu_seqlens_cpu=cu.cpu(), chunk_indices=prepare_chunk_indices(cu, 64)):
        return op.kernel(**x, scale=s)


CONV_PROBE_CASE = ConvCase(T=40, D=16, W=4, bias=True, seed=5)
CONV_PROBES = (
    ConventionProbe("last_tap_current", "measures that fla causal_conv1d's weight[:, W-1] multiplies the current token",
                    "weight[:, 0] multiplies it (a flipped filter)", CONV_PROBE_CASE,
                    lambda op, x, s: op.oracle(**_flipped(x), scale=s), output="y"),
    ConventionProbe("state_oldest_first", "measures that fla causal_conv1d's initial state holds the W tokens before "
                    "the sequence oldest first (slot W-1 the latest)", "the slots newest first",
                    ConvCase(T=3, D=16, W=4, initial_state=True, final_state=True, seed=5),
                    lambda op, x, s: op.oracle(**{**x, "S0": x["S0"].flip(-1)}, scale=s), output="y"),
    ConventionProbe("weight_none_refused", "measures that fla causal_conv1d refuses weight=None here",
                    r"AttributeError: 'NoneType' object has no attribute 'shape'", CONV_PROBE_CASE,
                    kind="refused", given=lambda op, x, s: op.kernel(**{**x, "weight": None}, scale=s),
                    options=("weight",)),
    ConventionProbe("backend_cuda_refused", "measures that fla causal_conv1d refuses backend='cuda' here (it needs the "
                    "causal-conv1d package)", r"causal_conv1d_fn_cuda is not available", CONV_PROBE_CASE,
                    kind="refused", given=fla_ops.given_with(backend="cuda"), options=("backend",)),
    ConventionProbe("backend_mix_refused", "measures that fla causal_conv1d refuses backend='mix' (and its seq_idx) "
                    "here (it needs the causal-conv1d package)", r"causal_conv1d_\w+ is not available", CONV_PROBE_CASE,
                    kind="refused", given=fla_ops.given_with(backend="mix", seq_idx=None), options=("backend", "seq_idx")),
    ConventionProbe("varlen_metadata_no_effect", "measures that fla causal_conv1d gives the same bits with "
                    "cu_seqlens_cpu and chunk_indices precomputed", "", ConvCase(T=140, D=16, W=4, initial_state=True,
                                                                                  final_state=True,
                                                                                  cu_seqlens=(0, 3, 70, 140), seed=5),
                    kind="no_effect", given=_varlen_metadata, options=("cu_seqlens_cpu", "chunk_indices")),
)
CONV_ENTRY_PARAMS = {
    "weight": Fixed("refused", "weight_none_refused", "weight.shape is read unconditionally (a required input here)"),
    "bias": "bias", "residual": "residual", "initial_state": "S0", "output_final_state": "output_final_state",
    "activation": "activation", "cu_seqlens": "cu_seqlens",
    "backend": Fixed("refused", "backend_cuda_refused,backend_mix_refused",
                     "the CUDA and mix backends need the causal-conv1d package; 'triton' is the default"),
    "seq_idx": Fixed("refused", "backend_mix_refused", "read from **kwargs by the mix backend only"),
    "cu_seqlens_cpu": Fixed("no_effect", "varlen_metadata_no_effect", "a host copy of cu_seqlens"),
    "chunk_indices": Fixed("no_effect", "varlen_metadata_no_effect", "precomputed 64-token blocks of cu_seqlens"),
    "cp_context": Fixed("multi_device", "FLACPContext", "context parallelism: a sequence split over the ranks of a "
                                                        "process group"),
}
UPDATE_PROBES = (
    ConventionProbe("last_tap_current", "measures that fla causal_conv1d_update's weight[:, W-1] multiplies the new "
                    "token", "weight[:, 0] multiplies it", ConvCase(T=4, D=16, W=4, seed=5),
                    lambda op, x, s: op.oracle(**_flipped(x), scale=s), output="y"),
    ConventionProbe("weight_none_refused", "measures that fla causal_conv1d_update refuses weight=None here",
                    r"TypeError", ConvCase(T=4, D=16, W=4, seed=5), kind="refused",
                    given=lambda op, x, s: op.kernel(**{**x, "weight": None}, scale=s), options=("weight",)),
)
UPDATE_ENTRY_PARAMS = {
    "residual": "residual", "bias": "bias", "activation": "activation",
    "weight": Fixed("refused", "weight_none_refused", "W = weight.shape[1] is needed (a required input here)"),
}


CONV_MUTANTS = (
    Mutant("short_conv_state_ignored_in_first_block", "short convolution forward: the first block with an initial "
           "state takes the stateless branch (the tokens before the sequence read as zeros)",
           "modules/causal_conv1d/ops.py", "    elif i_t * BT >= W:\n        # separate branches avoid a Triton "
           "compiler issue.\n        for i_w in tl.static_range(-W + 1, 1):\n",
           "    elif i_t * BT >= 0:\n        # separate branches avoid a Triton compiler issue.\n        for i_w in "
           "tl.static_range(-W + 1, 1):\n",
           ("kernel.fla.short_conv.fwd.fp32.initial_state", "kernel.fla.short_conv.fwd.bf16.initial_state")),
    # structural: reached only by a sequence shorter than the width with both states (the boundary cases' splits)
    Mutant("short_conv_short_sequence_final_state", "short convolution: the final state of a sequence shorter than the "
           "width without the initial state's slots it keeps", "modules/causal_conv1d/ops.py",
           "            b_cache = tl.load(p_init, mask=mask_init, other=0)\n            b_x += b_cache\n",
           "            b_cache = tl.load(p_init, mask=mask_init, other=0)\n",
           ("kernel.fla.short_conv.fwd.fp32.final_state", "kernel.fla.short_conv.fwd.bf16.final_state")),
    Mutant("short_conv_update_new_token_slot", "short convolution update: the new token written to slot W-2 of the "
           "cache instead of the last", "modules/causal_conv1d/ops.py", "        m_update = o_w == (W - 1)\n",
           "        m_update = o_w == (W - 2)\n",
           ("kernel.fla.short_conv_update.fwd.fp32.typical", "kernel.fla.short_conv_update.fwd.bf16.typical")),
)


CONV_NOT_REACHED = {
    r"^[ \t]*if cp_context is not None:": (
        "exclude", "context parallelism over the ranks of a process group (cp_context: Fixed multi_device)"),
}


def _conv_op(name, title, kernel, oracle, same, make_inputs, required, optional, grad_inputs, outputs, regimes,
             cases, error_inputs, sample_case, passes, probes, structure, entry, entry_params, dtype_inputs, source):
    return OpRecord(
        name=name, title=title, kernel=kernel, conventions=fla_ops.SHORT_CONV_CONVENTIONS, oracle=oracle,
        same_dtype=same, make_inputs=make_inputs, required=required, optional=optional, grad_inputs=grad_inputs,
        outputs=outputs, regimes=regimes, cases=cases, budget_factor=BUDGET_FACTOR_BLOCKWISE,
        error_inputs=error_inputs, sample_case=sample_case, passes=passes, dot="ieee", probes=probes,
        examples={"quick": 1, "ci": 2, "full": 5}, package=("fla.modules.causal_conv1d",), structure=structure,
        not_reached=CONV_NOT_REACHED,
        stages={p: one_stage(f"{title} (one stage)", source, p) for p in passes},
        mutants=tuple(m for m in CONV_MUTANTS if op_of(m.killers[0]) == name), refusal=fla_ops.missing_backward,
        layout=fla_ops.short_conv.__doc__ if name == "short_conv" else fla_ops.short_conv_update.__doc__,
        entry=entry, entry_params=entry_params,
        dtype_inputs=dtype_inputs)


SHORT_CONV = _conv_op(
    "short_conv", "short convolution", lambda scale, **x: fla_ops.short_conv(**x),
    lambda scale, **x: MOD.short_conv(**x), lambda prec, scale, **x: same_dtype.short_conv(prec, **x), conv_inputs,
    ("x", "weight"), ("bias", "residual", "S0", "output_final_state", "activation", "cu_seqlens"),
    ("x", "weight", "bias", "residual", "S0"), ("y", "S_T"), CONV_REGIMES, conv_cases, validate_conv,
    ConvCase(T=8, seed=1, bias=True, initial_state=True, final_state=True, cu_seqlens=(0, 3, 8)), ("fwd", "bwd"),
    CONV_PROBES, CONV_STRUCTURE, fla_ops.short_conv_entry, CONV_ENTRY_PARAMS, ("x", "weight", "bias", "residual", "S0"),
    "causal_conv1d_fwd_kernel / causal_conv1d_bwd_kernel")
SHORT_CONV_UPDATE = _conv_op(
    "short_conv_update", "short convolution update", lambda scale, **x: fla_ops.short_conv_update(**x),
    lambda scale, **x: MOD.short_conv_update(**x), lambda prec, scale, **x: same_dtype.short_conv_update(prec, **x),
    update_inputs, ("x", "cache", "weight"), ("bias", "residual", "activation", "layout"), (), ("y", "cache"),
    UPDATE_REGIMES, functools.partial(conv_cases, update=True), validate_update, ConvCase(T=3, seed=1, bias=True),
    ("fwd",), UPDATE_PROBES, UPDATE_STRUCTURE, fla_ops.short_conv_update_entry, UPDATE_ENTRY_PARAMS,
    ("x", "cache", "weight", "bias", "residual"), "causal_conv1d_update_kernel")
