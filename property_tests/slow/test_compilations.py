"""Compile accounting (pathmdn_verify.platform.timing): Triton really compiles here (PTX for an H200, sm_90, without a
GPU) in a child process; a second check needing the same kernel specialization does not compile it again
(a disk-cache load), and a key compiled twice in one run is counted as a duplicate; two workers needing one key
at the same moment compile it once (timing.compile_once), and twice without it."""
import json
import os
import subprocess
import sys

import pytest


CHILD = """
import json, os, sys
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from pathmdn_verify.platform import timing

@triton.jit
def double(x, y, n, B: tl.constexpr):
    i = tl.arange(0, B)
    tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)

timing.time_compilations()
records = []
for cache in sys.argv[1:]:                 # one "check" per argument, each with this Triton cache directory
    triton.knobs.cache.dir = cache
    timing.reset()
    triton.compile(ASTSource(double, signature={"x": "*fp32", "y": "*fp32", "n": "i32", "B": "constexpr"},
                             constexprs={"B": 16}), target=GPUTarget("cuda", 90, 32))
    records.append({"seconds_in": timing.spent()})
from pathmdn_verify.core.results import run_compilations
print(json.dumps(run_compilations(records)))
"""


def _run(tmp_path, *caches) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = tmp_path / "child.py"             # a file: triton.jit reads the kernel's source
    script.write_text(CHILD)
    r = subprocess.run([sys.executable, str(script), *map(str, caches)], capture_output=True, text=True, env=env,
                       check=False, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def test_second_check_of_a_compile_key_loads_it_and_a_recompile_is_a_duplicate(tmp_path):
    shared = _run(tmp_path, tmp_path / "c", tmp_path / "c")
    assert shared == {**shared, "compiled": 1, "distinct": 1, "duplicates": 0, "cache_loads": 1}
    # the control: two "workers" without a shared cache compile the same key twice
    apart = _run(tmp_path, tmp_path / "a", tmp_path / "b")
    assert apart == {**apart, "compiled": 2, "distinct": 1, "duplicates": 1, "cache_loads": 0}


RACER = """
import json, os, sys, time
import triton, triton.language as tl
import triton.compiler
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from pathmdn_verify.platform import timing

@triton.jit
def double(x, y, n, B: tl.constexpr):
    i = tl.arange(0, B)
    tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)

cache, barrier, me, lock, entry = sys.argv[1:6]
triton.knobs.cache.dir = cache
timing.time_compilations()
if lock == "lock":
    timing.compile_once()


def meet(stage, patience):             # wait (at most patience seconds) until both racers reached stage
    open(os.path.join(barrier, f"{stage}-{me}"), "w").close()
    deadline = time.monotonic() + patience
    while sum(f.startswith(stage) for f in os.listdir(barrier)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)


make_ir = ASTSource.make_ir
def compiling(self, *args, **kwargs):     # reached only on a cache miss: each racer waits here for the other, so
    meet("compiling", 3.0)                # without the lock both have missed before either writes the cache
    return make_ir(self, *args, **kwargs)
ASTSource.make_ir = compiling
meet("start", 300.0)                      # both racers start compiling together
compile = triton.compiler.compile if entry == "jit" else triton.compile    # the JIT's entry, or torch.compile's
compile(ASTSource(double, signature={"x": "*fp32", "y": "*fp32", "n": "i32", "B": "constexpr"}, constexprs={"B": 16}),
        target=GPUTarget("cuda", 90, 32))
print(json.dumps({"seconds_in": timing.spent()}))
"""


def _race(tmp_path, lock: str, entry: str) -> dict:
    """Two processes (a run's workers) compile the same key at the same moment into one Triton cache, through
    triton.compiler.compile (entry "jit": what a kernel launch calls) or triton.compile ("inductor": what
    torch.compile's generated kernels call)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script, barrier = tmp_path / "racer.py", tmp_path / f"barrier-{lock}-{entry}"
    script.write_text(RACER)
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / f"cache-{lock}-{entry}"), str(barrier), me,
                               lock, entry],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for me in ("a", "b")]
    records = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        records.append(json.loads(out.splitlines()[-1]))
    from pathmdn_verify.core.results import run_compilations
    return run_compilations(records)


@pytest.mark.parametrize("entry", ["jit", "inductor"])
def test_a_key_two_workers_need_at_once_is_compiled_once(tmp_path, entry):
    """timing.compile_once: the worker that takes the key's lock compiles; the other waits and loads it from the
    disk cache.  The control, without the lock, compiles it in both (a duplicate).  Through triton.compile too:
    on the H200 two layer checks started together compiled five of torch.compile's
    kernels twice while only triton.compiler.compile took the lock."""
    once = _race(tmp_path, "lock", entry)
    assert once == {**once, "compiled": 1, "distinct": 1, "duplicates": 0, "cache_loads": 1}
    twice = _race(tmp_path, "nolock", entry)
    assert twice == {**twice, "compiled": 2, "distinct": 1, "duplicates": 1, "cache_loads": 0}
