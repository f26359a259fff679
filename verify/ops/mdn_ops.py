"""Momentum DeltaNet: its case type, input builder, regimes and hypothesis strategy, input validation, and
the records of fla's chunk (chunk sizes 16, 32, 64) and fused recurrent MDN (docs/design.md sections 3, 7).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
from hypothesis import strategies as st

from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify import same_dtype
from pathmdn_verify.core import validate
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import op_of
from pathmdn_verify.core.inputs import case_label, linear_draws, on_device
from pathmdn_verify.platform.mutation import Mutant
from pathmdn_verify.core.records import (
    BUDGET_FACTOR_BLOCKWISE,
    BUDGET_FACTOR_SEQUENTIAL,
    ConventionProbe,
    Fixed,
    OpRecord,
    Structure,
)
from pathmdn_verify.core.strategies import capped, shape_rows
from pathmdn_verify.stages import mdn_stages, one_stage


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

MDN_LAYOUT = ('q, k [B, T, H, Dk] (unit rows), v [B, T, H, Dv] in the dtype checked; log_alpha, log_mu, beta, eta '
    '[B, T, H] fp32 gates (alpha + beta <= 1, eta in (0, 2)); S0, M0 [B, H, Dk, Dv] fp32 initial states '
    'or None; p [B, T, H, Dk] or None (None: p_t = alpha_t k_t); scale (None: 1/sqrt(Dk)); returns (o [B, '
    'T, H, Dv], S_T, M_T [B, H, Dk, Dv]) of the recurrence of docs/design.md section 5')


@st.composite

def mdn_cases(draw, regime: dict, profile: str, max_T: int | None = None):
    """MdnCase for one regime; its shape fields from one of the `shape_rows`."""
    Ts, Dks, Dvs, Hs, Bs = MDN_SIZES[profile]
    T = draw(st.sampled_from(capped(Ts, max_T)))
    row = draw(shape_rows(Dk=Dks, Dv=Dvs, H=Hs, batch=Bs))
    return MdnCase(T=T, Dk=row["Dk"], Dv=row["Dv"], H=row["H"], B=row["batch"], seed=draw(st.integers(0, 2**16)),
                   **regime)


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
    o, S, M, terms = MDN.recurrence(**x, scale=scale, with_terms=True)
    return (o, S, M), {"o": terms}


def _mdn_grad_terms(upstream, scale, **x):
    """The two MDN gradients that are cancelling sums, with the magnitude of their summands (the budget's
    floor, pathmdn_verify.core.budget): dq_t = scale S_t do_t (o_t's sum transposed; at T = 1 it is
    proportional to v.do) with scale |S_t| |do_t|, and deta_t = k_t . dk^_t (k^ = eta k) with |k_t| . |dk^_t|.
    One float64 walk on k^ (eta = 1, p given): dk^ is its gradient, and scale |S_t| |do_t| the q-gradient of
    its summed terms scale |S_t|^T |q_t| against |do_t| (times sign(q_t), dropped by abs)."""
    k = x["k"]
    k_hat = (x["eta"][..., None] * k).requires_grad_()
    q = x["q"].detach().requires_grad_()
    p = torch.exp(x["log_alpha"])[..., None] * k if x.get("p") is None else x["p"]
    with torch.enable_grad():
        o, S, M, terms = MDN.recurrence(**{**x, "q": q, "k": k_hat, "p": p, "eta": torch.ones_like(x["eta"])},
                                        scale=scale, with_terms=True)
        ups = upstream([o, S, M])
        (dk_hat,) = torch.autograd.grad([o, S, M], [k_hat], ups, retain_graph=True)
        (dq_terms,) = torch.autograd.grad([terms], [q], [ups[0].abs().to(terms.dtype)])
    return {"q": dq_terms.abs(), "eta": (k.abs() * dk_hat.abs()).sum(-1)}



# Lines of the kernel package the checks deliberately do not reach (verify coverage): regex of source lines ->
# (kind, why).  coverage.py's own exclusion: "exclude" drops the matched lines and the block a matched line
# opens (and the branch into it) from the counts, "partial" accepts a branch of the matched line that only
# ever goes one way.  Not reached is not verified: each reason says why that is a deliberate limit of the
# toolkit, not a gap in the checks.
MDN_NOT_REACHED = {
    r"^[ \t]*if (ctx\.)?use_qk_l2norm_in_kernel:": (
        "exclude", "use_qk_l2norm_in_kernel=True is fla's shared l2norm op (fla/modules/norm) applied to q, k, "
                   "p before MDN, with no oracle here: the toolkit verifies MDN on q, k as given (declared "
                   "convention; inputs drawn unit-norm)"),
    r"^[ \t]*if cu_seqlens is not None:": (
        "exclude", "fla's refusal of varlen MDN (NotImplementedError): MDN_CONVENTIONS.varlen=False"),
    r"^[ \t]*if chunk_size not in \(16, 32, 64\):": (
        "exclude", "fla's refusal of other chunk sizes: the checks pass 16, 32 or 64"),
    r"^[ \t]*if (beta|eta) is None:": (
        "exclude", "the toolkit always passes every gate: fla's defaults (beta = eta = 1) are not MDN's gated "
                   "arithmetic under test"),
    r"^[ \t]*if eta_r is not None:": (
        "partial", "fla's launchers replace eta=None by ones before the autograd function: never None there"),
    r"^[ \t]*if scale is None:\n\s*scale = 1 / \(q\.shape\[-1\] \*\* 0\.5\)": (
        "exclude", "the default scale of fla's reference functions (naive.py): the launchers always pass one "
                   "(their own default is checked by the scale_default probes)"),
    r"^[ \t]*if output_final_state:": (
        "partial", "the checks judge S_T and M_T, so they always ask for the final state"),
}

# Planted bugs (pathmdn_verify.platform.mutation.Mutant): each must turn one of its killer checks red (`verify mutants`).
NAIVE = "ops/momentum_delta_rule/naive.py"
MDN_MUTANTS = (
    # MDN (PyTorch)
    Mutant("mdn_b_noncumulative", "MDN chunk: b_i = alpha_i c_i (non-cumulative alpha) instead of abar_i c_i", NAIVE,
           "b_t = (log_a_cum + log_ct).exp()", "b_t = (log_alpha.squeeze(-1) + log_ct).exp()",
           ("kernel.fla.mdn_chunk16.fwd.bf16.initial_state",)),
    Mutant("mdn_gamma_diag_deleted", "MDN chunk: Gamma^- with its diagonal deleted instead of its rows shifted", NAIVE,
           "gamma_mask = torch.cat(\n        [torch.zeros_like(gamma_mask_q[:, :, :, :1]), gamma_mask_q[:, :, :, :-1]],"
           " dim=3,\n    )",
           "gamma_mask = gamma_mask_q.tril(-1)",
           # the narrowest kill (the error is O(beta eta)): typical alone missed at ci seeds 4 and 5 (0.74x),
           # beta_near_max and eta_near2 caught it at seeds 0-5 (1.39x, 1.18x)
           ("kernel.fla.mdn_chunk16.fwd.bf16.typical", "kernel.fla.mdn_chunk16.fwd.bf16.beta_near_max",
            "kernel.fla.mdn_chunk16.fwd.bf16.eta_near2")),
    Mutant("mdn_mu_cumsum_off_by_one", "MDN chunk: exclusive instead of inclusive cumsum of log mu", NAIVE,
           "log_m_cum = log_mu.squeeze(-1).cumsum(-1)",
           "log_m_cum = log_mu.squeeze(-1).cumsum(-1) - log_mu.squeeze(-1)",
           # naive.py serves every chunk size: a killer per size (chunk 64's typical regime is a listed failure)
           ("kernel.fla.mdn_chunk16.fwd.bf16.typical", "kernel.fla.mdn_chunk32.fwd.bf16.typical",
            "kernel.fla.mdn_chunk64.convention.scale_default")),
    Mutant("mdn_state_bf16", "MDN recurrent: the state S rounded to bf16 after every step", NAIVE,
           "M_prev = Mt\n        S_prev = St", "M_prev = Mt\n        S_prev = St.bfloat16().float()",
           ("kernel.fla.mdn_recurrent.fwd.fp32.typical",)),
    Mutant("mdn_final_state_dropped", "MDN: the final state (S_T, M_T) never written (zeros returned)", NAIVE,
           "final_state = torch.stack([S_prev, M_prev], dim=0)",
           "final_state = torch.zeros_like(torch.stack([S_prev, M_prev], dim=0))",
           ("kernel.fla.mdn_recurrent.fwd.fp32.typical",)),
    Mutant("mdn_explicit_p_times_alpha", "MDN chunk: an explicit p multiplied by alpha as the default p = k is "
           "(use_p_times_alpha ignored)", "ops/momentum_delta_rule/chunk.py",
           "p_eff = p if not use_p_times_alpha else (p * log_alpha.exp().unsqueeze(-1)).to(q.dtype)",
           "p_eff = (p * log_alpha.exp().unsqueeze(-1)).to(q.dtype)",
           ("kernel.fla.mdn_chunk16.fwd.bf16.typical",)),
    Mutant("mdn_residual_no_alpha", "MDN recurrent: residual reads S with p_t = k_t instead of the declared "
           "alpha_t k_t", "ops/momentum_delta_rule/fused_recurrent.py",
           "p_eff = p if not use_p_times_alpha else (p * log_alpha.exp().unsqueeze(-1)).to(q.dtype)",
           "p_eff = p",
           ("kernel.fla.mdn_recurrent.convention.residual_alpha_k",)),
    # structural: reached only by the boundary cases of the fused recurrent path (MDN_RECURRENT_STRUCTURE): no drawn
    # case gives p (its regression cases and the probes have one head); at ci boundaries.assign gives the cases with p
    # and H = 2 (T = 4) to fp32 typical, fp32 logmu_below_floor and bf16 logmu_floor of each pass (the forward's bf16
    # case, whose p reads a state of three small updates, stays within its budget on the first mutant)
    Mutant("mdn_recurrent_p_head_first", "MDN fused recurrent: an explicit p read in fla's former head-first "
           "layout [B, H, T, K] while it is [B, T, H, K], so its tokens and heads are interleaved (the same when "
           "H == 1)", "ops/momentum_delta_rule/fused_recurrent.py",
           "        p_eff = p if not use_p_times_alpha else",
           "        p_eff = p.transpose(1, 2).reshape(p.shape) if not use_p_times_alpha else",
           ("kernel.fla.mdn_recurrent.fwd.fp32.typical", "kernel.fla.mdn_recurrent.fwd.fp32.logmu_below_floor")),
    Mutant("mdn_recurrent_bwd_p_head_first", "MDN fused recurrent backward: the recomputed forward reads an explicit "
           "p in the head-first layout [B, H, T, K] (the forward reads it right), so every gradient is that of "
           "another function (the same when H == 1)", "ops/momentum_delta_rule/fused_recurrent.py",
           "            p_eff = p_r if not ctx.use_p_times_alpha else",
           "            p_eff = p_r.transpose(1, 2).reshape(p_r.shape) if not ctx.use_p_times_alpha else",
           ("kernel.fla.mdn_recurrent.bwd.fp32.typical", "kernel.fla.mdn_recurrent.bwd.fp32.logmu_below_floor",
            "kernel.fla.mdn_recurrent.bwd.bf16.logmu_floor")),
    # Mutants that only the expected-failure ratchet can kill (verify/run/xfail_list.py): their code is already
    # listed as failing, so without the ratchet their checks stay xfail and every other check stays green.
    Mutant("mdn_beta_bias_larger", "MDN chunk: log(beta + 1e-4) instead of fla's own log(beta + 1e-6) (a listed "
           "defect made a hundred times larger; every unlisted MDN chunk check still passes)", NAIVE,
           "log_beta = (beta + 1e-6).squeeze(-1).log()", "log_beta = (beta + 1e-4).squeeze(-1).log()",
           ("kernel.fla.mdn_chunk16.fwd.bf16.beta_near0", "kernel.fla.mdn_chunk32.fwd.bf16.beta_near0")),
    Mutant("mdn_gamma_tril_dropped", "MDN chunk: Gamma's upper triangle masked only by the cancelling factor "
           "(.tril() dropped): exp overflows there to inf x 0 = NaN where log mu decays fast", NAIVE,
           "gamma_mask_q = (log_a_cum.unsqueeze(-1) - log_m_cum.unsqueeze(-2) + a).exp().float().tril() * temp",
           "gamma_mask_q = (log_a_cum.unsqueeze(-1) - log_m_cum.unsqueeze(-2) + a).exp().float() * temp",
           ("kernel.fla.mdn_chunk32.fwd.bf16.logmu_below_floor", "kernel.fla.mdn_chunk32.bwd.bf16.logmu_below_floor")),
)


def _boundary_case(T, D, Dv, HQ, H, cu_seqlens, seed, initial_state=False, p_given=False):
    """An MDN boundary case (MDN has no GQA and takes no cu_seqlens: HQ == H, cu_seqlens None)."""
    return MdnCase(T=T, Dk=D, Dv=Dv, H=H, initial_state=initial_state, p_given=p_given, seed=seed)


def _present(case) -> dict:
    return {"initial_state": case.initial_state, "p_given": case.p_given}


MDN_OPTIONS = {"fwd": ("initial_state", "p_given"), "bwd": ("initial_state", "p_given")}


def _mdn_structure(chunk: int) -> Structure:
    """fla-core 0.6.0's chunk MDN (fla/ops/momentum_delta_rule/naive.py, PyTorch) pads T to a multiple of the
    chunk and walks the chunks; the initial state and an explicit p switch its branches.  It refuses varlen."""
    return Structure(
        lengths={"fwd": {"chunk": chunk}, "bwd": {"chunk": chunk}}, dims={"quick": (16, 32), "ci": (16, 32),
                                                                           "full": (64, 128)},
        build=_boundary_case, present=_present, options=MDN_OPTIONS, heads=((1, 1), (2, 2)), varlen=False)


# fla-core 0.6.0's fused recurrent MDN (fla/ops/momentum_delta_rule/fused_recurrent.py) is no Triton kernel: the
# launcher folds eta into k (rounded to the input dtype) and, where p is None, takes p = alpha k (rounded likewise;
# an explicit p is used as given: use_p_times_alpha=False, as the adapter passes it), then runs
# naive.recurrent_momentum_delta_rule_ref, a PyTorch loop over the tokens in fp32 on [B, H, K, V] states; its
# backward is autograd of the same loop.  So it has no block over K or V, no masked lane, and no constant over T
# (the step is one token).  Its branches: the initial state (S0, M0) given or not (the adapter passes both or
# neither), p given or not (use_p_times_alpha, forward and backward).  T = 2c + 2 = 4 alone, so that every case
# that gives p reads it (at T = 1 without S0 it multiplies a zero state; T = 1 is drawn).  Head dims 8 and 20 (100
# at full) as GDN_RECURRENT_STRUCTURE's, for the MDN authors' fork (fused_recurrent_mode_rule, a Triton walk: BK =
# next_power_of_2(K), lanes past K masked; V in blocks of BV = min(8, next_power_of_2(V)), the last one masked
# where 8 does not divide V); here they give D != Dv both ways.  Heads (1, 1) and (2, 2): no drawn case gives p
# with several heads.  What the adapter never varies takes no factor: cu_seqlens (fla raises NotImplementedError;
# the adapter passes none), output_final_state (always True), use_qk_l2norm_in_kernel (always False), beta and eta
# (always given); scale=None is resolved in Python before the loop (the scale_default probe).
MDN_RECURRENT_STRUCTURE = Structure(
    lengths={"fwd": {"step": 1}, "bwd": {"step": 1}}, dims={"quick": (8, 20), "ci": (8, 20), "full": (8, 100)},
    build=_boundary_case, present=_present, options=MDN_OPTIONS, heads=((1, 1), (2, 2)), varlen=False,
    levels={"step": {p: ("2c+2",) for p in ("quick", "ci", "full")}})


# The oracle and the same-dtype implementation (sequential recurrences: many small launches on a GPU) run on the
# CPU under --references auto: on an H200 they took about 1.8x the CPU's worker-seconds, with the same statuses.
# Heads at once (torch.vmap) did not make the GPU the place either: there the same-dtype results differ from the
# CPU's in the last bits (exp and log; most fp32 values of a check), which the budget would carry into the
# verdicts.  Nor the float64 oracle alone: with 16 processes at once it was no faster on the GPU than on the CPU.
REFERENCES_ON = "cpu"


def _mdn_stages(chunk) -> dict:
    """localize's stages: the chunk forward's locals (mdn_stages); fla's MDN backward (autograd of the same
    PyTorch function) and its recurrent path (a PyTorch token loop) have no intermediate localize reads, one stage."""
    if chunk is None:
        return {"fwd": one_stage("recurrence (one stage)", "recurrent_momentum_delta_rule_ref", "fwd"),
                "bwd": one_stage("gradients (one stage)", "autograd of recurrent_momentum_delta_rule_ref", "bwd")}
    return {"fwd": lambda op, x, dtype, fp32_dot: mdn_stages.stages(op, x, dtype, fp32_dot, chunk),
            "bwd": one_stage("gradients (one stage)", "autograd of chunk_momentum_delta_rule_ref", "bwd")}


def _mdn_op(name, chunk, conv, budget_factor, regression_cases=None, probes=(), grad_terms=None):
    return OpRecord(
        name=name, title=name, kernel=lambda scale, **x: fla_ops.mdn(**x, scale=scale, chunk=chunk),
        conventions=conv,
        oracle=lambda scale, **x: MDN.recurrence(**x, scale=scale),
        same_dtype=lambda prec, scale, **x: same_dtype.mdn(**x, prec=prec, scale=scale),
        make_inputs=mdn_inputs, required=("q", "k", "v") + MDN_GATES, optional=("S0", "M0", "p"),
        grad_inputs=("q", "k", "v") + MDN_GATES + ("S0", "M0", "p"), outputs=("o", "S_T", "M_T"),
        fp32_outputs=("S_T", "M_T"),
        regimes=MDN_REGIMES, cases=mdn_cases, budget_factor=budget_factor, error_inputs=validate_inputs,
        sample_case=MdnCase(T=8, seed=1, initial_state=True),
        examples=None if chunk is None else {"quick": 2, "ci": 2, "full": 5},   # as BOUNDED_EXAMPLES (attention_ops.py)
        dot="ieee",     # fla's MDN is PyTorch code: its fp32 matmuls are IEEE (torch's default), not TF32 dots
        terms=_mdn_terms, grad_terms=grad_terms, regression_cases=regression_cases or {}, probes=probes,
        stages=_mdn_stages(chunk),
        package=("fla.ops.momentum_delta_rule",), report="mdn", not_reached=MDN_NOT_REACHED, refusal=fla_ops.missing_backward,
        layout=MDN_LAYOUT,
        references=REFERENCES_ON, entry=functools.partial(fla_ops._mdn_entry, "fused_recurrent" if chunk is None
                                                          else "chunk"),
        entry_params=MDN_ENTRY_PARAMS if chunk is None else {**MDN_ENTRY_PARAMS, "chunk_size": Fixed(
            "variant", "mdn_chunk16,mdn_chunk32,mdn_chunk64", "each record gives its chunk size; left out it is 64")},
        mutants=tuple(m for m in MDN_MUTANTS if op_of(m.killers[0]) == name),
        structure=MDN_RECURRENT_STRUCTURE if chunk is None else _mdn_structure(chunk))


MDN_PROBE_CASE = MdnCase(T=40, Dk=16, Dv=16, seed=5)
MDN_PROBES = (ConventionProbe("residual_alpha_k",
                              "measures that fla's MDN residual uses p_t = alpha_t k_t by default (use_p_times_alpha)",
                              "p_t = k_t (no alpha)", MDN_PROBE_CASE, lambda op, x, s: op.oracle(**x, scale=s, p=x["k"])),
              ConventionProbe("scale_default", "measures that fla's MDN with scale=None uses 1/sqrt(Dk)",
                              "scale=None means 1", MDN_PROBE_CASE, lambda op, x, s: op.oracle(**x, scale=1.0),
                              kernel_scale_none=True))


def _l2(t):
    """Rows l2-normalised as fla's l2norm_fwd: t / sqrt(sum(t^2) + 1e-6)."""
    return t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)


def _inputs_as(**change):
    """An option's meaning that is a change of the inputs: fn on the inputs with each named one replaced by f(x)."""
    def meaning(fn, x, s):
        return fn(**{**x, **{n: f(x) for n, f in change.items()}}, scale=s)
    return meaning


def _half_qk(x):
    return {**x, "q": 0.5 * x["q"], "k": 0.5 * x["k"]}


def _option_probes(case, p_case) -> tuple:
    """The entry point's other options, each measured on one case (pathmdn_verify.core.records.Fixed): case for the
    gates, p_case (alpha small where only bf16 runs: the residual's alpha then shows far above its budget) for p."""
    alpha = lambda x: torch.exp(x["log_alpha"])[..., None]        # noqa: E731
    qk_given = fla_ops.given_with(use_qk_l2norm_in_kernel=True)
    return (
        ConventionProbe("qk_l2norm_in_kernel", "measures that fla's MDN with use_qk_l2norm_in_kernel=True (its default) "
                        "l2-normalises q and k", "q, k as given", case, kind="option",
                        given=lambda op, x, s: qk_given(op, _half_qk(x), s), options=("use_qk_l2norm_in_kernel",),
                        meaning=lambda fn, x, s: fn(**{**x, "q": _l2(0.5 * x["q"]), "k": _l2(0.5 * x["k"])}, scale=s),
                        alternative=lambda op, x, s: op.oracle(**_half_qk(x), scale=s)),
        ConventionProbe("beta_default_ones", "measures that fla's MDN with beta left out uses beta = 1", "beta as drawn",
                        case, kind="option", given=fla_ops.given_with(beta=None), options=("beta",),
                        meaning=_inputs_as(beta=lambda x: torch.ones_like(x["beta"]))),
        ConventionProbe("eta_default_ones", "measures that fla's MDN with eta left out uses eta = 1", "eta as drawn",
                        case, kind="option", given=fla_ops.given_with(eta=None), options=("eta",),
                        meaning=_inputs_as(eta=lambda x: torch.ones_like(x["eta"]))),
        ConventionProbe("final_state_not_requested", "measures fla's MDN output with output_final_state left out", "",
                        case, kind="option", given=fla_ops.given_with(output_final_state=False),
                        options=("output_final_state",), discriminates=False,
                        meaning=lambda fn, x, s: (fn(**x, scale=s)[0], None, None)),
        ConventionProbe("cu_seqlens_refused", "measures that fla's MDN refuses cu_seqlens", r"Variable-length "
                        r"`cu_seqlens`( is)? not yet supported", case, kind="refused", options=("cu_seqlens",),
                        given=lambda op, x, s: fla_ops.given_with(cu_seqlens=torch.tensor(
                            [0, x["q"].shape[1]], dtype=torch.long, device=x["q"].device))(op, x, s)),
        ConventionProbe("p_times_alpha_with_p", "measures that fla's MDN with p given and use_p_times_alpha=True uses "
                        "alpha_t p_t", "p_t as given", replace(p_case, p_given=True), kind="option",
                        given=fla_ops.given_with(use_p_times_alpha=True), options=("use_p_times_alpha",),
                        meaning=_inputs_as(p=lambda x: alpha(x) * x["p"])),
        ConventionProbe("p_default_without_alpha", "measures that fla's MDN with p left out and use_p_times_alpha=False "
                        "uses p_t = k_t", "p_t = alpha_t k_t", p_case, kind="option",
                        given=fla_ops.given_with(use_p_times_alpha=False), options=("use_p_times_alpha",),
                        meaning=_inputs_as(p=lambda x: x["k"])))


MDN_ENTRY_PARAMS = {
    "p": "p", "initial_state": "S0",
    "beta": Fixed("probe", "beta_default_ones", "beta left out is 1; every other check gives it"),
    "eta": Fixed("probe", "eta_default_ones", "eta left out is 1; every other check gives it"),
    "scale": Fixed("probe", "scale_default", "scale=None is 1/sqrt(Dk); every other check gives it"),
    "output_final_state": Fixed("probe", "final_state_not_requested", "every other check asks for (S_T, M_T)"),
    "cu_seqlens": Fixed("refused", "cu_seqlens_refused", "varlen is not supported (NotImplementedError)"),
    "use_qk_l2norm_in_kernel": Fixed("probe", "qk_l2norm_in_kernel", "the checks give q, k as they are (False)"),
    "use_p_times_alpha": Fixed("probe", "p_times_alpha_with_p,p_default_without_alpha",
                               "the checks give it True with p left out, False with p given"),
}
MDN_PROBES = MDN_PROBES + _option_probes(MDN_PROBE_CASE, MDN_PROBE_CASE)
# The chunk path runs in bf16 only: with alpha ~ 0.1 the two residuals differ by far more than its budget.
MDN_CHUNK_PROBES = (replace(MDN_PROBES[0], case=replace(MDN_PROBE_CASE, alpha="small", initial_state=True)),
                    MDN_PROBES[1], *_option_probes(MDN_PROBE_CASE, replace(MDN_PROBE_CASE, alpha="small")))
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
    # the T = 1 cancellation that needed the summed-terms floor (verify/core/budget.py); was 1.7x budget
    {"fwd.fp32.eta_near2": [MdnCase(T=1, eta="near2", seed=1000)],
     # coverage: an explicit p (use_p_times_alpha=False, and dp); the adapters pass none
     "fwd.fp32.typical": [MdnCase(T=40, p_given=True, seed=3)],
     # and the cancelling gradients that needed the gradients' summed-terms floor: dq at T = 1 was 5.3x budget,
     # deta 1.55x
     "bwd.fp32.typical": [MdnCase(T=40, p_given=True, seed=3), MdnCase(T=1, seed=27905)],
     "bwd.fp32.logmu_below_floor": [MdnCase(T=37, log_mu="below", seed=22372)]}, MDN_PROBES,
    # the chunk ops run in bf16 only, whose budget lies far above one fp32 rounding of these summands
    grad_terms=_mdn_grad_terms)
