"""fla's norms (fla/modules/norm): the gated RMS norm GDN and MDN put on their outputs (`rms_norm_gated`), its
fusion with the output projection (`rms_norm_gate_linear`: rms_norm_swish_gate_linear), l2norm (PaTH's w, the
in-kernel q/k norm) and the group norm of FoX's q/k norm (`group_norm`; PaTH's per-head RMSNorm is the same
function with one group): case type, input builder, regimes and strategy, validation, and the records.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from pathmdn_verify import same_dtype
from pathmdn_verify.core import validate
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import op_of
from pathmdn_verify.core.inputs import case_label, on_device
from pathmdn_verify.core.records import BUDGET_FACTOR_BLOCKWISE, ConventionProbe, OpRecord, Structure
from pathmdn_verify.core.strategies import capped, shape_rows
from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.platform.mutation import Mutant
from pathmdn_verify.references import module_oracle as MOD
from pathmdn_verify.stages import one_stage


@dataclass(frozen=True)
class NormCase:
    """One norm input: x [B, T, D] (group norm: [B, T, G D]); each option given or left out (None)."""
    T: int = 16
    D: int = 32
    Dv: int = 32                      # the fused linear's output features (its second dim)
    B: int = 1
    values: str = "typical"           # typical ~ N(0, 1); tiny ~ 1e-3 N(0, 1), where eps matters
    weight: bool = True
    bias: bool = False
    linear_bias: bool = False
    residual: bool = False
    prenorm: bool | None = None
    residual_in_fp32: bool | None = None
    activation: str | None = None     # the gated norm's: None (left out: swish), "sigmoid", "silu"
    eps: float | None = None
    is_rms_norm: bool | None = None
    num_groups: int | None = None
    output_dtype: str | None = None   # l2norm's: None, or "fp32"
    strided_upstream: bool = False
    seed: int = 0

    def label(self) -> str:
        return case_label(self)


def norm_inputs(case: NormCase, dtype=torch.float64, device="cpu") -> dict:
    """x, g, residual [B, T, G D] ~ N(0, 1) (x times 1e-3 when tiny); weight ~ 1 + N(0, 1/4), bias ~ N(0, 1/4) [G D];
    linear_weight [Dv, D] ~ N(0, 1/D), linear_bias [Dv]; every tensor in dtype; the options as given."""
    gen = torch.Generator().manual_seed(case.seed)
    draw = lambda *shape, s=1.0: (s * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)  # noqa: E731
    C = case.D * (case.num_groups or 1)
    x = draw(case.B, case.T, C, s=1e-3 if case.values == "tiny" else 1.0)
    g, residual = draw(case.B, case.T, C), draw(case.B, case.T, C)
    weight, bias = (1 + draw(C, s=0.25).double()).to(dtype), draw(C, s=0.25)
    linear_weight, linear_bias = draw(case.Dv, case.D, s=case.D ** -0.5), draw(case.Dv, s=0.25)
    return on_device({
        "x": x, "g": g, "weight": weight if case.weight else None, "bias": bias if case.bias else None,
        "residual": residual if case.residual else None, "norm_weight": weight if case.weight else None,
        "norm_bias": bias if case.bias else None, "linear_weight": linear_weight,
        "linear_bias": linear_bias if case.linear_bias else None, "prenorm": case.prenorm,
        "residual_in_fp32": case.residual_in_fp32, "activation": case.activation, "eps": case.eps,
        "is_rms_norm": case.is_rms_norm, "num_groups": case.num_groups, "output_dtype": case.output_dtype}, device)


# (T values, D, Dv, B): D 24 leaves masked lanes in BD = 32; D 520 > 512 takes the row kernels (one program per row)
NORM_SIZES = {
    "quick": ((40,), (24,), (24,), (1,)),
    "ci": ((37, 1, 80), (24, 520), (24, 40), (1, 2)),
    "full": ((4096, 1, 100, 1000), (64, 520, 1024), (64, 520), (1, 2)),
}


@st.composite
def norm_cases(draw, regime: dict, profile: str, max_T: int | None = None):
    Ts, Ds, Dvs, Bs = NORM_SIZES[profile]
    T = draw(st.sampled_from(capped(Ts, max_T)))
    row = draw(shape_rows(D=Ds, Dv=Dvs, B=Bs))
    return NormCase(T=T, D=row["D"], Dv=row["Dv"], B=row["B"], seed=draw(st.integers(0, 2**16)), **regime)


def _validate_rows(x: dict, names: tuple[str, ...]) -> tuple[int, int, int]:
    validate.rank("x", x["x"], 3, "[B, T, D]")
    B, T, C = x["x"].shape
    validate.tokens(T)
    for n in names:
        validate.shape(n, x.get(n), (B, T, C), "[B, T, D] (of x)")
    return B, T, C


def _validate_options(x: dict, allowed: dict) -> None:
    for n, values in allowed.items():
        if x.get(n) is not None and x[n] not in values:
            raise UsageError(f"{n}: {x[n]!r}, not one of {values}")
    if x.get("eps") is not None and not (isinstance(x["eps"], float) and x["eps"] > 0):
        raise UsageError(f"eps: {x['eps']!r}, not a positive float")


FLAGS = (True, False)


def validate_gated(x: dict) -> None:
    """x, g, residual [B, T, D]; weight, bias [D]; activation swish / silu / sigmoid."""
    _, _, D = _validate_rows(x, ("g", "residual"))
    for n in ("weight", "bias"):
        validate.shape(n, x.get(n), (D,), "[D]")
    _validate_options(x, {"activation": ("swish", "silu", "sigmoid"), "prenorm": FLAGS, "residual_in_fp32": FLAGS})
    validate.finite(x)


def validate_linear(x: dict) -> None:
    """x, g, residual [B, T, D]; norm_weight, norm_bias [D]; linear_weight [Dv, D]; linear_bias [Dv]."""
    _, _, D = _validate_rows(x, ("g", "residual"))
    for n in ("norm_weight", "norm_bias"):
        validate.shape(n, x.get(n), (D,), "[D]")
    validate.rank("linear_weight", x["linear_weight"], 2, "[Dv, D]")
    Dv = x["linear_weight"].shape[0]
    validate.shape("linear_weight", x["linear_weight"], (Dv, D), "[Dv, D] (D of x)")
    validate.shape("linear_bias", x.get("linear_bias"), (Dv,), "[Dv]")
    _validate_options(x, {"prenorm": FLAGS, "residual_in_fp32": FLAGS})
    validate.finite(x)


def validate_l2(x: dict) -> None:
    _validate_rows(x, ())
    _validate_options(x, {"output_dtype": tuple(fla_ops.OUTPUT_DTYPES)})
    validate.finite(x)


def validate_group(x: dict) -> None:
    """x, residual [B, T, G D] (G = num_groups); weight, bias [G D]."""
    _, _, C = _validate_rows(x, ("residual",))
    G = x.get("num_groups") or 1
    if not isinstance(G, int) or G < 1 or C % G:
        raise UsageError(f"num_groups: {G!r} does not divide the {C} channels of x")
    for n in ("weight", "bias"):
        validate.shape(n, x.get(n), (C,), "[G D]")
    _validate_options(x, {"prenorm": FLAGS, "residual_in_fp32": FLAGS, "is_rms_norm": FLAGS})
    validate.finite(x)


# The conventions the oracles take when an option is left out (fla_ops.NORM_CONVENTIONS; each measured by a probe)
GATED_DEFAULTS = {"activation": "swish", "eps": 1e-6, "prenorm": False}
GROUP_DEFAULTS = {"eps": 1e-5, "prenorm": False, "is_rms_norm": False, "num_groups": 1}
L2_DEFAULTS = {"eps": 1e-6}


def _defaults(x: dict, defaults: dict) -> dict:
    return {**x, **{n: v for n, v in defaults.items() if x.get(n) is None}}


def _r_fp32(x: dict) -> bool:
    """Whether fla keeps r = x + residual in fp32: residual_in_fp32 without a residual (else r has its dtype)."""
    return bool(x.get("residual_in_fp32")) and x.get("residual") is None


def _only(x: dict, names: tuple[str, ...]) -> dict:
    return {n: x[n] for n in names if n in x}


GATED_IN = ("x", "g", "weight", "bias", "activation", "residual", "prenorm", "eps")
LINEAR_IN = ("x", "g", "norm_weight", "linear_weight", "norm_bias", "linear_bias", "residual", "prenorm", "eps")
GROUP_IN = ("x", "weight", "bias", "residual", "eps", "prenorm", "is_rms_norm", "num_groups")


def _boundary_case(T, D, Dv, HQ, H, cu_seqlens, seed, **options):
    """A boundary case: rows T, normalised dim D, the fused linear's output dim Dv (= D for the other norms)."""
    return NormCase(T=T, D=D, Dv=Dv, seed=seed, **options)


def _present(case) -> dict:
    return {n: getattr(case, n) for n in ("weight", "bias", "linear_bias", "residual", "prenorm", "residual_in_fp32",
                                          "activation", "eps", "is_rms_norm", "num_groups", "output_dtype",
                                          "strided_upstream")}


# fla-core 0.6.0's norms (fla/modules/norm/) on the H200's tiles.  D <= 512 takes the blocked kernels (rows in tiles of
# BT, autotuned: 16 .. 64 gated, 32 .. 128 layer / group norm, 8 .. 128 l2norm; the last tile partial), D > 512 the row
# kernels (one program per row): D 24 (masked lanes of BD = 32) and 520 (BD = 1024).  The gated and layer / group norm
# backwards run NS = min(132 SMs, rows) programs of BS = cdiv(rows, NS) rows each, partial sums of dw, db per program:
# rows 131, 132, 133, 266 cross from one row a program to two and three; the group norm's programs are per group,
# NS = min(cdiv(132, G), rows / G) G, so with G = 4 groups the crossing is at 33 tokens.  HAS_WEIGHT, HAS_BIAS,
# HAS_RESIDUAL / STORE_RESIDUAL_OUT (residual, prenorm, residual_in_fp32), IS_RMS_NORM, ACTIVATION are constexprs; eps a
# runtime scalar (its default a convention); the fused linear recomputes the gated output in the backward
# (RECOMPUTE_OUTPUT) for the linear weight's gradient.
NORM_DIMS = {"quick": (24, 40), "ci": (24, 520), "full": (64, 520)}
EPS_LEVELS = (None, 1e-4)
GATED_OPTIONS = ("weight", "bias", "residual", "prenorm", "residual_in_fp32", "activation", "eps")
GATED_STRUCTURE = Structure(
    lengths={"fwd": {"tile": 64}, "bwd": {"programs": 132}}, dims=NORM_DIMS, build=_boundary_case,
    present=_present, varlen=False, dims_pair=False,
    options={"fwd": GATED_OPTIONS, "bwd": (*GATED_OPTIONS, "strided_upstream")},
    option_levels={"activation": (None, "sigmoid", "silu"), "eps": EPS_LEVELS, "prenorm": (None, True),
                   "residual_in_fp32": (None, True)})
LINEAR_OPTIONS = ("weight", "bias", "linear_bias", "residual", "prenorm", "residual_in_fp32", "eps")
LINEAR_STRUCTURE = Structure(
    lengths={"fwd": {"tile": 64}, "bwd": {"programs": 132}}, dims=NORM_DIMS, build=_boundary_case,
    present=_present, varlen=False, options={"fwd": LINEAR_OPTIONS, "bwd": (*LINEAR_OPTIONS, "strided_upstream")},
    option_levels={"eps": EPS_LEVELS, "prenorm": (None, True), "residual_in_fp32": (None, True)})
L2_STRUCTURE = Structure(
    lengths={"fwd": {"tile": 128}, "bwd": {"tile": 128}}, dims=NORM_DIMS, build=_boundary_case, present=_present,
    varlen=False, dims_pair=False,
    options={"fwd": ("eps", "output_dtype"), "bwd": ("eps", "output_dtype", "strided_upstream")},
    option_levels={"eps": EPS_LEVELS, "output_dtype": (None, "fp32")})
GROUP_OPTIONS = ("weight", "bias", "residual", "prenorm", "residual_in_fp32", "eps", "is_rms_norm", "num_groups")
GROUP_STRUCTURE = Structure(
    lengths={"fwd": {"tile": 128}, "bwd": {"group_programs": 33, "programs": 132}}, dims=NORM_DIMS,
    build=_boundary_case, present=_present, varlen=False, dims_pair=False,
    options={"fwd": GROUP_OPTIONS, "bwd": (*GROUP_OPTIONS, "strided_upstream")},
    option_levels={"eps": EPS_LEVELS, "prenorm": (None, True), "residual_in_fp32": (None, True),
                   "is_rms_norm": (None, True), "num_groups": (None, 4)},
    levels={"group_programs": {p: ("c-1", "c", "c+1") for p in ("quick", "ci", "full")}})


TINY = NormCase(T=40, D=24, values="tiny", seed=5)
GATED_PROBES = (
    ConventionProbe("activation_default_swish", "measures that fla rms_norm_gated's gate left out is swish(g)",
                    "sigmoid(g)", NormCase(T=40, D=24, seed=5),
                    lambda op, x, s: op.oracle(**{**x, "activation": "sigmoid"}, scale=s), output="y"),
    ConventionProbe("eps_default", "measures that fla rms_norm_gated's eps left out is 1e-6", "eps = 1e-5", TINY,
                    lambda op, x, s: op.oracle(**{**x, "eps": 1e-5}, scale=s), output="y"),
)
LINEAR_PROBES = (
    ConventionProbe("gate_swish", "measures that fla rms_norm_swish_gate_linear gates by swish(g)", "sigmoid(g)",
                    NormCase(T=40, D=24, Dv=40, seed=5), lambda op, x, s: _linear_sigmoid(x), output="out"),
    ConventionProbe("eps_default", "measures that fla rms_norm_swish_gate_linear's eps left out is 1e-6", "eps = 1e-5",
                    TINY, lambda op, x, s: op.oracle(**{**x, "eps": 1e-5}, scale=s), output="out"),
)
L2_PROBES = (
    ConventionProbe("eps_in_sqrt", "measures that fla l2norm is x / sqrt(sum(x^2) + eps), eps 1e-6 when left out",
                    "x / max(|x|, eps) (torch's normalize)", TINY,
                    lambda op, x, s: torch.nn.functional.normalize(x["x"], dim=-1, eps=1e-6), output="y"),
)
GROUP_PROBES = (
    ConventionProbe("groups_contiguous", "measures that fla group_norm's group g is channels g D .. (g + 1) D - 1",
                    "group g is channels g, g + G, ...", NormCase(T=40, D=24, num_groups=4, bias=True, seed=5),
                    lambda op, x, s: _strided_groups(op, x, s), output="y"),
    ConventionProbe("eps_default", "measures that fla group_norm's eps left out is 1e-5", "eps = 1e-6", TINY,
                    lambda op, x, s: op.oracle(**{**x, "eps": 1e-6}, scale=s), output="y"),
)


def _linear_sigmoid(x):
    y, _ = MOD.rms_norm_gated(x["x"], x["g"], x["norm_weight"], x["norm_bias"], "sigmoid", eps=1e-6)
    out = y @ x["linear_weight"].T
    return out if x.get("linear_bias") is None else out + x["linear_bias"]


def _strided_groups(op, x, s):
    """The group norm with group g taking channels g, g + G, ...: the channels permuted to contiguous groups and
    back."""
    C, G = x["x"].shape[-1], x["num_groups"]
    perm = torch.arange(C).reshape(C // G, G).T.reshape(-1)      # new position i holds channel perm[i]
    inv = torch.argsort(perm)
    y, _ = op.oracle(**{**x, "x": x["x"][..., perm], "weight": x["weight"][perm], "bias": x["bias"][perm]}, scale=s)
    return y[..., inv]


NORM_MUTANTS = (
    # structural: the row kernel only (D > 512)
    Mutant("rms_norm_gated_row_variance_over_d_minus_1", "gated RMS norm, D > 512 (row kernel): the mean square over "
           "D - 1 instead of D", "modules/norm/fused_norm_gate.py",
           "        b_xbar = tl.where(m_d, b_x, 0.0)\n        b_var = tl.sum(b_xbar * b_xbar, axis=0) / D\n",
           "        b_xbar = tl.where(m_d, b_x, 0.0)\n        b_var = tl.sum(b_xbar * b_xbar, axis=0) / (D - 1)\n",
           ("kernel.fla.rms_norm_gated.fwd.fp32.typical", "kernel.fla.rms_norm_gated.fwd.bf16.typical")),
    # the fix the kernel's comment records: the recomputed output must include the gate
    Mutant("rms_norm_gate_linear_recomputed_without_gate", "gated RMS norm + linear backward: the output recomputed "
           "for the linear weight's gradient without the gate", "modules/norm/fused_norm_gate.py",
           "            tl.store(p_y, (b_y * b_gate).to(p_y.dtype.element_ty), mask=m_x)\n",
           "            tl.store(p_y, b_y.to(p_y.dtype.element_ty), mask=m_x)\n",
           ("kernel.fla.rms_norm_gate_linear.bwd.fp32.typical", "kernel.fla.rms_norm_gate_linear.bwd.bf16.typical")),
    Mutant("l2norm_bwd_projection_dropped", "l2norm backward (D <= 512): the projection term -(dy . y) y rstd dropped",
           "modules/norm/l2norm.py",
           "    b_dx = b_dy * b_rstd[:, None] - tl.sum(b_dy * b_y, 1)[:, None] * b_y * b_rstd[:, None]\n",
           "    b_dx = b_dy * b_rstd[:, None]\n",
           ("kernel.fla.l2norm.bwd.fp32.typical", "kernel.fla.l2norm.bwd.bf16.typical")),
    # structural: reached only with several groups
    Mutant("group_norm_bwd_first_group_dy", "group norm backward (D <= 512): every group reads the upstream gradient "
           "of group 0", "modules/norm/layernorm.py",
           "        p_dy = dy + i_g * D + o_t[:, None] * (G*D) + o_d[None, :]\n",
           "        p_dy = dy + o_t[:, None] * (G*D) + o_d[None, :]\n",
           ("kernel.fla.group_norm.bwd.fp32.typical", "kernel.fla.group_norm.bwd.bf16.typical")),
)


NORM_NOT_REACHED = {
    r"^[ \t]*if D > BD:": (
        "exclude", "fla's refusal of a feature dim past 64 KB (BD = 65536 / element size: D > 16384 in fp32), far "
                   "past any norm the layers apply"),
}


def _fp32_r(x: dict) -> tuple[str, ...]:
    """r is float32 when fla keeps it so (_r_fp32)."""
    return ("r",) if _r_fp32(x) else ()


def _norm_op(name, title, kernel, oracle, same, required, optional, grad_inputs, outputs, regimes, error_inputs,
             sample_case, probes, structure, entry, entry_params, source, fp32_when=_fp32_r):
    return OpRecord(
        name=name, title=title, kernel=kernel, conventions=fla_ops.NORM_CONVENTIONS, oracle=oracle, same_dtype=same,
        make_inputs=norm_inputs, required=required, optional=optional, grad_inputs=grad_inputs, outputs=outputs,
        regimes=regimes, cases=norm_cases, budget_factor=BUDGET_FACTOR_BLOCKWISE, error_inputs=error_inputs,
        sample_case=sample_case, dot="ieee", probes=probes, examples={"quick": 1, "ci": 2, "full": 5},
        package=("fla.modules.norm",), structure=structure, not_reached=NORM_NOT_REACHED,
        stages={p: one_stage(f"{title} (one stage)", source, p) for p in ("fwd", "bwd")},
        mutants=tuple(m for m in NORM_MUTANTS if op_of(m.killers[0]) == name), layout=kernel.__doc__ or title,
        entry=entry, entry_params=entry_params, fp32_when=fp32_when,
        dtype_inputs=tuple(n for n in required + optional if n not in ("prenorm", "residual_in_fp32", "activation",
                                                                        "eps", "is_rms_norm", "num_groups",
                                                                        "output_dtype")))


TYPICAL_TINY = {"typical": {}, "tiny": {"values": "tiny"}}
RESIDUAL_OPTIONS = {"residual": "residual", "prenorm": "prenorm", "residual_in_fp32": "residual_in_fp32", "eps": "eps"}

RMS_NORM_GATED = _norm_op(
    "rms_norm_gated", "gated RMS norm", lambda scale, **x: fla_ops.rms_norm_gated(**x),
    lambda scale, **x: MOD.rms_norm_gated(**_only(_defaults(x, GATED_DEFAULTS), GATED_IN)),
    lambda prec, scale, **x: same_dtype.rms_norm_gated(prec, _r_fp32(x), **_only(_defaults(x, GATED_DEFAULTS),
                                                                                   GATED_IN)),
    ("x", "g"), ("weight", "bias", "activation", "residual", "prenorm", "residual_in_fp32", "eps"),
    ("x", "g", "weight", "bias", "residual"), ("y", "r"), {**TYPICAL_TINY, "sigmoid": {"activation": "sigmoid"}},
    validate_gated, NormCase(T=8, seed=1, bias=True, residual=True, prenorm=True), GATED_PROBES, GATED_STRUCTURE,
    fla_ops.rms_norm_gated_entry, {**RESIDUAL_OPTIONS, "activation": "activation"},
    "layer_norm_gated_fwd_kernel(_row) / layer_norm_gated_bwd_kernel(_row)")
RMS_NORM_GATE_LINEAR = _norm_op(
    "rms_norm_gate_linear", "gated RMS norm and linear", lambda scale, **x: fla_ops.rms_norm_gate_linear(**x),
    lambda scale, **x: MOD.rms_norm_gate_linear(**_only(_defaults(x, GATED_DEFAULTS), LINEAR_IN)),
    lambda prec, scale, **x: same_dtype.rms_norm_gate_linear(prec, **_only(_defaults(x, GATED_DEFAULTS), LINEAR_IN),
                                                             residual_in_fp32=_r_fp32(x)),
    ("x", "g", "linear_weight"), ("norm_weight", "norm_bias", "linear_bias", "residual", "prenorm", "residual_in_fp32",
                                  "eps"),
    ("x", "g", "norm_weight", "norm_bias", "linear_weight", "linear_bias", "residual"), ("out", "r"), TYPICAL_TINY,
    validate_linear, NormCase(T=8, seed=1, bias=True, linear_bias=True, residual=True, prenorm=True), LINEAR_PROBES,
    LINEAR_STRUCTURE, fla_ops.rms_norm_gate_linear_entry, RESIDUAL_OPTIONS,
    "layer_norm_gated_fwd_kernel(_row) / layer_norm_gated_bwd_kernel(_row) (recompute_output), torch linear")
L2NORM = _norm_op(
    "l2norm", "l2norm", lambda scale, **x: fla_ops.l2norm(**_only(x, ("x", "eps", "output_dtype"))),
    lambda scale, **x: MOD.l2norm(**_only(_defaults(x, L2_DEFAULTS), ("x", "eps"))),
    lambda prec, scale, **x: same_dtype.l2norm(prec, **_only(_defaults(x, L2_DEFAULTS), ("x", "eps", "output_dtype"))),
    ("x",), ("eps", "output_dtype"), ("x",), ("y",), TYPICAL_TINY, validate_l2, NormCase(T=8, seed=1), L2_PROBES,
    L2_STRUCTURE, fla_ops.l2norm_entry, {"eps": "eps", "output_dtype": "output_dtype"},
    "l2norm_fwd_kernel(_row) / l2norm_bwd_kernel(_row)", fp32_when=lambda x: ("y",) if x.get("output_dtype") == "fp32"
    else ())
GROUP_NORM = _norm_op(
    "group_norm", "group norm", lambda scale, **x: fla_ops.group_norm(**_only(x, (*GROUP_IN, "residual_in_fp32"))),
    lambda scale, **x: MOD.group_norm(**_only(_defaults(x, GROUP_DEFAULTS), GROUP_IN)),
    lambda prec, scale, **x: same_dtype.group_norm(prec, _r_fp32(x), **_only(_defaults(x, GROUP_DEFAULTS), GROUP_IN)),
    ("x",), ("weight", "bias", "residual", "eps", "prenorm", "residual_in_fp32", "is_rms_norm", "num_groups"),
    ("x", "weight", "bias", "residual"), ("y", "r"), {**TYPICAL_TINY, "rms": {"is_rms_norm": True}}, validate_group,
    NormCase(T=8, seed=1, bias=True, residual=True, prenorm=True, num_groups=4, D=8), GROUP_PROBES, GROUP_STRUCTURE,
    fla_ops.group_norm_entry, {**RESIDUAL_OPTIONS, "is_rms_norm": "is_rms_norm", "num_groups": "num_groups"},
    "layer_norm_fwd_kernel(_row) / layer_norm_bwd_kernel(_row)")
NORM_OPS = (RMS_NORM_GATED, RMS_NORM_GATE_LINEAR, L2NORM, GROUP_NORM)
