"""kernel.fla.path_attn.state_tracking.<dtype>: the PaTH paper's identity-permutation construction (its
equations in pathmdn_verify.ops.state_tracking, shared with the report's state sweep) run through the kernel at
each n of the profile.  The check reports the largest n at which the kernel decides every sampled sequence
correctly; the float64 oracle must decide correctly at every n tried."""
from __future__ import annotations

import math
import random


from pathmdn_verify.core.engine import call_kernel
from pathmdn_verify.platform.setup import prepare
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.registry import Context, Result, register
from pathmdn_verify.ops.attention_ops import PATH_ATTN
from pathmdn_verify.ops.state_tracking import construction, decides_identity, swap_sequence

N_VALUES = {"quick": (16, 64), "ci": (16, 64, 256), "full": (64, 256, 1024, 4096, 8192)}
SEQUENCES = {"quick": 3, "ci": 4, "full": 8}


def _run(dtype: str):
    def run(ctx: Context) -> Result:
        prepare(ctx)
        prec = Precision.of(dtype, ctx.fp32_dot)
        rng = random.Random(ctx.seed)
        largest_ok, first_bad, oracle_bad = 0, None, []
        for n in N_VALUES[ctx.profile]:
            ok = True
            for s in range(SEQUENCES[ctx.profile]):
                identity = s % 2 == 0
                x = PATH_ATTN.adapt_inputs(construction(swap_sequence(n, identity, rng), prec.torch_dtype, ctx.device))
                x64 = {name: t.double() for name, t in x.items()}
                o_ref = PATH_ATTN.oracle(**x64, scale=1.0)[0, -1, 0, 0].item()
                if decides_identity(o_ref, n) != identity:
                    oracle_bad.append(n)
                o = call_kernel(PATH_ATTN.kernel, **x, scale=1.0)[0, -1, 0, 0].item()
                if not (math.isfinite(o) and decides_identity(o, n) == identity):
                    ok = False
                    first_bad = first_bad or f"n={n} identity={identity}: a_0={o:.4g} vs oracle {o_ref:.4g}"
            if ok and first_bad is None:
                largest_ok = n
        tried = N_VALUES[ctx.profile]
        if oracle_bad:
            return Result("fail", None, None, f"float64 oracle misclassified at n={sorted(set(oracle_bad))}")
        status = "pass" if first_bad is None else "fail"
        msg = (f"largest n with every sampled sequence decided correctly: {largest_ok} (tried {tried}, "
               f"{SEQUENCES[ctx.profile]} sequences each; float64 oracle correct at every n)")
        if first_bad:
            msg += f"; first wrong decision: {first_bad}"
        return Result(status, float(largest_ok), float(max(tried)), msg)
    return run


for _dtype in ("bf16", "fp32"):
    register(f"kernel.fla.path_attn.state_tracking.{_dtype}",
             f"fla path_attn in {_dtype} tells the identity permutation from the others (paper Thm 2.1 construction)",
             _run(_dtype))
