"""Canaries for the H200 emulation: its tiles (pathmdn_verify.kernels.fla_ops.emulate_h200_tiles) and its other
device answers (emulate_h200_device), both run by pathmdn_verify.platform.fidelity.prepare_cpu_kernels before any
fla.ops module is imported.

A CPU run claims "H200 (max_shared_mem 232448)" in its results (interpreter_fidelity.device_properties).  These
checks read back what fla actually chose, in whatever tree --kernel-root gave (check_shared_mem lives in
fla/utils.py, fla/utils/_device.py or fla/utils/hardware.py depending on the version):

  env.interpreter.tiles.check_shared_mem  check_shared_mem(arch, tensor_idx) answers as on an H200 for hopper /
                                          ampere / ada and tensor_idx None (what launchers pass for a CPU tensor)
                                          and 0 (True, but hopper False in the trees of 2025-03-31 .. 04-05, whose
                                          threshold exceeds the H200's), and the results say H200
  env.interpreter.tiles.path_fwd          a PaTH forward launches parallel_path_fwd_kernel with BS 64, BT 128
  env.interpreter.tiles.fox_fwd           a FoX forward (T = 64) launches parallel_attn_fwd_kernel with BS 64
                                          and num_warps 8 (its launcher asks check_shared_mem('hopper',
                                          q.device.index), i.e. tensor_idx None on the CPU)

  env.interpreter.device.sm_count         fla's get_multiprocessor_count answers 132 for tensor_idx None and 0
  env.interpreter.device.tf32             GDN's chunk forward solves in TF32 (chunk_fwd.SOLVE_TRIL_DOT_PRECISION,
                                          bound at its import)
  env.interpreter.device.hopper           the modules that bind IS_NVIDIA_HOPPER at import (chunk_o,
                                          chunk_delta_h) hold True
  env.interpreter.device.triton_guard     chunk_o's #640 guard does not fire in this process (it would on the
                                          H200: the message says so)

Each device canary fails with its answer off (VERIFY_EMULATE_H200_OFF=<name>: the negative controls in
property_tests/slow/test_device_emulation.py); a tree that never asks the question skips (unsupported).

The launches are captured by wrapping the run method of Triton's kernel class (the interpreter's
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
def captured_launches():
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
    h200 = fla_ops.h200_shared_mem_answers()
    wrong = sorted(k for k, ok in answers.items() if ok != h200[k])
    details = {"claimed": claimed, "module": where, "answers": answers}
    if not answers:
        return Result("fail", message=f"fla.utils has no cached check_shared_mem: tiles not emulated ({claimed})",
                      details=details)
    if wrong:
        return Result("fail", message=f"{where}.check_shared_mem answers (arch, tensor_idx) {', '.join(wrong)} "
                                      f"otherwise than an H200 ({', '.join(f'{k}: {h200[k]}' for k in wrong)}): fla "
                                      f"picks other tiles than an H200 (results say: {claimed})", details=details)
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
        with torch.no_grad(), captured_launches() as launches:
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
        with torch.no_grad(), captured_launches() as launches:
            fla_ops.forgetting_attn(q, k, v, g)
    except VariantUnsupported as exc:
        return _unsupported(exc)
    return _verdict(launches, "parallel_attn_fwd_kernel", EXPECTED_FOX, f"FoX forward (T={T}, D={D})")


# ------------------------------------------------------------------------------------------- device answers

def _emulated(part: str) -> str:
    from pathmdn_verify.platform import fidelity
    return ((fidelity.active_parts() or {}).get("device_emulation") or {}).get(part, "not emulated: not run")


def _consumers(names: tuple[str, ...], flags: tuple[str, ...]) -> dict:
    """module -> the flag's value as that module bound it at import, for each of `names` the tree has and that
    binds one of `flags`."""
    import importlib
    found = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        for flag in flags:
            if flag in vars(module):
                found[f"{name}.{flag}"] = vars(module)[flag]
    return found


@check("env.interpreter.device.sm_count", "fla's get_multiprocessor_count answers the H200's 132 SMs "
       "(tensor_idx None and 0)", devices=("cpu",))
def device_sm_count(ctx: Context) -> Result:
    from pathmdn_verify.kernels import fla_ops
    _prepare(ctx)
    hw, fn = fla_ops.sm_count_module()
    claimed = _emulated("sm_count")
    if fn is None:
        return Result("fail", message=f"this fla has no get_multiprocessor_count: {claimed}")
    got = {}
    for idx in (None, 0):
        try:
            got[str(idx)] = fn(idx)
        except Exception as exc:        # a CPU's triton: 0 active drivers (2025-06-20 .. 2026-06-04)
            got[str(idx)] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    ok = all(v == fla_ops.H200_SM_COUNT for v in got.values())
    return Result("pass" if ok else "fail", details={"answers": got, "claimed": claimed},
                  message=f"{hw.__name__}.get_multiprocessor_count answers {got} (the H200: "
                          f"{fla_ops.H200_SM_COUNT}); results say: {claimed}")


@check("env.interpreter.device.tf32", "GDN's chunk forward solves its triangular system in TF32, as on the H200 "
       "(IS_TF32_SUPPORTED read back where chunk_fwd bound it)", devices=("cpu",))
def device_tf32(ctx: Context) -> Result:
    _prepare(ctx)
    bound = _consumers(("fla.ops.gated_delta_rule.chunk_fwd",), ("SOLVE_TRIL_DOT_PRECISION",))
    if not bound:
        return _unsupported("this fla asks no TF32 question on the layers' paths (GDN's fused kkt + solve "
                            "in TF32 exists from baf57d52, 2026-03-24)")
    value = {k: getattr(v, "value", v) for k, v in bound.items()}
    ok = all(v == "tf32" for v in value.values())
    return Result("pass" if ok else "fail", details={"bound": value, "claimed": _emulated("tf32")},
                  message=f"{value} (the H200: tf32); results say: {_emulated('tf32')}")


@check("env.interpreter.device.hopper", "the modules that choose their configs by IS_NVIDIA_HOPPER hold True, as "
       "on the H200", devices=("cpu",))
def device_hopper(ctx: Context) -> Result:
    _prepare(ctx)
    bound = _consumers(("fla.ops.common.chunk_o", "fla.ops.common.chunk_delta_h"),
                       ("IS_NVIDIA_HOPPER", "is_nvidia_hopper"))
    if not bound:
        return _unsupported("no module on the layers' paths of this fla reads IS_NVIDIA_HOPPER")
    ok = all(v is True for v in bound.values())
    return Result("pass" if ok else "fail", details={"bound": bound, "claimed": _emulated("hopper")},
                  message=f"{bound} (the H200: True); results say: {_emulated('hopper')}")


@check("env.interpreter.device.triton_guard", "fla's #640 guard (Hopper with Triton 3.4 .. 3.7.1) is lifted: "
       "GDN's chunk backward runs under the interpreter, where the H200 raises", devices=("cpu",))
def device_triton_guard(ctx: Context) -> Result:
    import importlib

    import triton
    from packaging import version

    from pathmdn_verify.kernels import fla_ops
    _prepare(ctx)
    try:
        module = importlib.import_module(fla_ops.GUARDED)
    except ModuleNotFoundError:
        return _unsupported(f"this fla has no {fla_ops.GUARDED}")
    flags = fla_ops.guard_condition(module)
    hopper = vars(module).get("IS_NVIDIA_HOPPER")
    if hopper is None or not flags:
        return _unsupported(f"{fla_ops.GUARDED} of this fla has no #640 guard")
    v = version.parse(triton.__version__)
    on_h200 = v >= version.parse("3.4.0") and not ("TRITON_ABOVE_3_7_1" in flags and v >= version.parse("3.7.1"))
    here = bool(hopper) and module.TRITON_ABOVE_3_4_0 and not vars(module).get("TRITON_ABOVE_3_7_1", False)
    details = {"flags": {n: vars(module)[n] for n in flags}, "IS_NVIDIA_HOPPER": hopper, "h200_raises": on_h200,
               "claimed": _emulated("triton_guard")}
    if here:
        return Result("fail", details=details, message=f"the guard fires in this process (Triton {triton.__version__}):"
                      " GDN's chunk backward raises here as on the H200, and the CPU no longer verifies it")
    return Result("pass", details=details, message=f"lifted: GDN's chunk backward runs here; on the H200 with Triton "
                  f"{triton.__version__} fla raises ({'yes' if on_h200 else 'no'})")
