"""Where a check's time goes on the GPU host: one check in this process, twice (the first fills Triton's cache
and the allocator), the second under cProfile.  Prints the wall time, the minor page faults and seconds_in of
each run, and the functions with the most cumulative time.  --mallopt: glibc keeps freed memory (no mmap below
32 MiB, no trimming) before anything is allocated.  `python probe.py CHECK_ID [--mallopt]`."""
import argparse
import cProfile
import ctypes
import pstats
import resource
import time

ap = argparse.ArgumentParser()
ap.add_argument("check")
ap.add_argument("--mallopt", action="store_true")
ap.add_argument("--device", default="cuda")
ap.add_argument("--profile", default="full")
args = ap.parse_args()
if args.mallopt:
    libc = ctypes.CDLL("libc.so.6")
    print("mallopt", libc.mallopt(-3, 32 << 20), libc.mallopt(-1, 1 << 30), flush=True)   # MMAP_, TRIM_THRESHOLD
import torch  # noqa: E402

torch.set_num_threads(1)
from verify.core.engine import prepare  # noqa: E402
from verify.core.registry import REGISTRY, Context, load_checks  # noqa: E402
from verify.run.runner import execute  # noqa: E402

ctx = Context(device=args.device, profile=args.profile)
load_checks()
prepare(ctx)
for i in range(2):
    prof = cProfile.Profile() if i else None
    f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    if prof:
        prof.enable()
    rec = execute(REGISTRY[args.check], ctx)
    if prof:
        prof.disable()
    print(f"run {i}: {time.perf_counter() - t0:.2f} s, {resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0} "
          f"faults, {rec.result.status}, seconds_in {rec.result.details.get('seconds_in')}", flush=True)
pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
