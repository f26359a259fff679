"""Oracle timings: `python -m pathmdn_verify.tools.bench` (float64 literal PaTH walk, one head, this machine's CPU).

The walk is O(T^2 d); the printed ratios t(2T)/t(T) show it (4 for pure T^2 scaling).
"""
import time

import torch

from pathmdn_verify.references.path_oracle import attend, path_logits


def time_path_oracle(T: int, d: int = 64, repeats: int = 1) -> float:
    gen = torch.Generator().manual_seed(0)
    q, k, v, w = (torch.randn(T, d, generator=gen, dtype=torch.float64) for _ in range(4))
    w = w / w.norm(dim=-1, keepdim=True)
    beta = 2 * torch.rand(T, generator=gen, dtype=torch.float64)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        attend(path_logits(q, k, w, beta), v, None, d ** -0.5)
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    time_path_oracle(256)          # warm-up: first calls pay torch's one-time initialisation
    prev = None
    for T in (1024, 2048, 4096):
        t = time_path_oracle(T)
        ratio = f"  x{t / prev:.1f} vs T/2" if prev else ""
        print(f"literal PaTH oracle, float64, 1 head, d=64, T={T:5d}: {t:6.2f} s{ratio}")
        prev = t


if __name__ == "__main__":
    main()
