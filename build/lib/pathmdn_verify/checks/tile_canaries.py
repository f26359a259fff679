"""Canaries for the H200 tile emulation (pathmdn_verify.kernels.fla_ops.emulate_h200_tiles, run by
pathmdn_verify.platform.fidelity.prepare_cpu_kernels before any fla.ops module is imported).

A CPU run claims "H200 (max_shared_mem 232448)" in its results (interpreter_fidelity.device_properties).  These
checks read back what fla actually chose, in whatever tree --kernel-root gave (check_shared_mem lives in
fla/utils.py, fla/utils/_device.py or fla/utils/hardware.py depending on the version):

  env.interpreter.tiles.check_shared_mem  check_shared_mem(arch, tensor_idx) is True for hopper / ampere / ada
                                          and tensor_idx None (what launchers pass for a CPU tensor) and 0, and
                                          the results say H200 (the claim matches what fla answers)
  env.interpreter.tiles.path_fwd          a PaTH forward launches parallel_path_fwd_kernel with BS 64, BT 128
  env.interpreter.tiles.fox_fwd           a FoX forward (T = 64) launches parallel_attn_fwd_kernel with BS 64
                                          and num_warps 8 (its launcher asks check_shared_mem('hopper',
                                          q.device.index), i.e. tensor_idx None on the CPU)

The launches are recorded by wrapping the run method of Triton's kernel class (the interpreter's
InterpretedFunction; JITFunction natively) for the duration of one call: the launcher's own keyword
arguments (BT, BS, num_warps, ...) are read, not recomputed.  CPU only: on a GPU fla asks the real device.
"""
from __future__ import annotations

import contextlib

from pathmdn_verify.core.registry import Context, Result, check
from pathmdn_verify.core.errors import VariantUnsupported

EXPECTED_PATH = {"BS": 64, "BT": 128}      # parallel.py: BS = 64 if hopper else 32, BT = 128 if ampere else 64
EXPECTED_FOX = {"BS": 64, "num_warps": 8}  # attn/parallel.py parallel_attn_fwd: the hopper branch (T >= 64)
T = 64
D = 16


def _prepare(ctx: Context) -> None:
    from pathmdn_verify.platform.setup import prepare
    prepare(ctx)


@contextlib.contextmanager
def recorded_launches():
    """Every Triton kernel launch inside the block: a list of (kernel name, {argument: value}) with the
    launcher's positional arguments bound to the kernel's parameter names."""
    from triton.runtime import interpreter, jit
    launches: list[tuple[str, dict]] = []
    classes = [c for c in (getattr(interpreter, "InterpretedFunction", None), getattr(jit, "JITFunction", None))
               if c is not None and "run" in c.__dict__]
    originals = {c: c.__dict__["run"] for c in classes}

    def wrap(original):
        def run(self, *args, **kwargs):
            names = list(getattr(self, "arg_names", ()))
            bound = dict(zip(names, args))
            bound.update({k: v for k, v in kwargs.items() if k not in ("grid", "warmup")})
            launches.append((getattr(self, "__name__", None) or getattr(self.fn, "__name__", "?"), bound))
            return original(self, *args, **kwargs)
        return run
    try:
        for c, original in originals.items():
            c.run = wrap(original)
        yield launches
    finally:
        for c, original in originals.items():
            c.run = original


def _plain(value):
    return value.value if hasattr(value, "value") and not hasattr(value, "shape") else value


def _launch_tiles(launches, kernel: str, keys) -> dict | None:
    for name, args in launches:
        if name == kernel:
            return {k: _plain(args.get(k)) for k in keys}
    return None


def _verdict(launches, kernel: str, expected: dict, what: str) -> Result:
    got = _launch_tiles(launches, kernel, expected)
    if got is None:
        seen = sorted({n for n, _ in launches})
        return Result("fail", message=f"{what} launched no {kernel} (launched: {', '.join(seen[:8]) or 'nothing'})")
    if got != expected:
        return Result("fail", message=f"{what}: {kernel} launched with {got}, the H200 picks {expected}: the tile "
                                      "emulation did not take (see env.interpreter.tiles.check_shared_mem)",
                      details={"launched": got, "expected": expected})
    return Result("pass", message=f"{what}: {kernel} launched with {got}, as on an H200", details={"launched": got})


def _unsupported(exc) -> Result:
    return Result("skip", message=str(exc), kind="unsupported")


@check("env.interpreter.tiles.check_shared_mem",
       "fla's check_shared_mem answers as on an H200 (hopper/ampere/ada, tensor_idx None and 0) and the results "
       "claim H200 tiles", devices=("cpu",))
def tiles_check_shared_mem(ctx: Context) -> Result:
    from pathmdn_verify.kernels import fla_ops
    from pathmdn_verify.platform import fidelity
    _prepare(ctx)
    claimed = (fidelity.active_parts() or {}).get("device_properties")
    _, hw, _ = fla_ops.shared_mem_module()
    answers = fla_ops.shared_mem_answers()
    where = getattr(hw, "__name__", "fla.utils")
    wrong = sorted(k for k, ok in answers.items() if not ok)
    details = {"claimed": claimed, "module": where, "answers": answers}
    if not answers:
        return Result("fail", message=f"fla.utils has no cached check_shared_mem: tiles not emulated ({claimed})",
                      details=details)
    if wrong:
        return Result("fail", message=f"{where}.check_shared_mem is False for (arch, tensor_idx) "
                                      f"{', '.join(wrong)}: fla picks smaller tiles than an H200 "
                                      f"(results say: {claimed})", details=details)
    if claimed != fla_ops.H200_TILES:
        return Result("fail", message=f"check_shared_mem answers as an H200 but the results say {claimed!r}",
                      details=details)
    return Result("pass", message=f"{where}.check_shared_mem True for {len(answers)} (arch, tensor_idx) pairs; "
                                  f"results claim {claimed}", details=details)


@check("env.interpreter.tiles.path_fwd",
       "a PaTH forward launches parallel_path_fwd_kernel with the H200's tiles (BS 64, BT 128)", devices=("cpu",))
def tiles_path_fwd(ctx: Context) -> Result:
    import torch

    from pathmdn_verify.kernels import fla_ops
    _prepare(ctx)
    gen = torch.Generator().manual_seed(ctx.seed)
    q, k, v = (torch.randn(1, T, 1, D, generator=gen) for _ in range(3))
    w = torch.nn.functional.normalize(torch.randn(1, T, 1, D, generator=gen), dim=-1)
    beta = torch.rand(1, T, 1, generator=gen) + 0.5
    try:
        with torch.no_grad(), recorded_launches() as launches:
            fla_ops.path_attn(q, k, v, w, beta)
    except VariantUnsupported as exc:
        return _unsupported(exc)
    return _verdict(launches, "parallel_path_fwd_kernel", EXPECTED_PATH, f"PaTH forward (T={T}, D={D})")


@check("env.interpreter.tiles.fox_fwd",
       "a FoX forward launches parallel_attn_fwd_kernel with the H200's tiles (BS 64, num_warps 8; its launcher "
       "passes tensor_idx=None on the CPU)", devices=("cpu",))
def tiles_fox_fwd(ctx: Context) -> Result:
    import torch

    from pathmdn_verify.kernels import fla_ops
    _prepare(ctx)
    gen = torch.Generator().manual_seed(ctx.seed)
    q, k, v = (torch.randn(1, T, 1, D, generator=gen) for _ in range(3))
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, 1, generator=gen))
    try:
        with torch.no_grad(), recorded_launches() as launches:
            fla_ops.forgetting_attn(q, k, v, g)
    except VariantUnsupported as exc:
        return _unsupported(exc)
    return _verdict(launches, "parallel_attn_fwd_kernel", EXPECTED_FOX, f"FoX forward (T={T}, D={D})")
