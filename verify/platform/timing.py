"""Where a kernel check's time goes: a result's `details.seconds_in` (JSON).

seconds_in = {kernel, oracle, same_dtype: seconds in each (summed over the check's examples; the kernel's
includes its Triton compilations and autotuning), compile: seconds in Triton's in-process cache misses
(compiling, or loading from Triton's disk cache), compilations: how many specializations Triton compiled
(not found in its disk cache), cache_loads: how many it loaded from there, compiled: the cache key
("kernel:hash") of each compilation, loaded: of each load}.  pathmdn_verify.core.results.run_compilations sums them over a run: a key compiled twice in one run
(two workers compiling the same kernel specialization at once) is a duplicate, work a run should not do.
The check's own `seconds` minus kernel + oracle + same_dtype is hypothesis, input building and judging.  On a GPU each phase ends with a
synchronize, so that a kernel's time is not charged to the next phase.  One accumulator per process,
reset by pathmdn_verify.run.runner.execute at the start of each check.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import time
from collections import Counter
from contextlib import contextmanager

_spent: Counter = Counter()
_compiled: list[str] = []     # cache keys the current check compiled
_loaded: list[str] = []       # cache keys the current check loaded from Triton's disk cache
_compile_started = [0.0]      # when the compilation in progress began (a failed one is overwritten by the next)


def reset() -> None:
    _spent.clear()
    _compiled.clear()
    _loaded.clear()


def spent() -> dict:
    """What the current check spent so far (empty if it timed no phase)."""
    out = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in _spent.items()}
    return out | ({"compilations": len(_compiled), "compiled": list(_compiled)} if _compiled else {}) \
        | ({"loaded": list(_loaded)} if _loaded else {})


@contextmanager
def phase(name: str, device: str):
    """Charge the body's wall time to `name` (on cuda, up to the end of the work it queued)."""
    t0 = time.perf_counter()
    try:
        yield
        if device == "cuda":
            import torch
            torch.cuda.synchronize()
    finally:                      # a kernel that raises spent its time too
        _spent[name] += time.perf_counter() - t0


def time_compilations() -> None:
    """Charge Triton's in-process cache misses to `compile` through its JIT hooks (called around each kernel
    specialization the process has not loaded yet), and count compilations and disk-cache loads through its
    compilation listener (told cache_hit), unless the user installed hooks of their own."""
    from triton import knobs
    if knobs.runtime.jit_cache_hook is None and knobs.runtime.jit_post_compile_hook is None:
        def before(**_):
            _compile_started[0] = time.perf_counter()
            return False              # False: compile (True would skip it)

        def after(**_):
            _spent["compile"] += time.perf_counter() - _compile_started[0]

        knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = before, after
    if knobs.compilation.listener is None:
        knobs.compilation.listener = listen


def listen(*, src, metadata: dict, cache_hit: bool, **_) -> None:
    """Triton's compilation listener: one call per triton.compile, cache_hit when loaded from disk."""
    name = getattr(getattr(src, "fn", None), "__name__", None) or metadata.get("name", "?")
    key = f"{name}:{metadata.get('hash', '?')}"
    if cache_hit:
        _spent["cache_loads"] += 1
        _loaded.append(key)
    else:
        _compiled.append(key)


def keys_used(details: dict) -> list[str]:
    """The compile keys a check's worker compiled or loaded from disk while it ran (a key its worker had loaded
    for an earlier check is not among them)."""
    spent = details.get("seconds_in") or {}
    return sorted({*spent.get("compiled", ()), *spent.get("loaded", ())})


def disk_cache_dir() -> str:
    """Triton's disk cache: $TRITON_CACHE_DIR, else default_cache_dir() (triton.knobs.cache.dir)."""
    return os.environ.get("TRITON_CACHE_DIR") or default_cache_dir()


def default_cache_dir() -> str:
    """Where Triton keeps its disk cache when $TRITON_CACHE_DIR is unset: $TRITON_HOME (or ~)/.triton/cache."""
    return os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")


def in_disk_cache(key: str, folder: str) -> bool:
    """Whether Triton's disk cache in `folder` holds a compile key ("kernel:sha256 hex"): the group file its
    compile writes last, in the key's folder (base32 of the hash: triton.runtime.cache.get_cache_manager)."""
    name, _, digest = key.rpartition(":")
    try:
        sub = base64.b32encode(bytes.fromhex(digest)).decode().rstrip("=")
    except ValueError:
        return False
    return os.path.isfile(os.path.join(folder, sub, f"__grp__{name[:150]}.json"))


def estimate(kept: dict[str, list[str]], check_ids: list[str], folder: str) -> dict:
    """The compilations a run of check_ids should make: the keys the kept record (check id -> keys_used, from
    earlier runs of this device class and profile) has for them, less those in Triton's disk cache; `unknown`:
    the checks the record lacks (their keys are not counted)."""
    keys = {k for cid in check_ids for k in kept.get(cid, ())}
    present = sum(in_disk_cache(k, folder) for k in keys)
    return {"keys": len(keys), "in_disk_cache": present, "compilations": len(keys) - present,
            "unknown": sum(cid not in kept for cid in check_ids)}


def compile_once() -> None:
    """Each compile key compiled by one process of a run: Triton's compile (triton.compiler.compile, which
    every kernel launch and autotuning candidate goes through, and triton.compile, the same function bound at
    Triton's import, through which torch.compile's generated kernels come) takes a file lock named by the key first, in
    Triton's cache directory, so that a worker needing a key another worker is compiling waits for it and then
    loads it from the disk cache (Triton looks there before compiling) instead of compiling it again.  The key
    is the kernel source's specialization (ASTSource.hash: source, signature, constexprs, attributes), the
    target and the options: what Triton's own cache key is made of.  Idempotent."""
    import triton
    import triton.compiler as tc
    from triton import knobs
    if getattr(tc.compile, "compile_once", False):
        return
    original = tc.compile

    def compile(src, target=None, options=None, **kw):
        source = getattr(src, "hash", None)
        if source is None:                        # an IR file, not a kernel's source: nothing to share
            return original(src, target=target, options=options, **kw)
        key = hashlib.sha256(json.dumps([source(), repr(target), options], sort_keys=True, default=repr)
                             .encode()).hexdigest()
        folder = os.path.join(knobs.cache.dir, "verify-compile-locks")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, key), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)      # released when the file closes, also on an exception
            return original(src, target=target, options=options, **kw)

    compile.compile_once = True
    tc.compile = compile
    if triton.compile is original:
        triton.compile = compile
