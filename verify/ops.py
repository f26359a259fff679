"""One declarative record per kernel op under test (PyTorch's OpInfo is the model), and the registry `OPS`.

A `KernelOp` says everything the checks, `verify compare`, the device comparison, the search and the
mutants need about one op: the kernel adapter (kernels/fla_ops.py) and its measured conventions, the
float64 oracle (references/), the same-dtype implementation that sets the budget (verify/lowprec.py), the
dtypes and passes, the output and gradient names, the regimes with their hypothesis strategies, the budget
factors c, input validation, the summed terms of cancelling outputs, regression cases and convention
probes.  Adding an op is one record here and one adapter.

Every callable of a record takes the op's canonical inputs by name plus `scale` (the attention scale; the
checks pass 1/sqrt(D) explicitly, the scale_default probe passes None to the kernel).  The functions of
verify/lowprec.py and the MDN oracle are looked up when called, so a test may substitute them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from kernels import fla_ops
from references import mdn as MDN
from references import path_attn as P
from verify import lowprec, validate
from verify.inputs import GdnCase, MdnCase, PathCase, gdn_inputs, mdn_inputs, path_inputs
from verify.strategies import (FOX_REGIMES, GDN_REGIMES, MDN_REGIMES, PATH_REGIMES, gdn_cases, mdn_cases,
                               path_cases)

# Budget factors c: how many times the same-dtype implementation's error a kernel may make (verify.budget).
# Forward passes: the kernel performs the same rounded operations as the same-dtype implementation (same
# block size, same operand formats) in a different order of accumulation, so its error should be of the
# same size: c = 4 leaves a factor 2 for ordering and 2 for the spread between random inputs.  Backward
# passes chain several rounded stages (recomputed logits, dP, the UT-transform backward), each of which
# can round where the same-dtype implementation does not: c = 8.
BUDGET_FACTOR_BLOCKWISE = {"fwd": 4.0, "bwd": 8.0, "decode": 4.0}
# A token-by-token recurrence (fla's fused_recurrent MDN and GDN) is a different algorithm class from the
# chunkwise same-dtype implementation: its rounding errors accumulate over T sequential state updates
# instead of within one chunk, so the same constant would judge the algorithm, not the implementation.
# Measured before choosing: over 20 seeds at T <= 160 fla's fp32 MDN recurrence reached 10 u normwise and
# 9x the chunkwise implementation's max-abs error (deta); c doubles.  Bugs of the kind the checks exist
# for (wrong coefficient, dropped state, wrong gate) give errors of order 1.
BUDGET_FACTOR_SEQUENTIAL = {"fwd": 8.0, "bwd": 16.0}


@dataclass(frozen=True)
class ConventionProbe:
    """One declared convention, measured: on `case` in fp32 the kernel must agree with the oracle under the
    declared convention (within its forward budget) and differ from `alternative` by more than 10x it.
    alternative(op, x64, scale) -> the oracle's outputs under the other convention."""
    name: str
    description: str
    what_else: str                      # the alternative, in words
    case: object
    alternative: Callable
    output: str = "o"
    kernel_scale_none: bool = False     # call the kernel with scale=None (the scale_default probe)


@dataclass(frozen=True)
class Decode:
    """A decode pass: its own kernel output, oracle and same-dtype implementation, over some regimes."""
    kernel: Callable
    oracle: Callable
    same_dtype: Callable
    output: str
    regimes: tuple[str, ...]
    cases: Callable                     # (regime fields, profile) -> hypothesis strategy


@dataclass(frozen=True)
class KernelOp:
    name: str                           # check ids: kernel.fla.<name>.<pass>.<dtype>.<regime>
    title: str                          # the op in words, for descriptions
    kernel: Callable                    # the adapter: kernel(**inputs, scale) -> outputs
    conventions: fla_ops.Conventions
    oracle: Callable                    # float64: oracle(**inputs, scale) -> outputs
    same_dtype: Callable                # same_dtype(**fp32 inputs, prec, scale) -> outputs
    make_inputs: Callable               # (case, torch dtype, device) -> {name: tensor or None}
    required: tuple[str, ...]
    optional: tuple[str, ...]
    grad_inputs: tuple[str, ...]        # the backward pass judges d<name> for each present one
    outputs: tuple[str, ...]
    regimes: dict
    cases: Callable                     # (regime fields, profile, max_T) -> hypothesis strategy
    budget_factor: dict                 # pass -> c
    error_inputs: Callable              # validation: raises UsageError naming the tensor
    sample_case: object                 # a small valid input (OpInfo's sample inputs), for the bad-input tests
    passes: tuple[str, ...] = ("fwd", "bwd")
    dot: str | None = None              # fp32 dot format the kernel uses (None: the run's --fp32-dot)
    terms: Callable | None = None       # (**float64 inputs, scale) -> {output: magnitude of its summed terms}
    regression_cases: dict = field(default_factory=dict)   # "<pass>.<dtype>.<regime>" -> [cases]
    probes: tuple[ConventionProbe, ...] = ()
    decode: Decode | None = None
    examples: dict | None = None        # hypothesis examples per check by profile (None: verify.search's default)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return self.conventions.dtypes

    def check_id(self, pass_: str, dtype: str, regime: str) -> str:
        return f"kernel.fla.{self.name}.{pass_}.{dtype}.{regime}"

    def inputs(self, case, dtype, device="cpu") -> dict:
        return {n: t for n, t in self.make_inputs(case, dtype, device).items() if n in self.required + self.optional}


def as_tuple(x) -> tuple:
    """The outputs of a record's callable as a tuple (single-output ops return one tensor)."""
    return x if isinstance(x, tuple) else (x,)


def scale_of(x: dict) -> float:
    """The canonical attention scale 1/sqrt(D), D the key head dim (the last dim of q)."""
    return x["q"].shape[-1] ** -0.5


def scale_default_probe(op_name: str) -> ConventionProbe:
    return ConventionProbe("scale_default", f"measures that fla {op_name} with scale=None uses 1/sqrt(D)",
                           "scale=None means 1", None, lambda op, x, s: op.oracle(**x, scale=1.0),
                           kernel_scale_none=True)


# --------------------------------------------------------------------------------------- PaTH / FoX

def _attention_op(name, title, fla_fn, conv, oracle_fn, same_dtype_fn, names, grads, regimes, gated, **extra):
    """A softmax-attention op: fla_fn(**x, scale), oracle_fn(**x, scale, gate_scaled) and
    same_dtype_fn(**x, prec, scale, gate_scaled) under the measured gate convention conv.gate_scaled."""
    probe_case = PathCase(T=64, D=16, Dv=32, gate="mixed", seed=3)   # Dv != D shows a K/V head-dim mix-up
    gate_probe = ConventionProbe(
        "gate_scaled", f"measures whether fla {name} multiplies the log forget gate by the attention scale",
        f"gate_scaled={not conv.gate_scaled}", probe_case,
        lambda op, x, s: op.oracle(**x, scale=s, gate_scaled=not op.conventions.gate_scaled))
    return KernelOp(
        name=name, title=title, kernel=lambda scale, **x: fla_fn(**x, scale=scale), conventions=conv,
        oracle=lambda scale, gate_scaled=conv.gate_scaled, **x: oracle_fn(**x, scale=scale, gate_scaled=gate_scaled),
        same_dtype=lambda prec, scale, **x: same_dtype_fn(**x, prec=prec, scale=scale, gate_scaled=conv.gate_scaled),
        make_inputs=path_inputs, required=names[0], optional=names[1], grad_inputs=grads,
        outputs=("o",), regimes=regimes, cases=lambda fields, profile, max_T: path_cases(
            fields, profile, gated=gated, max_T=max_T),
        budget_factor=BUDGET_FACTOR_BLOCKWISE,
        error_inputs=lambda x: validate.path_inputs(x, conv.head_dims),
        sample_case=PathCase(T=8, HQ=2, H=1, gate="mixed", seed=1),
        probes=(gate_probe, replace(scale_default_probe(name), case=probe_case)), **extra)


PATH_ATTN = _attention_op(
    "path_attn", "path_attn", fla_ops.path_attn, fla_ops.PATH_CONVENTIONS, P.path_attn,
    lambda **kw: lowprec.path_attn(**kw),
    names=(("q", "k", "v", "w", "beta"), ("g", "cu_seqlens")), grads=("q", "k", "v", "w", "beta", "g"),
    regimes=PATH_REGIMES, gated=None,
    regression_cases={
        # passed only once the same-dtype implementation formed delta from the stored O: at T = 1 the exact dk
        # is 0 and fla's is 1.73e-2 (on the H200 too); was 2.2x budget (D = 16, seed 1; the H200's full draw)
        "bwd.fp32.saturated": [PathCase(T=1, B=2, logit_gain=4.0, seed=1)]},
    decode=Decode(
        kernel=lambda scale, **x: fla_ops.path_attn_cache(**x, scale=scale),
        oracle=lambda k, w, beta, **_: P.decode_cache(k, w, beta),
        same_dtype=lambda k, w, beta, prec, **_: lowprec.decode_keys(k, w, beta, prec),
        output="k_cache", regimes=("beta_uniform", "beta_near2"),
        cases=lambda fields, profile: path_cases(fields, profile, gated=False, varlen=False)))

FORGETTING_ATTN = _attention_op(
    "forgetting_attn", "forgetting_attn (FoX)", fla_ops.forgetting_attn, fla_ops.FOX_CONVENTIONS, P.fox_attn,
    lambda **kw: lowprec.fox_attn(**kw),
    names=(("q", "k", "v", "g"), ("cu_seqlens",)), grads=("q", "k", "v", "g"),
    regimes=FOX_REGIMES, gated=True,
    regression_cases={
        # passed only once the same-dtype implementation formed delta from the stored bf16 O; was 1.6x budget
        "bwd.bf16.saturated": [PathCase(T=23, gate="mixed", logit_gain=4.0, seed=0)]})


# ---------------------------------------------------------------------------------------------- MDN

MDN_GATES = ("log_alpha", "log_mu", "beta", "eta")


def _mdn_terms(scale, **x):
    return {"o": MDN.recurrence(**x, scale=scale, abs_output=True)[0]}


def _mdn_op(name, chunk, conv, budget_factor, regression_cases=None, probes=()):
    return KernelOp(
        name=name, title=name, kernel=lambda scale, **x: fla_ops.mdn(**x, scale=scale, chunk=chunk),
        conventions=conv,
        oracle=lambda scale, **x: MDN.recurrence(**x, scale=scale),
        same_dtype=lambda prec, scale, **x: lowprec.mdn(**x, prec=prec, scale=scale),
        make_inputs=mdn_inputs, required=("q", "k", "v") + MDN_GATES, optional=("S0", "M0"),
        grad_inputs=("q", "k", "v") + MDN_GATES + ("S0", "M0"), outputs=("o", "S_T", "M_T"),
        regimes=MDN_REGIMES, cases=mdn_cases, budget_factor=budget_factor, error_inputs=validate.mdn_inputs,
        sample_case=MdnCase(T=8, seed=1, initial_state=True),
        dot="ieee",     # fla's MDN is PyTorch code: its fp32 matmuls are IEEE (torch's default), not TF32 dots
        terms=_mdn_terms, regression_cases=regression_cases or {}, probes=probes)


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
    "bwd.bf16.alpha_near1": [MdnCase(T=1, alpha="near1", seed=12)]} if c == 16 else None, MDN_CHUNK_PROBES)
    for c in (16, 32, 64)]
MDN_RECURRENT = _mdn_op(
    "mdn_recurrent", None, fla_ops.MDN_RECURRENT_CONVENTIONS, BUDGET_FACTOR_SEQUENTIAL,
    # the T = 1 cancellation that needed the summed-terms floor (verify/budget.py); was 1.7x budget
    {"fwd.fp32.eta_near2": [MdnCase(T=1, eta="near2", seed=1000)]}, MDN_PROBES)


# ----------------------------------------------------------------------------------- Gated DeltaNet
# GDN is MDN without momentum: with mu = 0 (log mu = -inf), p = alpha k and eta = 1 the MDN step is
# S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, GDN's rule (proved by the check
# symbolic.mdn.gdn_reduction; property_tests/test_kernels.py checks this composition against GDN's literal
# rule, with a negative control).  The MDN oracle and same-dtype
# implementation run once per sequence of cu_seqlens.

def gdn_as_mdn(mdn_fn, q, k, v, g, beta, S0=None, cu_seqlens=None, scale=None, **kw):
    """(o, S_T [N, H, K, V]) of GDN from an MDN function (MDN.recurrence, lowprec.mdn) with log mu = -inf,
    eta = 1, sequence by sequence of cu_seqlens (or the whole batch)."""
    outs, states = [], []
    for n, (s, e) in enumerate(P.segments(q.shape[1], cu_seqlens)):
        t = slice(s, e)
        init = None if S0 is None else (S0 if cu_seqlens is None else S0[n:n + 1])
        o, S, _ = mdn_fn(q[:, t], k[:, t], v[:, t], g[:, t], torch.full_like(g[:, t], -math.inf), beta[:, t],
                         torch.ones_like(g[:, t]), S0=init, M0=None if init is None else torch.zeros_like(init),
                         scale=scale, **kw)
        outs.append(o), states.append(S)
    return torch.cat(outs, dim=1), torch.cat(states, dim=0)


GDN_PROBE_CASE = GdnCase(T=40, seed=5)


def _gdn_probes(name):
    return (
        replace(scale_default_probe(name), case=GDN_PROBE_CASE),
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
                        lambda op, x, s: op.oracle(**{**x, "cu_seqlens": None}, scale=s)))


def _gdn_op(name, chunk, budget_factor, passes, dot=None):
    return KernelOp(
        name=name, title=name,
        kernel=lambda scale, **x: fla_ops.gated_delta_rule(**x, scale=scale, chunk=chunk),
        conventions=fla_ops.GDN_CONVENTIONS,
        oracle=lambda scale, **x: gdn_as_mdn(MDN.recurrence, **x, scale=scale),
        same_dtype=lambda prec, scale, **x: gdn_as_mdn(lowprec.mdn, **x, scale=scale, prec=prec),
        make_inputs=gdn_inputs, required=("q", "k", "v", "g", "beta"), optional=("S0", "cu_seqlens"),
        grad_inputs=("q", "k", "v", "g", "beta", "S0"), outputs=("o", "S_T"), regimes=GDN_REGIMES,
        cases=gdn_cases, budget_factor=budget_factor, error_inputs=validate.gdn_inputs, passes=passes, dot=dot,
        sample_case=GdnCase(T=8, seed=1, initial_state=True, cu_seqlens=(0, 3, 8)),
        terms=lambda scale, **x: {"o": gdn_as_mdn(MDN.recurrence, **x, scale=scale, abs_output=True)[0]},
        probes=_gdn_probes(name),
        examples={"quick": 1, "ci": 2, "full": 5})     # the CPU interpreter runs GDN token by token: few draws


# fla's fused recurrent GDN has no backward (its autograd backward raises NotImplementedError) and no tl.dot:
# its fp32 arithmetic is IEEE.  The chunk kernels' fp32 dots are Triton's default (TF32 on the GPU).
GDN_CHUNK = _gdn_op("gdn_chunk", True, BUDGET_FACTOR_BLOCKWISE, ("fwd", "bwd"))
GDN_RECURRENT = _gdn_op("gdn_recurrent", False, BUDGET_FACTOR_SEQUENTIAL, ("fwd",), dot="ieee")

OPS: dict[str, KernelOp] = {op.name: op for op in
                            [PATH_ATTN, FORGETTING_ATTN, *MDN_CHUNK_OPS, MDN_RECURRENT, GDN_CHUNK, GDN_RECURRENT]}


# check id -> cases to run first in this process, before the record's own regression cases: `verify bisect`
# replays here, at every commit, the failing examples it drew at the reference commit.
REPLAY: dict[str, list] = {}


def regression_cases(check_id: str) -> list:
    """The regression cases of a kernel check id (run first on every run of that check, whatever the seed,
    so a fix stays fixed and a listed failure is reproduced rather than left to the search's luck), after
    any REPLAY cases."""
    parts = check_id.split(".")
    op = OPS.get(parts[2]) if len(parts) == 6 and check_id.startswith("kernel.fla.") else None
    return REPLAY.get(check_id, []) + (op.regression_cases.get(".".join(parts[3:]), []) if op else [])
