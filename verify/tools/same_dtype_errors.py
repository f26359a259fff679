"""A diagnostic: the same-dtype implementations' errors on fixed inputs, to compare machines, devices and
thread counts (the fixed-order fp32 arithmetic promises the same numbers everywhere).
`python -m pathmdn_verify.tools.same_dtype_errors --device cpu --threads 1`
"""
from __future__ import annotations

import torch

from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify import same_dtype as SD
from pathmdn_verify.core.inputs import as_oracle, floats_as
from pathmdn_verify.core.metrics import rel_err
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import scale_of
from pathmdn_verify.ops.attention_ops import PathCase, path_inputs
from pathmdn_verify.ops.mdn_ops import MdnCase, mdn_inputs


def fixed_input_errors(device: str = "cpu") -> dict[str, float]:
    """Normwise relative error against the float64 oracle (computed on the CPU) of the same-dtype
    implementations on fixed inputs, run on `device`: the numbers that must not depend on the machine.
    "mdn fp32 blas" is the MDN form with torch's own (BLAS) fp32 products, for contrast."""
    out = {}
    for name, case, dtype in (("mdn fp32 T=1 eta~2", MdnCase(T=1, eta="near2", seed=1000), "fp32"),
                              ("mdn bf16 T=128", MdnCase(T=128, Dk=32, Dv=32, H=2, seed=3), "bf16")):
        prec = Precision.of(dtype, "ieee")
        x = mdn_inputs(case, prec.torch_dtype)
        oracle = MDN.recurrence(**as_oracle(x))[0]
        x32 = {n: t if t is None else t.to(device) for n, t in floats_as(x, torch.float32).items()}
        out[f"{name} (o)"] = rel_err(SD.mdn(**x32, prec=prec)[0].cpu(), oracle)
        if dtype == "fp32":     # the same operations with torch's (the BLAS's) fp32 products
            q, k, v, la, lm, b, e = (x32[n] for n in ("q", "k", "v", "log_alpha", "log_mu", "beta", "eta"))
            o = MDN.chunk_forward(q, e[..., None] * k, v, la, lm, b, torch.ones_like(e), p=torch.exp(la)[..., None] * k)
            out[f"{name} (o, blas)"] = rel_err(o[0].cpu(), oracle)
    for name, case, dtype in (("path fp32/tf32 T=160", PathCase(T=160, D=32, Dv=32, gate="mixed", seed=1), "fp32"),
                              ("path bf16 T=100 GQA", PathCase(T=100, HQ=4, H=2, seed=2), "bf16")):
        prec = Precision.of(dtype, "tf32")
        x = path_inputs(case, prec.torch_dtype)
        x64 = as_oracle(x)
        x32 = {n: t if t is None or n == "cu_seqlens" else t.to(device) for n, t in floats_as(x, torch.float32).items()}
        q32, q64 = (t["q"].detach().clone().requires_grad_() for t in (x32, x64))
        o = SD.path_attn(**{**x32, "q": q32}, prec=prec, scale=scale_of(x), gate_scaled=True)
        o64 = P.path_attn(**{**x64, "q": q64}, scale=scale_of(x), gate_scaled=True)
        o.sum().backward()
        o64.sum().backward()
        out[f"{name} (o)"] = rel_err(o.detach().cpu(), o64)
        out[f"{name} (dq)"] = rel_err(q32.grad.cpu(), q64.grad)
    return out


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(prog="python -m pathmdn_verify.tools.same_dtype_errors", description="errors of the same-dtype "
                                 "implementations on fixed inputs (compare machines, devices, thread counts)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for k_, err in fixed_input_errors(args.device).items():
        print(f"{k_:32} {args.device:4} threads={torch.get_num_threads()}: {err:.9e}")
