"""Where the MDN/GDN references are faster on a loaded GPU host: one process's seconds in the float64 oracle and in
the same-dtype implementation (forward + backward, as a bwd kernel check spends them) for full-profile-sized cases,
with the oracle and the same-dtype implementation each on DEVICE.  `run.sh B1` starts 16 of these at once per
placement (a full run keeps all 16 cores and the GPU busy).  Also, with --bits: the same-dtype outputs and gradients
on the CPU and on CUDA, compared bit for bit.
python bench_refs.py (cpu|cuda) PROCESS_INDEX   |   python bench_refs.py --bits"""
import json
import sys
import time

import torch

from verify import ops
from verify.core import engine, timing
from verify.core.precision import Precision
from verify.ops.gdn import GdnCase
from verify.ops.mdn import MdnCase

KERNEL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"      # cpu: a smoke test here
CASES = [("mdn_chunk16", MdnCase(T=1000, Dk=128, Dv=64, B=2, H=2, initial_state=True, seed=11), "bf16"),
         ("mdn_recurrent", MdnCase(T=700, Dk=128, Dv=64, B=1, H=2, seed=12), "fp32"),
         ("gdn_chunk", GdnCase(T=1000, Dk=128, Dv=128, H=2, seed=13), "bf16")]


def seconds(device: str) -> dict:
    out = {}
    for name, case, dtype in CASES:
        op = ops.OPS[name]
        prec = Precision.of(dtype, op.dot or "tf32")
        x = op.inputs(case, prec.torch_dtype, KERNEL_DEVICE)
        timing.reset()
        engine.measure(op, "bwd", x, prec, case.seed, ("cpu", device))
        s = timing.spent()
        out[name] = {"oracle_cpu": s["oracle"], f"same_dtype_{device}": s["same_dtype"], "kernel": s["kernel"]}
    return out


def bits() -> dict:
    """Same-dtype forward outputs and gradients on the CPU and on CUDA: how many elements differ, and by how much."""
    out = {}
    for name, case, dtype in CASES:
        for dt in (dtype, "fp32" if dtype == "bf16" else "bf16"):
            op = ops.OPS[name]
            prec = Precision.of(dt, op.dot or "tf32")
            x32 = {n: (t.float() if t is not None and t.is_floating_point() else t)
                   for n, t in op.inputs(case, prec.torch_dtype, "cpu").items()}
            leaves = [n for n in op.grad_inputs if x32.get(n) is not None]
            res = {}
            for dev in ("cpu", "cuda"):
                xd = {n: (t.to(dev) if isinstance(t, torch.Tensor) else t) for n, t in x32.items()}
                lv = {n: xd[n].clone().requires_grad_() for n in leaves}
                outs = op.same_dtype(**{**xd, **lv}, prec=prec, scale=case.Dk ** -0.5)
                outs = outs if isinstance(outs, tuple) else (outs,)
                g = torch.Generator().manual_seed(1)
                torch.autograd.backward([o for o in outs], [torch.randn(o.shape, generator=g).to(dev) for o in outs])
                res[dev] = [o.detach().cpu() for o in outs] + [lv[n].grad.cpu() for n in leaves]
            diff = [int((a != b).sum()) for a, b in zip(res["cpu"], res["cuda"])]
            rel = [float(((a.double() - b.double()).abs().max() / a.double().abs().max().clamp_min(1e-300)))
                   for a, b in zip(res["cpu"], res["cuda"])]
            out[f"{name}.{dt}"] = {"elements": sum(t.numel() for t in res["cpu"]), "differing": diff,
                                   "max_rel_diff": max(rel)}
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "--bits":
        print(json.dumps(bits(), indent=1))
    else:
        t0 = time.perf_counter()
        r = seconds(sys.argv[1])
        print(json.dumps({"device": sys.argv[1], "process": int(sys.argv[2]), "wall": time.perf_counter() - t0,
                          "parts": r}))
