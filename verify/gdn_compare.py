"""Gated DeltaNet under the CPU interpreter vs the GPU: fla's chunk_gated_delta_rule on fixed inputs,
each output and gradient's normwise relative error against the float64 recurrence.  With log mu = -inf
(mu = 0), eta = 1 and p = alpha k, the MDN recurrence of references/mdn.py is GDN's
    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = scale S_t^T q_t
(M_t = -k_t (v_t - alpha_t S_{t-1}^T k_t)^T, S_t = alpha_t S_{t-1} - beta_t M_t).  Inputs are drawn on
the CPU from fixed seeds, so both devices see the same values.  A pass the interpreter cannot run
faithfully (verify.fidelity.is_interpreter_gap) is recorded with its reason instead of a number.

    python -m verify.gdn_compare --device cpu  --out cpu.json
    python -m verify.gdn_compare --device cuda --out gpu.json
    python -m verify.gdn_compare --compare cpu.json gpu.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

CASES = [  # (dtype, T, D, gate offset: g = logsigmoid(randn + offset), seed)
    ("fp32", 256, 64, 4.0, 1),
    ("fp32", 200, 64, 0.0, 2),
    ("bf16", 256, 64, 4.0, 1),
    ("bf16", 200, 64, 0.0, 2),
]
GRADS = ("q", "k", "v", "g", "beta")


def inputs(T: int, D: int, offset: float, seed: int) -> dict:
    """float32 CPU tensors, B = 1, H = 2: q, k L2-normalised (GDN's domain), beta in (0, 1)."""
    import torch
    import torch.nn.functional as F
    gen = torch.Generator().manual_seed(seed)
    B, H = 1, 2
    q, k, v, do = (torch.randn(B, T, H, D, generator=gen) for _ in range(4))
    return {"q": F.normalize(q, dim=-1), "k": F.normalize(k, dim=-1), "v": v, "do": do,
            "g": F.logsigmoid(torch.randn(B, T, H, generator=gen) + offset),
            "beta": torch.sigmoid(torch.randn(B, T, H, generator=gen))}


def reference(x64: dict) -> dict:
    """float64 o, final state and gradients of sum(o * do) from the MDN recurrence with mu = 0, eta = 1."""
    import torch
    from references.mdn import recurrence
    leaves = {n: x64[n].clone().requires_grad_() for n in GRADS}
    minus_inf = torch.full_like(x64["g"], -torch.inf)
    o, S, _ = recurrence(leaves["q"], leaves["k"], leaves["v"], leaves["g"], minus_inf, leaves["beta"],
                         torch.ones_like(x64["g"]))
    (o * x64["do"]).sum().backward()
    return {"o": o.detach(), "final_state": S.detach(), **{"d" + n: leaves[n].grad for n in GRADS}}


def measure(device: str) -> list[dict]:
    if device == "cpu":
        from verify import fidelity
        fidelity.prepare_cpu_kernels()
    import torch
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from verify.fidelity import is_interpreter_gap
    from verify.metrics import rel_err
    from verify.precision import TORCH_DTYPES
    rows = []
    for dtype, T, D, offset, seed in CASES:
        x = inputs(T, D, offset, seed)
        dt = TORCH_DTYPES[dtype]
        ref = reference({n: t.double() if n == "do" else t.to(dt).double() for n, t in x.items()})
        case = f"T={T} D={D} gate=logsigmoid(randn+{offset:g}) seed={seed}"
        leaves = {n: x[n].to(dt).to(device).requires_grad_() for n in GRADS}
        got = {}
        try:
            o, S = chunk_gated_delta_rule(*(leaves[n] for n in GRADS), output_final_state=True)
            got.update(o=o, final_state=S)
            (o.float() * x["do"].to(device)).sum().backward()
            got.update({"d" + n: leaves[n].grad for n in GRADS})
        except Exception as exc:
            if not is_interpreter_gap(exc):
                raise
            while exc.__cause__ is not None:        # the interpreter re-raises: report the original
                exc = exc.__cause__
            gap = f"interpreter gap: {exc!r}"[:300]
        for name in ref:
            row = {"op": "chunk_gated_delta_rule", "dtype": dtype, "case": case, "tensor": name}
            row.update(rel_err=rel_err(got[name], ref[name])) if name in got else row.update(rel_err=None, gap=gap)
            rows.append(row)
            shown = f"rel err {row['rel_err']:.3e}" if name in got else row["gap"][:90]
            print(f"{device:4} {dtype}  {case:42} {name:12} {shown}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"))
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--compare", nargs=2, metavar=("CPU_JSON", "GPU_JSON"))
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (json.load(open(p)) for p in args.compare)
        for r, s in zip(a, b):
            cpu, gpu = r["rel_err"], s["rel_err"]
            ratio = f"{cpu / gpu:.2f}" if cpu is not None and gpu else "-"
            print(f"{r['dtype']}  {r['case']:42} {r['tensor']:12} cpu {cpu if cpu is None else f'{cpu:.3e}'}  "
                  f"gpu {gpu if gpu is None else f'{gpu:.3e}'}  ratio {ratio}")
        return 0
    if not args.device:
        ap.error("give --device or --compare")
    rows = measure(args.device)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
