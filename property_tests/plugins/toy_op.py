"""A toy op added from outside the toolkit, as a user adds one: scalar-gated attention, FoX with one log
forget gate per head, the same at every token (g_t = s_h), built from the existing FoX adapter.

One record and one call (`declare`) give it every command: its checks (list, kernels), its inputs for
`verify compare`, a stage for `verify localize`, its package for `verify coverage`, its family for
`verify report` and a mutant for `verify mutants`.  The workers import this module through
$VERIFY_EXTRA_CHECKS (property_tests/slow/test_ops_slow.py sets it).
"""
import torch

from pathmdn_verify.kernels import fla_ops
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify import same_dtype
from pathmdn_verify.checks.kernel_checks import declare
from pathmdn_verify.core import validate
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.platform.mutation import Mutant
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import BUDGET_FACTOR_BLOCKWISE, KernelOp
from pathmdn_verify.ops.attention_ops import PathCase, path_cases, path_inputs
from pathmdn_verify.stages import Stage

NAME = "toy_scalar_gate"


def _g(q, s):
    """The per-token log gate [B, T, HQ] of the per-head scalar s [HQ]."""
    return s.to(torch.float32 if s.dtype != torch.float64 else s.dtype).expand(*q.shape[:3]).contiguous()


def kernel(q, k, v, s, cu_seqlens=None, scale=None):
    return fla_ops.forgetting_attn(q, k, v, _g(q, s), scale=scale, cu_seqlens=cu_seqlens)


def oracle(q, k, v, s, cu_seqlens=None, scale=None):
    return P.fox_attn(q, k, v, g=_g(q, s), scale=scale, gate_scaled=False, cu_seqlens=cu_seqlens)


def same(q, k, v, s, prec, cu_seqlens=None, scale=None):
    return same_dtype.fox_attn(q, k, v, _g(q, s), cu_seqlens, prec=prec, scale=scale, gate_scaled=False)


def make_inputs(case: PathCase, dtype, device="cpu") -> dict:
    x = path_inputs(case, dtype, device)
    s = -0.05 * torch.arange(1, case.HQ + 1, dtype=torch.float32, device=device)     # log f_h < 0
    return {"q": x["q"], "k": x["k"], "v": x["v"], "s": s, "cu_seqlens": x["cu_seqlens"]}


def error_inputs(x: dict) -> None:
    for n in ("q", "k", "v"):
        validate.rank(n, x[n], 4, "[B, T, H, D]")
    validate.shape("s", x["s"], (x["q"].shape[2],), "[HQ]")
    validate.finite(x)
    validate.interval("s (log forget gate)", x["s"], -float("inf"), 0.0, lo_open=True, hi_open=False)


def output_stage(op, x, dtype, fp32_dot):
    """One stage: the output, against the oracle's, within c times the same-dtype error."""
    prec = Precision.of(dtype, fp32_dot)
    scale = x["q"].shape[-1] ** -0.5
    st = Stage("output", "parallel_forgetting_attn", prec)
    with torch.no_grad():
        st.piece("o").add(kernel(**x, scale=scale), oracle(**as_oracle(x), scale=scale),
                          same(**floats_as(x, torch.float32), prec=prec, scale=scale))
    return [st]


TOY = declare(KernelOp(
    name=NAME, title="scalar-gated attention (toy)", kernel=kernel, conventions=fla_ops.FOX_CONVENTIONS,
    oracle=oracle, same_dtype=same, make_inputs=make_inputs, required=("q", "k", "v", "s"),
    optional=("cu_seqlens",), grad_inputs=("q", "k", "v"), outputs=("o",),
    regimes={"decay": {}}, cases=lambda fields, profile, max_T: path_cases(fields, profile, gated=False, max_T=max_T),
    budget_factor=BUDGET_FACTOR_BLOCKWISE, error_inputs=error_inputs, sample_case=PathCase(T=8, HQ=2, H=1, seed=1),
    query_inputs=("q",), stages={"fwd": output_stage}, report="fox",
    package=("fla.ops.forgetting_attn", "fla.ops.attn"),
    mutants=(Mutant(f"{NAME}_gate_scaled", "toy: FoX's forget gate multiplied by the attention scale in the forward",
                    "ops/attn/parallel.py", "b_s += b_gq[:, None] - b_gk[None, :]",
                    "b_s += (b_gq[:, None] - b_gk[None, :]) * scale", (f"kernel.fla.{NAME}.fwd.fp32.decay",),
                    count=4),)))
