"""The MDN token-recurrence oracle (float64; GDN's too) on the CPU or on CUDA: forward and forward + backward at the
full profile's long sizes, the time of each, as one JSON line.  Run 16 at once to see it under a full run's load.
`python bench_oracle.py cpu|cuda`"""
import json
import sys
import time

import torch

torch.set_num_threads(1)
from verify.core import engine  # noqa: E402
from verify.core.inputs import as_oracle, on_device  # noqa: E402
from verify.core.records import scale_of  # noqa: E402
from verify.ops.mdn import MDN_RECURRENT as op, MdnCase, mdn_inputs  # noqa: E402

dev = sys.argv[1]
out = {"device": dev}
for T, Dk, Dv, B, H in ((1000, 128, 64, 2, 2), (4096, 64, 64, 1, 2)):
    x = mdn_inputs(MdnCase(T=T, Dk=Dk, Dv=Dv, B=B, H=H, seed=3), torch.float32)
    s, x64 = scale_of(x), on_device(as_oracle(x), dev)
    leaves = [n for n in op.grad_inputs if x.get(n) is not None]
    ups = lambda outs: [engine._upstream(o, torch.float32, 1 + i) for i, o in enumerate(outs)]
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for rep in range(3):
        t = time.perf_counter()
        with torch.no_grad():
            op.oracle(**x64, scale=s)
            op.terms(**x64, scale=s)
        sync()
        t1 = time.perf_counter()
        engine.grads_of(lambda **kw: op.oracle(**{**x64, **kw}, scale=s), {n: x64[n] for n in leaves}, ups)
        sync()
        out.setdefault(f"T{T}", []).append({"fwd_and_terms": round(t1 - t, 3), "fwd_bwd": round(time.perf_counter() - t1, 3)})
print(json.dumps(out), flush=True)
