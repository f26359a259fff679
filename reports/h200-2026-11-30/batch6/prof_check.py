"""Profile one check in-process on cuda: cProfile's top functions by cumulative time (batch 6)."""
import cProfile, pstats, sys, time
from verify.runner import _worker_init, _worker_start
from verify.registry import REGISTRY, Context
_worker_init(False)
ctx = Context(device="cuda", profile=sys.argv[2])
_worker_start(ctx, True)
t = time.perf_counter()
prof = cProfile.Profile()
r = prof.runcall(REGISTRY[sys.argv[1]].run, ctx)
print(sys.argv[1], r.status, f"{time.perf_counter() - t:.1f} s", r.message[:300])
pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
