"""Minimal reproduction: fla 0.6.0 parallel_path_attn backward on short sequences, on a GPU.

    python path_bwd_bf16_fault.py             # every case below, each in a fresh process
    python path_bwd_bf16_fault.py bf16 1 64   # one case: dtype, T, head dim

Each case: B = 1, H = 2, random q, k, v in dtype, unit-norm w and beta uniform in (0, 2) in fp32 (fla requires it), no gate, scale D^-1/2;
forward, then backward of sum(o * do).  A case prints 'ok', 'non-finite <grads>' or the CUDA error
(CUDA_LAUNCH_BLOCKING=1, so the error names the launch that faulted).  Uses only torch and fla.
"""
import os
import subprocess
import sys
import traceback

CASES = [("bf16", T, 64) for T in (1, 2, 3, 16, 63, 64, 65, 100)] + \
        [("bf16", T, D) for D in (16, 32, 128) for T in (1, 2, 64)] + [("fp32", T, 32) for T in (1, 2, 64, 65)]


def one(dtype: str, T: int, D: int) -> str:
    import torch
    from fla.ops.path_attn import parallel_path_attn
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    g = torch.Generator(device="cuda").manual_seed(0)
    B, H = 1, 2
    q, k, v = (torch.randn(B, T, H, D, device="cuda", generator=g).to(dt).requires_grad_() for _ in range(3))
    w = torch.nn.functional.normalize(torch.randn(B, T, H, D, device="cuda", generator=g), dim=-1).requires_grad_()   # fp32: fla requires it
    beta = (2 * torch.rand(B, T, H, device="cuda", generator=g)).requires_grad_()
    try:
        o, _ = parallel_path_attn(q, k, v, w, beta, None, D ** -0.5, None, use_cache=False)
        o.backward(torch.randn_like(o))
        torch.cuda.synchronize()
    except Exception as exc:
        fla_frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/fla/" in f.filename]
        where = f" in {fla_frames[-1].name} ({os.path.basename(fla_frames[-1].filename)}:{fla_frames[-1].lineno})" \
            if fla_frames else ""
        return f"{type(exc).__name__}{where}: {str(exc).splitlines()[0]}"
    bad = [n for n, t in zip("q k v w beta".split(), (q, k, v, w, beta)) if not torch.isfinite(t.grad).all()]
    return "ok" if not bad and torch.isfinite(o).all() else f"non-finite {' '.join(bad) or 'o'}"


if __name__ == "__main__":
    if len(sys.argv) == 4:
        print(one(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    else:
        env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
        procs = [(c, subprocess.Popen([sys.executable, __file__, *map(str, c)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)) for c in CASES]
        for (dtype, T, D), p in procs:
            lines = [l for l in p.communicate()[0].splitlines() if l.strip() and "warn" not in l.lower()]
            print(f"{dtype} T={T:<4} D={D:<4} {lines[-1] if lines else '(no output)'}")
