"""Input builders for PaTH / FoX cases, by named regime (docs/design.md section 7).

One place defines what "beta near 2" or "aligned w" means; the oracle checks call these builders with
fixed seeds and the hypothesis strategies (property_tests, verify.kernel_checks) draw the case fields.
Tensors are produced in float64 and then rounded to the requested dtype; `as_oracle` gives the rounded
values back in float64 so that a comparison measures the kernel, not the rounding of its inputs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

def case_label(case) -> str:
    """The fields of a case dataclass that differ from the defaults, plus T and seed: enough to rebuild it."""
    default = type(case)()
    return " ".join(f"{k}={v}" for k, v in asdict(case).items() if k in ("T", "seed") or v != getattr(default, k))


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
    w = _w(case.w, (B, T, case.H, case.D), gen)
    beta = _beta(case.beta, (B, T, case.H), gen)
    g = _gate(case.gate, (B, T, case.HQ), gen)
    w = w.to(w_dtype)
    out = {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype), "w": w / w.norm(dim=-1, keepdim=True),
           "beta": beta.to(w_dtype), "g": None if g is None else g.to(gate_dtype),
           "cu_seqlens": None if case.cu_seqlens is None else torch.tensor(case.cu_seqlens, dtype=torch.int32)}
    return {k_: (x.to(device) if isinstance(x, torch.Tensor) else x) for k_, x in out.items()}


def floats_as(inputs: dict, dtype: torch.dtype) -> dict:
    """The same inputs with every floating tensor converted to dtype (integer tensors and None kept)."""
    return {k: (x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x)
            for k, x in inputs.items()}


def as_oracle(inputs: dict) -> dict:
    """The same values in float64 (exact: every dtype here embeds in float64)."""
    return floats_as(inputs, torch.float64)


# ------------------------------------------------------------------------------------------------ MDN

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
    seed: int = 0

    def label(self) -> str:
        return case_label(self)


LOG_MU_FLOOR = -2.0


def _linear_draws(case, gen):
    """q, k with unit rows (as an l2-normalising kernel would make them) and v [B, T, H, D] in float64, drawn
    from gen in this order, and u(lo, hi): uniform gates [B, T, H] drawn from gen when called."""
    B, T, H = case.B, case.T, case.H
    q = torch.randn(B, T, H, case.Dk, generator=gen, dtype=torch.float64)
    k = torch.randn(B, T, H, case.Dk, generator=gen, dtype=torch.float64)
    v = torch.randn(B, T, H, case.Dv, generator=gen, dtype=torch.float64)
    return (q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True), v,
            lambda lo, hi: lo + (hi - lo) * torch.rand(B, T, H, generator=gen, dtype=torch.float64))


def mdn_inputs(case: MdnCase, dtype=torch.float64, device="cpu") -> dict:
    """q, k unit-norm, v, p=None, gates in fp32, and S0/M0 in fp32 when case.initial_state.  Gates satisfy
    alpha + beta <= 1, eta in (0, 2)."""
    gen = torch.Generator().manual_seed(case.seed)
    B, T, H = case.B, case.T, case.H
    q, k, v, u = _linear_draws(case, gen)
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
    return {n: (x.to(device) if isinstance(x, torch.Tensor) else x) for n, x in out.items()}


# ------------------------------------------------------------------------------------ Gated DeltaNet

@dataclass(frozen=True)
class GdnCase:
    """One Gated DeltaNet input.  cu_seqlens (varlen) requires B == 1."""
    T: int = 16
    Dk: int = 16
    Dv: int = 16
    B: int = 1
    H: int = 1
    gate: str = "typical"        # alpha = exp(g): typical U(0.5, 0.99); near1: g ~ -1e-3; near0: alpha ~ 1e-3
    beta: str = "typical"        # typical U(0.05, 0.95); near0 ~1e-4; near1 = 1 - ~1e-4; near2 = 2 - ~1e-4
    initial_state: bool = False
    qk_norm: float = 1.0         # norm of every q_t and k_t (1: as use_qk_l2norm_in_kernel would make them)
    cu_seqlens: tuple[int, ...] | None = None
    seed: int = 0

    def label(self) -> str:
        return case_label(self)


def gdn_inputs(case: GdnCase, dtype=torch.float64, device="cpu") -> dict:
    """q, k of norm case.qk_norm, v in dtype; g = log alpha and beta in fp32; S0 [N, H, Dk, Dv] in fp32 when
    case.initial_state (N sequences: B, or the number of cu_seqlens segments); cu_seqlens int32."""
    if case.cu_seqlens is not None and case.B != 1:
        raise ValueError("varlen (cu_seqlens) requires B == 1")
    gen = torch.Generator().manual_seed(case.seed)
    B, T, H = case.B, case.T, case.H
    q, k, v, u = _linear_draws(case, gen)
    q, k = case.qk_norm * q, case.qk_norm * k
    g = {"typical": torch.log(u(0.5, 0.99)), "near1": -u(1e-4, 1e-3), "near0": torch.log(u(1e-3, 1e-2))}[case.gate]
    beta = {"typical": u(0.05, 0.95), "near0": u(1e-5, 1e-4), "near1": 1 - u(1e-4, 1e-3),
            "near2": 2 - u(1e-4, 1e-3)}[case.beta]
    N = B if case.cu_seqlens is None else len(case.cu_seqlens) - 1
    S0 = 0.5 * torch.randn(N, H, case.Dk, case.Dv, generator=gen, dtype=torch.float64) if case.initial_state else None
    out = {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype), "g": g.float(), "beta": beta.float(),
           "S0": None if S0 is None else S0.float(),
           "cu_seqlens": None if case.cu_seqlens is None else torch.tensor(case.cu_seqlens, dtype=torch.int32)}
    return {n: (x.to(device) if isinstance(x, torch.Tensor) else x) for n, x in out.items()}
