"""Does the CPU interpreter (with the fidelity layer) see the GPU's error class?  Run this module on
both devices and compare: it prints, for a fixed list of inputs, each kernel's normwise relative error
against the float64 oracle.  The inputs are generated on the CPU from fixed seeds, so both devices see
the same values.

    python -m verify.device_compare --device cpu  --out cpu.json
    python -m verify.device_compare --device cuda --out gpu.json
    python -m verify.device_compare --compare cpu.json gpu.json
"""
from __future__ import annotations

import argparse
import json

from verify.inputs import PathCase

CASES = [
    ("path_attn", "fp32", PathCase(T=256, D=64, Dv=64, seed=1)),
    ("path_attn", "fp32", PathCase(T=256, D=64, Dv=64, gate="mixed", beta="near2_4", seed=2)),
    ("path_attn", "bf16", PathCase(T=256, D=64, Dv=64, seed=1)),
    ("path_attn", "bf16", PathCase(T=256, D=64, Dv=64, gate="mixed", beta="near2_4", seed=2)),
    ("forgetting_attn", "fp32", PathCase(T=256, D=64, Dv=64, gate="mixed", seed=3)),
    ("forgetting_attn", "bf16", PathCase(T=256, D=64, Dv=64, gate="mixed", seed=3)),
]


def measure(device: str, fp32_dot: str = "tf32") -> list[dict]:
    if device == "cpu":
        from verify import fidelity
        fidelity.prepare_cpu_kernels(fp32_dot)
    from kernels import fla_ops
    from references import path_attn as P
    from verify.inputs import as_oracle, path_inputs
    from verify.metrics import rel_err
    from verify.precision import TORCH_DTYPES
    rows = []
    for op, dtype, case in CASES:
        x = path_inputs(case, TORCH_DTYPES[dtype], device)
        x64 = as_oracle(x)
        s = case.D ** -0.5
        if op == "path_attn":
            out = fla_ops.path_attn(**x, scale=s)
            ref = P.path_attn(**x64, scale=s, gate_scaled=fla_ops.PATH_CONVENTIONS.gate_scaled)
        else:
            fx = {n: x[n] for n in ("q", "k", "v", "g")}
            out = fla_ops.forgetting_attn(**fx, scale=s)
            ref = P.fox_attn(**{n: x64[n] for n in fx}, scale=s)
        rows.append({"op": op, "dtype": dtype, "case": case.label(), "rel_err": rel_err(out, ref)})
        print(f"{device:4} {op:16} {dtype}  {case.label():50}  rel err {rows[-1]['rel_err']:.3e}", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"))
    ap.add_argument("--fp32-dot", choices=("tf32", "ieee"), default="tf32")
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, metavar=("CPU_JSON", "GPU_JSON"))
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (json.load(open(p)) for p in args.compare)
        for r, s in zip(a, b):
            print(f"{r['op']:16} {r['dtype']}  {r['case']:50}  cpu {r['rel_err']:.3e}  gpu {s['rel_err']:.3e}  "
                  f"ratio {r['rel_err'] / s['rel_err']:.2f}")
        return 0
    rows = measure(args.device, args.fp32_dot)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
