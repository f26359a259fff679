"""Compile accounting (verify.core.timing): Triton really compiles here (PTX for an H200, sm_90, without a
GPU) in a child process; a second check needing the same kernel specialization does not compile it again
(a disk-cache load), and a key compiled twice in one run is counted as a duplicate."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, os, sys
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from verify.core import timing

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
print(json.dumps(timing.run_compilations(records)))
"""


def _run(tmp_path, *caches) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = tmp_path / "child.py"             # a file: triton.jit reads the kernel's source
    script.write_text(CHILD)
    r = subprocess.run([sys.executable, str(script), *map(str, caches)], capture_output=True, text=True, cwd=REPO,
                       env={**env, "PYTHONPATH": str(REPO)}, check=False, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def test_second_check_of_a_compile_key_loads_it_and_a_recompile_is_a_duplicate(tmp_path):
    shared = _run(tmp_path, tmp_path / "c", tmp_path / "c")
    assert shared == {**shared, "compiled": 1, "distinct": 1, "duplicates": 0, "cache_loads": 1}
    # the control: two "workers" without a shared cache compile the same key twice
    apart = _run(tmp_path, tmp_path / "a", tmp_path / "b")
    assert apart == {**apart, "compiled": 2, "distinct": 1, "duplicates": 1, "cache_loads": 0}
