"""Where a kernel check's time goes: a result's `details.seconds_in` (JSON).

seconds_in = {kernel, oracle, same_dtype: seconds in each (summed over the check's examples; the kernel's
includes its Triton compilations and autotuning), compile: seconds in Triton compilations (a compilation
loaded from Triton's disk cache counts too), compilations: how many}.  The check's own `seconds` minus
kernel + oracle + same_dtype is hypothesis, input building and judging.  On a GPU each phase ends with a
synchronize, so that a kernel's time is not charged to the next phase.  One accumulator per process,
reset by verify.run.runner.execute at the start of each check.
"""
from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager

_spent: Counter = Counter()
_compile_started = [0.0]      # when the compilation in progress began (a failed one is overwritten by the next)


def reset() -> None:
    _spent.clear()


def spent() -> dict:
    """What the current check spent so far (empty if it timed no phase)."""
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in _spent.items()}


@contextmanager
def phase(name: str, device: str):
    """Charge the body's wall time to `name` (on cuda, up to the end of the work it queued)."""
    t0 = time.perf_counter()
    yield
    if device == "cuda":
        import torch
        torch.cuda.synchronize()
    _spent[name] += time.perf_counter() - t0


def time_compilations() -> None:
    """Charge Triton's compilations to `compile` through its JIT hooks (called around each compilation of a
    kernel specialization the process has not compiled yet), unless the user installed hooks of their own."""
    from triton import knobs
    if knobs.runtime.jit_cache_hook is not None or knobs.runtime.jit_post_compile_hook is not None:
        return

    def before(**_):
        _compile_started[0] = time.perf_counter()
        return False              # False: compile (True would skip it)

    def after(**_):
        _spent["compile"] += time.perf_counter() - _compile_started[0]
        _spent["compilations"] += 1

    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = before, after
