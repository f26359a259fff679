"""Getting a process ready to run kernels: `prepare(ctx)`, called by every check that runs a kernel, by the
commands that run one outside a check (compare, localize, bisect's steps, the sanitizer) and by each worker
at its start."""
from __future__ import annotations

import os

from pathmdn_verify.core import hooks
from pathmdn_verify.platform import configs, timing


def prepare(ctx) -> None:
    """Lend the core the platform's hooks (timing of phases, tile-config rounds).  On the CPU, install the
    interpreter fidelity layer before any kernel module is imported, and make fla pick the H200's tile sizes.
    On every device, memory that torch allocates without writing (torch.empty) is filled with NaN, so a kernel
    that leaves part of its output unwritten fails as non-finite every time instead of returning whatever the
    allocator reused (a verdict that would change from run to run, and that hypothesis reports as flaky)."""
    hooks.install(phase=timing.phase, every_config=configs.every_config, last_example=configs.last_example)
    if ctx.device == "cpu":
        from pathmdn_verify.platform import fidelity
        fidelity.prepare_cpu_kernels(ctx.fp32_dot)
    else:
        timing.time_compilations()
        timing.compile_once()
        if ctx.configs == "autotune":      # Triton's choices kept in its cache directory: a second run times none
            os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    import torch     # after the fidelity layer (this imports triton); fills torch.empty through fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
