"""Momentum DeltaNet: its case type, input builder, regimes and hypothesis strategy, input validation, and
the records of fla's chunk (chunk sizes 16, 32, 64) and fused recurrent MDN (docs/design.md sections 3, 7).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from hypothesis import strategies as st

from kernels import fla_ops
from references import mdn as MDN
from verify import same_dtype, validate
from verify.errors import UsageError
from verify.inputs import case_label, linear_draws, on_device
from verify.ops.record import BUDGET_FACTOR_BLOCKWISE, BUDGET_FACTOR_SEQUENTIAL, ConventionProbe, KernelOp
from verify.strategies import capped


@dataclass(frozen=True)
class MdnCase:
    """One MDN input.  Each gate is 'typical' or a hard value; the others stay typical."""
    T: int = 16
    Dk: int = 16
    Dv: int = 16
    B: int = 1
    H: int = 1
    log_mu: str = "typical"      # floor: log mu = -2 (the reported experiments' floor); below: -3
    alpha: str = "typical"       # near1: log alpha ~ -1e-3; small: alpha ~ 0.1
    beta: str = "typical"        # near_max: beta = (1 - alpha)(1 - 1e-3); near0: ~1e-4
    eta: str = "typical"         # near0: ~1e-3; near2: 2 - 1e-3
    initial_state: bool = False
    p_given: bool = False        # an explicit residual key p_t (unit-norm, drawn last) instead of alpha_t k_t
    seed: int = 0

    def label(self) -> str:
        return case_label(self)


LOG_MU_FLOOR = -2.0


def mdn_inputs(case: MdnCase, dtype=torch.float64, device="cpu") -> dict:
    """q, k unit-norm, v, gates in fp32, S0/M0 in fp32 when case.initial_state, p (unit-norm, in dtype) when
    case.p_given.  Gates satisfy alpha + beta <= 1, eta in (0, 2)."""
    gen = torch.Generator().manual_seed(case.seed)
    B, T, H = case.B, case.T, case.H
    q, k, v, u = linear_draws(case, gen)
    log_alpha = {"typical": torch.log(u(0.5, 0.99)), "near1": -u(1e-4, 1e-3),
                 "small": torch.log(u(0.05, 0.15))}[case.alpha]
    one_minus_alpha = -torch.expm1(log_alpha)
    beta = {"typical": u(0.05, 0.95) * one_minus_alpha, "near_max": (1 - 1e-3) * one_minus_alpha,
            "near0": u(1e-5, 1e-4) * one_minus_alpha}[case.beta]
    log_mu = {"typical": u(-1.0, -0.05), "floor": torch.full((B, T, H), LOG_MU_FLOOR, dtype=torch.float64),
              "below": torch.full((B, T, H), LOG_MU_FLOOR - 1, dtype=torch.float64)}[case.log_mu]
    eta = {"typical": u(0.5, 1.5), "near0": u(1e-3, 2e-3), "near2": 2 - u(1e-3, 2e-3)}[case.eta]
    out = {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype), "log_alpha": log_alpha.float(),
           "log_mu": log_mu.float(), "beta": beta.float(), "eta": eta.float(), "S0": None, "M0": None}
    if case.initial_state:
        out["S0"] = 0.5 * torch.randn(B, H, case.Dk, case.Dv, generator=gen, dtype=torch.float64).float()
        out["M0"] = 0.5 * torch.randn(B, H, case.Dk, case.Dv, generator=gen, dtype=torch.float64).float()
    if case.p_given:
        p = torch.randn(B, T, H, case.Dk, generator=gen, dtype=torch.float64)
        out["p"] = (p / p.norm(dim=-1, keepdim=True)).to(dtype)
    return on_device(out, device)


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


MDN_GATES = ("log_alpha", "log_mu", "beta", "eta")


def validate_inputs(x: dict) -> None:
    """MDN: q, k [B, T, H, Dk]; v [B, T, H, Dv]; gates [B, T, H]; S0, M0 [B, H, Dk, Dv] (both or neither);
    p [B, T, H, Dk] if given; log alpha <= 0, log mu <= 0, beta in [0, 1], eta in (0, 2)."""
    B, T, H, Dk, Dv = validate.linear_qkv(x)
    for n in MDN_GATES:
        validate.shape(n, x[n], (B, T, H), "[B, T, H]")
    if (x.get("S0") is None) != (x.get("M0") is None):
        raise UsageError("S0 and M0: give both initial states or neither")
    for n in ("S0", "M0"):
        validate.shape(n, x.get(n), (B, H, Dk, Dv), "[B, H, Dk, Dv]")
    validate.shape("p", x.get("p"), (B, T, H, Dk), "[B, T, H, Dk]")
    validate.finite(x)
    validate.interval("log_alpha", x["log_alpha"], -float("inf"), 0.0, lo_open=True, hi_open=False)
    validate.interval("log_mu", x["log_mu"], -float("inf"), 0.0, lo_open=True, hi_open=False)
    validate.interval("beta", x["beta"], 0.0, 1.0, lo_open=False, hi_open=False)
    validate.interval("eta", x["eta"], 0.0, 2.0, lo_open=True, hi_open=True)


def _mdn_terms(scale, **x):
    return {"o": MDN.recurrence(**x, scale=scale, abs_output=True)[0]}


def _mdn_op(name, chunk, conv, budget_factor, regression_cases=None, probes=()):
    return KernelOp(
        name=name, title=name, kernel=lambda scale, **x: fla_ops.mdn(**x, scale=scale, chunk=chunk),
        conventions=conv,
        oracle=lambda scale, **x: MDN.recurrence(**x, scale=scale),
        same_dtype=lambda prec, scale, **x: same_dtype.mdn(**x, prec=prec, scale=scale),
        make_inputs=mdn_inputs, required=("q", "k", "v") + MDN_GATES, optional=("S0", "M0", "p"),
        grad_inputs=("q", "k", "v") + MDN_GATES + ("S0", "M0", "p"), outputs=("o", "S_T", "M_T"),
        regimes=MDN_REGIMES, cases=mdn_cases, budget_factor=budget_factor, error_inputs=validate_inputs,
        sample_case=MdnCase(T=8, seed=1, initial_state=True),
        dot="ieee",     # fla's MDN is PyTorch code: its fp32 matmuls are IEEE (torch's default), not TF32 dots
        terms=_mdn_terms, regression_cases=regression_cases or {}, probes=probes,
        package=("fla.ops.momentum_delta_rule",))


MDN_PROBE_CASE = MdnCase(T=40, Dk=16, Dv=16, seed=5)
MDN_PROBES = (ConventionProbe("residual_alpha_k",
                              "measures that fla's MDN residual uses p_t = alpha_t k_t by default (use_p_times_alpha)",
                              "p_t = k_t (no alpha)", MDN_PROBE_CASE, lambda op, x, s: op.oracle(**x, scale=s, p=x["k"])),
              ConventionProbe("scale_default", "measures that fla's MDN with scale=None uses 1/sqrt(Dk)",
                              "scale=None means 1", MDN_PROBE_CASE, lambda op, x, s: op.oracle(**x, scale=1.0),
                              kernel_scale_none=True))
# The chunk path runs in bf16 only: with alpha ~ 0.1 the two residuals differ by far more than its budget.
MDN_CHUNK_PROBES = (replace(MDN_PROBES[0], case=replace(MDN_PROBE_CASE, alpha="small", initial_state=True)), MDN_PROBES[1])
MDN_CHUNK_OPS = [_mdn_op(f"mdn_chunk{c}", c, fla_ops.MDN_CONVENTIONS, BUDGET_FACTOR_BLOCKWISE, {
    # fla's log(beta + 1e-6) bias at T = 1 (expected failures; the search draws these rarely)
    "fwd.bf16.alpha_near1": [MdnCase(T=1, alpha="near1", seed=50)],
    "bwd.bf16.alpha_near1": [MdnCase(T=1, alpha="near1", seed=12)],
    # coverage: an explicit p (the launcher's use_p_times_alpha=False path, and dp); the adapters pass none
    "fwd.bf16.typical": [MdnCase(T=40, p_given=True, seed=3)],
    "bwd.bf16.typical": [MdnCase(T=40, p_given=True, seed=3)]} if c == 16 else None, MDN_CHUNK_PROBES)
    for c in (16, 32, 64)]
MDN_RECURRENT = _mdn_op(
    "mdn_recurrent", None, fla_ops.MDN_RECURRENT_CONVENTIONS, BUDGET_FACTOR_SEQUENTIAL,
    # the T = 1 cancellation that needed the summed-terms floor (verify/budget.py); was 1.7x budget
    {"fwd.fp32.eta_near2": [MdnCase(T=1, eta="near2", seed=1000)],
     # coverage: an explicit p (use_p_times_alpha=False, and dp); the adapters pass none
     "fwd.fp32.typical": [MdnCase(T=40, p_given=True, seed=3)],
     "bwd.fp32.typical": [MdnCase(T=40, p_given=True, seed=3)]}, MDN_PROBES)
