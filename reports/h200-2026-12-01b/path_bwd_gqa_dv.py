"""Repro: fla's PaTH backward, dv per row against the float64 oracle, for one case given on the command line:
T D Dv gate HQ (H = 1), fp32 inputs, seed 1009.  DEV=cuda runs it on the GPU.  Prints, per gradient, the max
error, the oracle's max and the rows whose error exceeds 1% of the oracle's max.
    python reports/h200-2026-12-01b/path_bwd_gqa_dv.py 600 32 16 strong 2
"""
import torch, sys
from verify.core import engine
from verify.core.registry import Context
from verify import ops
from verify.ops.attention import PathCase
from verify.core.inputs import as_oracle
from verify.core.precision import Precision
import os; DEV = os.environ.get("DEV", "cpu"); ctx = Context(device=DEV, profile="ci"); engine.prepare(ctx)
op = ops.OPS["path_attn"]
T = int(sys.argv[1]); D = int(sys.argv[2]); Dv = int(sys.argv[3]); gate = sys.argv[4]; HQ = int(sys.argv[5])
case = PathCase(T=T, D=D, Dv=Dv, HQ=HQ, gate=gate, seed=1009)
prec = Precision.of("fp32", "tf32")
x = op.inputs(case, prec.torch_dtype, DEV)
s = D ** -0.5
ups = lambda outs: [engine._upstream(o, prec.torch_dtype, case.seed + i) for i, o in enumerate(outs)]
leaves = [n for n in op.grad_inputs if x.get(n) is not None]
gk = engine.kernel_grads(lambda **kw: op.kernel(**{**x, **kw}, scale=s), {n: x[n] for n in leaves}, ups)
x64 = as_oracle(x)
go = engine.grads_of(lambda **kw: op.oracle(**{**x64, **kw}, scale=s), {n: x64[n] for n in leaves}, ups)
for n in leaves:
    e = (gk[n].double() - go[n]).abs()
    rows = e.reshape(e.shape[0], e.shape[1], -1).amax(dim=(0, 2))
    bad = (rows > 1e-2 * go[n].abs().max()).nonzero().flatten().tolist()
    print(n, f"max {e.max():.3g} ref {go[n].abs().max():.3g}", "bad rows:", bad[:10], "...", bad[-5:], len(bad))
