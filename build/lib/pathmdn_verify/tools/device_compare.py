"""Does the CPU interpreter (with the fidelity layer) see the GPU's error class?  Run this module on
both devices and compare: it prints, for a fixed list of inputs, each kernel's normwise relative error
against the float64 oracle.  The inputs are each op's device_cases (its record, verify/ops/), generated
on the CPU from fixed seeds, so both devices see the same values.

    python -m pathmdn_verify.tools.device_compare --device cpu  --out cpu.json
    python -m pathmdn_verify.tools.device_compare --device cuda --out gpu.json
    python -m pathmdn_verify.tools.device_compare --compare cpu.json gpu.json
"""
from __future__ import annotations

import argparse
import json


def measure(device: str, fp32_dot: str = "tf32") -> list[dict]:
    if device == "cpu":
        from pathmdn_verify.platform import fidelity
        fidelity.prepare_cpu_kernels(fp32_dot)
    from pathmdn_verify.core.inputs import as_oracle
    from pathmdn_verify.core.metrics import rel_err
    from pathmdn_verify.core.precision import TORCH_DTYPES
    from pathmdn_verify.ops import OPS, as_tuple, scale_of
    rows = []
    for op in OPS.values():
        for dtype, case in op.device_cases:
            x = op.inputs(case, TORCH_DTYPES[dtype], device)
            out = as_tuple(op.kernel(**x, scale=scale_of(x)))[0]
            expected = as_tuple(op.oracle(**as_oracle(x), scale=scale_of(x)))[0]
            rows.append({"op": op.name, "dtype": dtype, "case": case.label(), "rel_err": rel_err(out, expected)})
            print(f"{device:4} {op.name:16} {dtype}  {case.label():50}  rel err {rows[-1]['rel_err']:.3e}", flush=True)
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
