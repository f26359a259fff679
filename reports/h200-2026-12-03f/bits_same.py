"""Same-dtype outputs and gradients, every op, dtype and dot format, at T: d4f0217's fixed_order_matmul and solve_lower
(`git show d4f0217:verify/core/precision.py > reports/h200-2026-12-03f/precision_d4f0217.py` first) against the
current ones, bit for bit.  `python bits_same.py T [SKIP_OPS] [DEVICE]`"""
import sys, dataclasses, importlib.util, torch
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("old", "reports/h200-2026-12-03f/precision_d4f0217.py"); old = importlib.util.module_from_spec(spec); sys.modules["old"] = old; spec.loader.exec_module(old)
from verify.core import precision as P, engine
from verify.core.inputs import floats_as
from verify.core.records import scale_of, as_tuple
from verify.ops import BUILT_IN
new_fom, new_solve = P.fixed_order_matmul, P.solve_lower
T = int(sys.argv[1]) if len(sys.argv) > 1 else 150
DEV = sys.argv[3] if len(sys.argv) > 3 else "cpu"
n = bad = 0
SKIP = set(sys.argv[2].split(',')) if len(sys.argv) > 2 else set()
for op in BUILT_IN:
    case = dataclasses.replace(op.sample_case, T=T)
    if getattr(case, 'cu_seqlens', None):
        case = dataclasses.replace(case, cu_seqlens=type(case.cu_seqlens)([0, T // 3, T]))
    if op.name in SKIP: continue
    for dtype in op.dtypes:
        for dot in ([op.dot] if op.dot else ["tf32", "ieee"]):
            prec = P.Precision.of(dtype, dot)
            x = op.inputs(case, prec.torch_dtype, DEV); s = scale_of(x); x32 = floats_as(x, torch.float32)
            leaves = [k for k in op.grad_inputs if x.get(k) is not None]
            outs = {}
            for lab, f, sl in (("old", old.fixed_order_matmul, old.solve_lower), ("new", new_fom, new_solve)):
                P.fixed_order_matmul, P.solve_lower = f, sl
                fn = lambda **a: op.same_dtype(**a, prec=prec, scale=s)
                with torch.no_grad():
                    o = as_tuple(fn(**x32))
                g = engine.grads_of(lambda **kw: fn(**{**x32, **kw}), {k: x32[k] for k in leaves},
                                    lambda outs: [engine._upstream(t, prec.torch_dtype, 1 + i) for i, t in enumerate(outs)])
                outs[lab] = list(o) + [g[k] for k in leaves]
            P.fixed_order_matmul, P.solve_lower = new_fom, new_solve
            for a, b in zip(outs["old"], outs["new"]):
                n += 1
                if not torch.equal(a, b):
                    bad += 1; print("DIFF", op.name, dtype, dot, (a - b).abs().max().item())
            print(op.name, dtype, dot, "done", flush=True)
print(f"{bad} of {n} tensors differ")
