"""fla MDN chunk forward, stage by stage (fla/ops/momentum_delta_rule/naive.py, chunk_momentum_delta_rule_ref,
the PyTorch function that fla's chunk_momentum_delta_rule runs).

The function runs unchanged under a line tracer that reads its locals (`watching`): the arrays it builds
once for all chunks, and the values the chunk loop rebinds (V~, S, M) each time they change.  Each is
compared, chunk by chunk, with the intermediate of the same definition in references/mdn_oracle.py
(chunk_forward_head, stable coefficients):

  log gates     log_a_cum, log_m_cum   log abar, log mubar           (coefficients)
  l_i           log_ct                 log c, c_i = sum_r beta_r mubar_r / abar_r
  b             b_t                    b = abar c
  Gamma         gamma_mask_q           Gamma;   Gamma^-: gamma_mask   Gamma_minus
  system        attn                   system - I = (P K^^T) .* Gamma^-
  inverse       attn_inv               T = system^{-1}
  U / Y / Z     u_c, y_c, z_c          U, Y, Z
  V~            v_i (per chunk)        V_tilde
  states        S_pre, M_pre           S, M after each chunk (full chunks: fla pads the last chunk with
                                       beta = 0 and log(beta + 1e-6) lets the padding into the state)
  output        o                      O
fla's inputs to the function are k^ = eta k and p = alpha k rounded to the input dtype (as its chunk
entry point passes them); the oracle uses the exact eta k and alpha k, the same-dtype implementation the
rounded ones (pathmdn_verify.same_dtype.mdn), so the rounding is charged to the budget, not to the kernel.
"""
from __future__ import annotations

import contextlib
import sys

import torch

from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import scale_of
from pathmdn_verify.stages import Stage
from pathmdn_verify.core.errors import KernelUnavailable

FUNCTION = "chunk_momentum_delta_rule_ref"
ONCE = ("log_a_cum", "log_m_cum", "log_ct", "b_t", "gamma_mask_q", "gamma_mask", "attn", "attn_inv", "u_c", "y_c",
        "z_c")
PER_CHUNK = ("v_i", "S_pre", "M_pre")
STAGES = [("log gates", "log_a_cum, log_m_cum"), ("l_i", "log_ct"), ("b", "b_t"), ("Gamma", "gamma_mask_q"),
          ("Gamma^-", "gamma_mask"), ("system (P K^T) .* Gamma^-", "attn"), ("inverse T", "attn_inv"),
          ("U / Y / Z", "u_c, y_c, z_c"), ("V~", "v_i"), ("states per chunk", "S_pre, M_pre"), ("output o", "o")]


@contextlib.contextmanager
def watching(function: str, once: tuple[str, ...], rebound: tuple[str, ...]):
    """Trace calls of the Python function named `function`: yields {name: value at return} for `once`
    and {name: [every value bound, in order]} for `rebound` (a rebinding is a new object)."""
    seen: dict = {"once": {}, **{n: [] for n in rebound}}

    def local(frame, event, arg):
        loc = frame.f_locals
        for n in rebound:
            if n in loc and (not seen[n] or seen[n][-1] is not loc[n]):
                seen[n].append(loc[n])
        if event == "return":
            seen["once"] = {n: loc[n] for n in once if n in loc}
            seen["o"] = loc.get("o")
        return local

    def calls(frame, event, arg):
        return local if event == "call" and frame.f_code.co_name == function else None
    old = sys.gettrace()
    sys.settrace(calls)
    try:
        yield seen
    finally:
        sys.settrace(old)


def run_forward(x: dict, chunk: int) -> dict:
    from pathmdn_verify.kernels import fla_ops
    with torch.no_grad(), watching(FUNCTION, ONCE, PER_CHUNK) as seen:
        fla_ops.mdn(**x, chunk=chunk)
    missing = [n for n in ONCE if n not in seen["once"]]
    if missing:
        raise KernelUnavailable(f"fla's {FUNCTION} did not run or has no local {', '.join(missing)}; "
                                        "localize knows fla-core 0.6.0's MDN chunk function")
    return seen


def stages(op, x: dict, dtype: str, fp32_dot: str, chunk: int) -> list[Stage]:
    """Run fla's chunk MDN on x and return its stages in the order the function computes them (op's precision in
    dtype: Precision.of_op)."""
    seen = run_forward(x, chunk)
    f = seen["once"]
    prec = Precision.of_op(op, dtype, fp32_dot)
    S = {n: Stage(n, local, prec) for n, local in STAGES}    # the locals of FUNCTION
    x64, x32 = as_oracle(x), floats_as(x, torch.float32)
    k_hat = prec.store(x32["eta"][..., None] * x32["k"])
    p = prec.store(torch.exp(x32["log_alpha"])[..., None] * x32["k"])
    B, T, H, _ = x["k"].shape
    scale = scale_of(x)
    o_k = seen["o"]
    after = {n: seen[n][-len(seen["v_i"]):] for n in ("S_pre", "M_pre")}    # the states after each chunk
    for b in range(B):
        for h in range(H):
            def head(d, k_, eta, p_):
                init = [None if d[n] is None else d[n][b, h] for n in ("S0", "M0")]
                return MDN.chunk_forward_head(d["q"][b, :, h], k_[b, :, h], d["v"][b, :, h], d["log_alpha"][b, :, h],
                                              d["log_mu"][b, :, h], d["beta"][b, :, h], eta[b, :, h],
                                              None if p_ is None else p_[b, :, h], scale, *init, chunk=chunk)[3]
            steps64 = head(x64, x64["k"], x64["eta"], None)
            steps32 = head(x32, k_hat, torch.ones_like(x32["eta"]), p)
            for n, (s64, s32) in enumerate(zip(steps64, steps32)):
                L = s64["T"].shape[0]
                at = (b, h, n)

                def add(stage, tensor, kernel, key, fn=lambda t: t):
                    S[stage].piece(tensor).add(kernel, fn(s64[key] if key in s64 else s64["coefficients"][key]),
                                               fn(s32[key] if key in s32 else s32["coefficients"][key]))
                add("log gates", "log abar", f["log_a_cum"][at][:L], "abar", torch.log)
                add("log gates", "log mubar", f["log_m_cum"][at][:L], "mubar", torch.log)
                add("l_i", "l", f["log_ct"][at][:L], "c", torch.log)
                add("b", "b", f["b_t"][at][:L], "b")
                add("Gamma", "Gamma", f["gamma_mask_q"][at][:L, :L], "gamma")
                add("Gamma^-", "Gamma^-", f["gamma_mask"][at][:L, :L], "Gamma_minus")
                add("system (P K^T) .* Gamma^-", "system - I", f["attn"][at][:L, :L], "system",
                    lambda t: t - torch.eye(L, dtype=t.dtype))
                add("inverse T", "T", f["attn_inv"][at][:L, :L], "T")
                for name, key in (("u_c", "U"), ("y_c", "Y"), ("z_c", "Z")):
                    add("U / Y / Z", key, f[name][at][:L], key)
                add("V~", "V~", seen["v_i"][n][b, h][:L], "V_tilde")
                if L == chunk:
                    add("states per chunk", "S", after["S_pre"][n][b, h], "S")
                    add("states per chunk", "M", after["M_pre"][n][b, h], "M")
                add("output o", "o", o_k[b, n * chunk:n * chunk + L, h], "O")
    return [st for st in S.values() if st.tensors]
