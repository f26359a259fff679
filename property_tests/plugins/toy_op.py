"""A toy op added from outside the toolkit, as a user adds one, through the public API alone (`import
pathmdn_verify as pv`; property_tests/unit/test_public_api.py fails on an import of anything else of the toolkit, or
on a name that is not public): scalar-gated attention, FoX with one log forget gate per head, the same at every
token (g_t = s_h), built from the FoX op's record (`pv.op_record`: its kernel, oracle, same-dtype implementation,
inputs, cases and validation).

One record and one call (`pv.declare_op`) give it every command: its checks (list, kernels), its inputs for
`verify compare`, a stage for `verify localize`, its package for `verify coverage`, its family for
`verify report` and a mutant for `verify mutants`.  The workers import this module through
$VERIFY_EXTRA_CHECKS (property_tests/slow/test_ops_slow.py sets it).
"""
import dataclasses

import torch

import pathmdn_verify as pv

NAME = "toy_scalar_gate"
FOX = pv.op_record("forgetting_attn")


def _g(q, s):
    """The per-token log gate [B, T, HQ] of the per-head scalar s [HQ]."""
    return s.to(torch.float32 if s.dtype != torch.float64 else s.dtype).expand(*q.shape[:3]).contiguous()


def _floats(x: dict, dtype) -> dict:
    return {n: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for n, t in x.items()}


def kernel(q, k, v, s, cu_seqlens=None, scale=None):
    return FOX.kernel(q=q, k=k, v=v, g=_g(q, s), cu_seqlens=cu_seqlens, scale=scale)


def oracle(q, k, v, s, cu_seqlens=None, scale=None):
    return FOX.oracle(q=q, k=k, v=v, g=_g(q, s), cu_seqlens=cu_seqlens, scale=scale)


def same(q, k, v, s, prec, cu_seqlens=None, scale=None):
    return FOX.same_dtype(q=q, k=k, v=v, g=_g(q, s), cu_seqlens=cu_seqlens, prec=prec, scale=scale)


def make_inputs(case, dtype, device="cpu") -> dict:
    x = FOX.make_inputs(case, dtype, device)
    s = -0.05 * torch.arange(1, case.HQ + 1, dtype=torch.float32, device=device)     # log f_h < 0
    return {"q": x["q"], "k": x["k"], "v": x["v"], "s": s, "cu_seqlens": x["cu_seqlens"]}


def error_inputs(x: dict) -> None:
    """s [HQ], one log forget gate per query head; then FoX's validation of q, k, v and the gate s makes."""
    q, s = x["q"], x["s"]
    if q.dim() != 4 or s.shape != (q.shape[2],):
        raise pv.UsageError(f"s: shape {tuple(s.shape)}, expected [HQ] (one log forget gate per query head of q)")
    FOX.error_inputs({"q": q, "k": x["k"], "v": x["v"], "g": _g(q, s), "cu_seqlens": x.get("cu_seqlens")})


def output_stage(op, x, dtype, fp32_dot):
    """One stage: the output, against the oracle's, within c times the same-dtype error."""
    prec = pv.Precision.of_op(op, dtype, fp32_dot)
    scale = pv.scale_of(x)
    st = pv.Stage("output", "parallel_forgetting_attn", prec)
    with torch.no_grad():
        st.piece("o").add(kernel(**x, scale=scale), oracle(**_floats(x, torch.float64), scale=scale),
                          same(**_floats(x, torch.float32), prec=prec, scale=scale))
    return [st]


TOY = pv.declare_op(pv.OpRecord(
    name=NAME, title="scalar-gated attention (toy)", kernel=kernel, conventions=FOX.conventions,
    oracle=oracle, same_dtype=same, make_inputs=make_inputs, required=("q", "k", "v", "s"),
    optional=("cu_seqlens",), grad_inputs=("q", "k", "v"), outputs=("o",),
    regimes={"decay": {"gate": "none"}}, cases=FOX.cases, budget_factor=pv.BUDGET_FACTOR_BLOCKWISE,
    error_inputs=error_inputs, sample_case=dataclasses.replace(FOX.sample_case, gate="none"),
    query_inputs=("q",), stages={"fwd": output_stage}, report="fox",
    package=("fla.ops.forgetting_attn", "fla.ops.attn"),
    mutants=(pv.Mutant(f"{NAME}_gate_scaled", "toy: FoX's forget gate multiplied by the attention scale in the "
                       "forward", "ops/attn/parallel.py", "b_s += b_gq[:, None] - b_gk[None, :]",
                       "b_s += (b_gq[:, None] - b_gk[None, :]) * scale", (f"kernel.fla.{NAME}.fwd.fp32.decay",),
                       count=4),)))
