"""What a report measures: the kernel ops (the records of pathmdn_verify.ops.OPS whose `report` family is set, plus
the float32 reference forms, declared here), and per profile the sweep points.

A point is one input (a PathCase / MdnCase of pathmdn_verify.ops, plus at most one swept knob that the named
regimes do not cover: beta = 2 - gap, consecutive-w alignment, gate strength, a constant log mu), one op,
one pass and one dtype.  Its id, `<plot>.<op>.<pass>.<dtype>.<x>`, is stable across runs, so two reports
can be compared point by point.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from pathmdn_verify.core.precision import Precision
from pathmdn_verify.ops.attention_ops import PathCase, path_inputs
from pathmdn_verify.ops.mdn_ops import MdnCase, mdn_inputs

# The report's words for a record's `report` family (verify/ops/: OpRecord.report) and for a reference form.
FAMILIES = {"path": "PaTH", "fox": "FoX", "mdn": "MDN", "form": "reference form"}
# The float32 chunk forms of references/mdn_oracle.py: not kernel ops (no record), so declared here.
FORMS = {"stable": "reference stable chunk form", "log": "paper's log-domain chunk form"}
CHUNKS = (16, 32, 64)


@dataclass(frozen=True)
class Op:
    """One implementation under measurement.  family: path | fox | mdn (a production kernel: `name` is its
    record in verify/ops/, the record's `report` field; judged by the checks' own comparison and budget) or
    form (a float32 chunk form of references/mdn_oracle.py, `name` the form, error only)."""
    family: str
    name: str
    chunk: int | None = None
    dtypes: tuple[str, ...] = ("bf16", "fp32")

    @property
    def record(self):
        from pathmdn_verify.ops import OPS as KERNEL_OPS
        return KERNEL_OPS[self.name]

    @property
    def key(self) -> str:
        """The op's word in point ids: the record's name, or <form>_chunk<N>."""
        return f"{self.name}_chunk{self.chunk}" if self.family == "form" else self.name

    @property
    def label(self) -> str:
        """The op in the report's words: its family's word and the record's name ('MDN (<name>)'), or the
        form and its chunk size ('reference stable chunk form, chunk 16')."""
        if self.family == "form":
            return f"{FORMS[self.name]}, chunk {self.chunk}"
        return f"{FAMILIES.get(self.family, self.family)} ({self.name})"

    def precision(self, dtype: str, fp32_dot: str) -> Precision:
        return Precision.of(dtype, "ieee") if self.family == "form" else Precision.of_op(self.record, dtype, fp32_dot)


_CHUNK = re.compile(r"chunk(\d+)$")


def _chunk(name: str) -> int | None:
    # OpRecord has no chunk-size field: a chunked kernel's record is named <...>chunk<N> (verify/ops/mdn_ops.py),
    # so the size is read off that naming rule, not off any particular op's name.
    m = _CHUNK.search(name)
    return int(m.group(1)) if m else None


def measured() -> dict[str, Op]:
    """What a report measures, by point-id key: every record of pathmdn_verify.ops.OPS whose `report` is set (in the
    op table's order), then the reference forms.  Built on each call, so an op added to the table later (a
    plug-in's `declare`) is measured too."""
    from pathmdn_verify.ops import OPS as KERNEL_OPS
    ops = [Op(r.report, r.name, _chunk(r.name), tuple(r.dtypes)) for r in KERNEL_OPS.values() if r.report]
    ops += [Op("form", form, c, ("fp32",)) for form in FORMS for c in CHUNKS]
    return {op.key: op for op in ops}


def label(op: str) -> str:
    """A point's op in the report's words (the key itself for an op this verify does not measure)."""
    found = measured().get(op)
    return found.label if found else op


@dataclass(frozen=True)
class Point:
    plot: str                       # T | beta | align | gate | magnitude | mdn_map | state
    op: str
    pass_: str
    dtype: str
    x: float                        # the nominal swept value (the plotted x is measured from the inputs)
    case: PathCase | MdnCase = field(default_factory=PathCase)
    knob: tuple[str, float] | None = None

    @property
    def id(self) -> str:
        return f"{self.plot}.{self.op}.{self.pass_}.{self.dtype}.{self.x:g}"


def inputs(point: Point, dtype: torch.dtype, device: str) -> dict:
    """The point's tensors: the named-regime builders of pathmdn_verify.ops, then the knob.
    beta_gap d: beta = 2 - d everywhere; w_align e: w_t = normalise(base + e z_t), one base per head
    (e -> 0: consecutive w parallel; with beta = 2 the UT system's condition grows to ~1e4 at T = 64);
    gate_shift s: g = log sigmoid(s + z);
    log_mu m: log mu = m everywhere.  (A state-tracking point's knob, sequences, is its sample size.)"""
    from pathmdn_verify import ops
    case = point.case
    if point.op in ops.OPS:      # a kernel op: its record's own input builder (a plug-in op's inputs too)
        x = ops.OPS[point.op].make_inputs(case, dtype, device)
    else:                        # a reference form of references/mdn_oracle.py
        x = (mdn_inputs if isinstance(case, MdnCase) else path_inputs)(case, dtype, device)
    if point.knob is None:
        return x
    name, value = point.knob
    gen = torch.Generator().manual_seed(case.seed + 1)
    if name == "beta_gap":
        x["beta"] = torch.full_like(x["beta"], 2 - value)
    elif name == "w_align":
        B, T, H, D = x["w"].shape
        w = torch.randn(B, 1, H, D, generator=gen, dtype=torch.float64) + value * torch.randn(
            B, T, H, D, generator=gen, dtype=torch.float64)
        x["w"] = (w / w.norm(dim=-1, keepdim=True)).float().to(device)
    elif name == "gate_shift":
        z = torch.randn(x["q"].shape[:3], generator=gen, dtype=torch.float64)
        x["g"] = F.logsigmoid(value + z).float().to(device)
    elif name == "log_mu":
        x["log_mu"] = torch.full_like(x["log_mu"], value)
    else:
        raise ValueError(f"unknown knob {name!r}")
    return x


def axis_value(point: Point, x: dict) -> float:
    """The plotted x, measured from the inputs: 2 - beta as stored (fp32), -mean log f, max |q|, |k|; the
    alignment plot's x (the UT system's condition number) comes from pathmdn_verify.report.bounds."""
    if point.plot == "beta":
        return float(2 - x["beta"].double().max())
    if point.plot == "gate":
        return float(-x["g"].double().mean())
    if point.plot == "magnitude":
        return float(max(x["q"].abs().max(), x["k"].abs().max()))
    return float(point.x)


# ------------------------------------------------------------------------------------------ profiles

@dataclass(frozen=True)
class Profile:
    D: int                                 # head dim of PaTH / FoX points (MDN: Dk = Dv = D)
    T: tuple[int, ...]                     # forward error-vs-T sweep
    T_bwd: tuple[int, ...]                 # backward error-vs-T sweep
    T_regime: int                          # T of the beta / alignment / gate / magnitude sweeps
    beta_gaps: tuple[float, ...]
    align: tuple[float, ...]
    gate_shifts: tuple[float, ...]
    gains: tuple[float, ...]
    log_mu: tuple[float, ...]
    T_mdn_map: int
    state_n: tuple[int, ...]
    state_sequences: int


PROFILES = {
    "quick": Profile(D=16, T=(16, 64, 160), T_bwd=(16, 40), T_regime=64, beta_gaps=(1, 1e-3, 0),
                     align=(10, 1e-2), gate_shifts=(6, -6), gains=(1, 1e3, 1e6),
                     log_mu=(-0.5, -1, -2), T_mdn_map=64, state_n=(16, 64), state_sequences=2),
    "ci": Profile(D=32, T=(16, 64, 160, 400, 1024), T_bwd=(16, 64, 160), T_regime=160,
                  beta_gaps=(1, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 0), align=(100, 3, 1, 0.3, 0.1, 1e-2, 1e-3),
                  gate_shifts=(8, 4, 2, 0, -2, -4, -8), gains=(1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6),
                  log_mu=(-0.25, -0.5, -1, -2, -3, -4), T_mdn_map=256, state_n=(16, 64, 256), state_sequences=4),
    "full": Profile(D=64, T=(64, 256, 1024, 4096, 8192), T_bwd=(64, 256, 1024), T_regime=1024,
                    beta_gaps=(1, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 0),
                    align=(100, 3, 1, 0.3, 0.1, 1e-2, 1e-3, 1e-4), gate_shifts=(8, 4, 2, 0, -2, -4, -8),
                    gains=(1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6), log_mu=(-0.25, -0.5, -1, -2, -3, -4, -6),
                    T_mdn_map=1024, state_n=(64, 256, 1024, 4096), state_sequences=8),
}


def points(profile: str, seed: int = 0) -> list[Point]:
    """Every point of a profile, in plotting order, from the measured op records: error vs T for every kernel
    (of a family's chunked kernels only the largest chunk: the MDN map sweeps every chunk size); the beta,
    alignment and state-tracking sweeps for the PaTH family (their knobs are PaTH's beta and w); gate and
    magnitude for the families measured on PathCase inputs (attention: q, k, a forget gate g); the MDN map
    for the MDN family and the reference forms."""
    p = PROFILES[profile]
    pc = PathCase(D=p.D, Dv=p.D, seed=seed)
    case_of = {"path": pc, "fox": replace(pc, gate="mixed"), "mdn": MdnCase(Dk=p.D, Dv=p.D, seed=seed)}
    ops = list(measured().values())
    kernels = [o for o in ops if o.family != "form"]
    largest = {o.family: max(k.chunk for k in kernels if k.family == o.family and k.chunk) for o in kernels if o.chunk}
    out = []
    for op in kernels:
        if op.chunk is not None and op.chunk != largest[op.family]:
            continue
        case = case_of[op.family]
        for dtype in op.dtypes:
            for pass_, Ts in (("fwd", p.T), ("bwd", p.T_bwd)):
                if pass_ in op.record.passes:
                    out += [Point("T", op.key, pass_, dtype, T, replace(case, T=T)) for T in Ts]
    path = [o for o in kernels if o.family == "path"]
    attention = [o for o in kernels if isinstance(case_of[o.family], PathCase)]
    for dtype in ("bf16", "fp32"):
        for op in (o for o in path if dtype in o.dtypes):
            at = replace(case_of[op.family], T=p.T_regime)
            out += [Point("beta", op.key, "fwd", dtype, d, at, ("beta_gap", d)) for d in p.beta_gaps]
            out += [Point("align", op.key, "fwd", dtype, e, replace(at, beta="two"), ("w_align", e)) for e in p.align]
        for op in (o for o in attention if dtype in o.dtypes):
            at = replace(pc, T=p.T_regime)      # the gate sweep sets g itself: every family on the same case
            if "g" in op.record.required + op.record.optional:     # the sweep sets the op's forget gate g
                out += [Point("gate", op.key, "fwd", dtype, s, at, ("gate_shift", s)) for s in p.gate_shifts]
            out += [Point("magnitude", op.key, "fwd", dtype, gain, replace(at, logit_gain=gain)) for gain in p.gains]
    mm = replace(case_of["mdn"], T=p.T_mdn_map)
    out += [Point("mdn_map", op.key, "fwd", op.dtypes[0], m, mm, ("log_mu", m))
            for op in ops if op.family in ("mdn", "form") for m in p.log_mu]
    out += [Point("state", op.key, "fwd", dtype, n, PathCase(T=n + 1, seed=seed), ("sequences", p.state_sequences))
            for op in path for dtype in ("bf16", "fp32") if dtype in op.dtypes for n in p.state_n]
    return out


def select(points_: list[Point], patterns: list[str] | None) -> list[Point]:
    """Points whose id matches a -k expression (the check selector's syntax: pathmdn_verify.core.registry.matcher)."""
    from pathmdn_verify.core.registry import matcher
    if not patterns:
        return points_
    matches = [matcher(p) for p in patterns]
    return [pt for pt in points_ if any(m(pt.id) for m in matches)]
