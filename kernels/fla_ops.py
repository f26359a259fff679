"""Adapters that give fla's production kernels one canonical call each, with their conventions declared.

Canonical conventions (docs/design.md section 3): layout [B, T, H, D]; gates [B, T, H]; GQA by head groups;
g is the log forget gate; MDN residual v~_t = v_t - S_{t-1}^T (alpha_t k_t) unless p is given.

`fla` is imported inside the functions, never at module import, so that the CPU interpreter fidelity
layer can be installed first.  With --kernel-root the same adapters verify a checkout of fla, or the
MDN paper authors' fork (whose MDN entry points are named chunk_mode_rule / fused_recurrent_mode_rule).

Every convention below was measured against the float64 oracles (see README, "Conventions"), not
read off the docstrings.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import torch

from pathmdn_verify.core.errors import Incompatible, KernelUnavailable, VariantUnsupported, triton_incompatibility
from pathmdn_verify.core.records import Conventions

# Where the conventions below were measured (Conventions.notes says so per op).  Not a pin: any fla tree is
# accepted; entry points are found by what the tree offers (names, inspect.signature), never by its version.
MEASURED_ON = "fla-core 0.6.0"
MEASURED_ON_FORK = "the MDN authors' fork (HuuYuLong/MomentumDeltaNet c6e77fa, fla/__init__.py says 0.3.2)"
MEASURED_ON_HISTORY = ("fla v0.3.1 .. v0.5.2 and main HEAD bc3b101d (2026-08-22) for PaTH / FoX / GDN entry "
                       "points and tiles")


def fla_version() -> str:
    """The version of the fla that `import fla` would load, read from its fla/__init__.py without importing
    it (a --kernel-root checkout has no installed metadata), for the results; KernelUnavailable only if there
    is no fla at all.  Any version is accepted: what a tree offers is probed per entry point."""
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        raise KernelUnavailable("the kernel package fla is not importable: install fla-core or give --kernel-root")
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", Path(spec.origin).read_text(errors="replace"), re.MULTILINE)
    return found.group(1) if found else "without __version__"


check_fla_version = fla_version      # the name the commands call (no longer a version gate)


def _install_import_shim() -> None:
    """fla/__init__.py of a tree before 2026-06 imports the model zoo (transformers): register fla without
    running it, when needed, before the first import of fla (pathmdn_verify.kernels.fla_import)."""
    from pathmdn_verify.kernels.fla_import import install_import_shim
    install_import_shim()


def missing_backward(exc: BaseException) -> str | None:
    """The reason, when exc is the kernel package's own missing backward: a NotImplementedError raised by a
    `backward` function inside the package (fla-core's fused recurrent GDN, the MDN authors' fused
    recurrent path); None for any other error, which stays a kernel failure."""
    if not isinstance(exc, NotImplementedError) or exc.__traceback__ is None:
        return None
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    spec = importlib.util.find_spec("fla")
    package = Path(spec.origin).parent if spec and spec.origin else None
    if code.co_name != "backward" or package is None or not Path(code.co_filename).is_relative_to(package):
        return None
    return f"{Path(code.co_filename).relative_to(package.parent)} has no backward: {exc}".splitlines()[0]


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("fla")
    return Path(spec.origin).parent if spec and spec.origin else None


def _where(exc: BaseException) -> str:
    """file:line of a SyntaxError, else of the innermost frame of the kernel package in the traceback."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}: "
    tb, last = exc.__traceback__, None
    package = _package_dir()
    while tb is not None:
        if package is not None and Path(tb.tb_frame.f_code.co_filename).is_relative_to(package):
            last = tb
        tb = tb.tb_next
    return f"{last.tb_frame.f_code.co_filename}:{last.tb_lineno}: " if last is not None else ""


def _import(module: str):
    """Import an op module of fla.  The tree not having the op's package at all (fla.ops.momentum_delta_rule
    before 0.6.0, PaTH / FoX in the MDN fork) is VariantUnsupported: its checks skip.  Any other failure
    (a syntax error, a module the op imports that is missing, a Triton API the installed Triton lacks) is
    KernelUnavailable, one line naming the module and the error (the CLI's exit 2)."""
    _install_import_shim()
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        package = _package_dir()
        if missing and (module == missing or module.startswith(missing + ".")) and missing.startswith("fla.ops.") \
                and package is not None and not (package.parent / missing.replace(".", "/")).exists() \
                and not (package.parent / (missing.replace(".", "/") + ".py")).exists():
            raise VariantUnsupported(f"this fla ({package}) has no {missing}") from exc
        raise KernelUnavailable(f"cannot import {module}: {_where(exc)}{type(exc).__name__}: {exc}"
                                .splitlines()[0]) from exc
    except Exception as exc:
        if why := triton_incompatibility(exc):
            raise Incompatible(f"{module} ({_where(exc).rstrip(': ')}) {why}") from exc
        raise KernelUnavailable(f"cannot import {module}: {_where(exc)}{type(exc).__name__}: {exc}"
                                .splitlines()[0]) from exc


def _entry(module: str, names: tuple[str, ...], required: tuple[str, ...]):
    """The first of names that module offers, with every required parameter named in its signature
    (inspect.signature sees through @torch.compiler.disable's __wrapped__); VariantUnsupported if none."""
    mod = _import(module)
    for name in names:
        fn = getattr(mod, name, None)
        if fn is None:
            continue
        lacking = [p for p in required if p not in _named_parameters(fn)]
        if lacking:
            raise VariantUnsupported(f"{module}.{name} ({mod.__file__}) takes no {', '.join(lacking)}")
        return fn
    raise VariantUnsupported(f"{module} ({mod.__file__}) offers none of {', '.join(names)}")


def _named_parameters(fn) -> set[str]:
    """Parameters fn names (a **kwargs is not a name: an old tree's **kwargs silently ignores what it does not
    know)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def _reads_from_kwargs(fn, name: str) -> bool:
    """fn takes `name` only through **kwargs and its own body reads it (fla's chunk_gated_delta_rule since
    424b3330: kwargs.get('chunk_size', 64)); a **kwargs that merely swallows it does not count."""
    params = inspect.signature(fn).parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        return False
    try:
        source = inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError):
        return False
    return re.search(r"kwargs(\.get|\.pop|\[)\(?\s*['\"]" + re.escape(name) + r"['\"]", source) is not None


def _refuses_dtype(exc: BaseException) -> str | None:
    """The package's own refusal of a dtype (chunk GDN up to 0.3.2 and the MDN fork: `assert q.dtype !=
    torch.float32, "... does not support float32 ..."` in its autograd forward): the reason, else None."""
    if not isinstance(exc, AssertionError) or not re.search(r"does not support (float32|fp32|float16|bfloat16)",
                                                            str(exc), re.IGNORECASE):
        return None
    package = _package_dir()
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or package is None or not Path(tb.tb_frame.f_code.co_filename).is_relative_to(package):
        return None
    return f"{Path(tb.tb_frame.f_code.co_filename).relative_to(package.parent)} refuses: {exc}".splitlines()[0]


_EXTRA: contextvars.ContextVar = contextvars.ContextVar("entry_keywords", default={})
_TAKEN: contextvars.ContextVar = contextvars.ContextVar("entry_keywords_taken", default=())


@contextlib.contextmanager
def entry_keywords(**extra):
    """Within the block, every entry point an adapter calls also gets these keywords (an option probe's: a
    parameter the canonical call leaves out, given to the entry point as it is, pathmdn_verify.core.records.Fixed).
    A block that called no entry point through an adapter (another implementation, called with the op's canonical
    arguments alone) never gave them: VariantUnsupported, not a result of the call without them."""
    taken: list[bool] = []
    tokens = _EXTRA.set({**_EXTRA.get(), **extra}), _TAKEN.set((*_TAKEN.get(), taken))
    try:
        yield
    finally:
        _EXTRA.reset(tokens[0])
        _TAKEN.reset(tokens[1])
    if extra and not taken:
        raise VariantUnsupported(f"{', '.join(extra)}: keywords of fla's entry point, which this implementation's "
                                 "call (the op's canonical arguments) does not reach")


def given_with(**extra):
    """An option probe's kernel call (pathmdn_verify.core.records.ConventionProbe.given): the record's kernel on the
    probe's inputs with these keywords also given to the entry point."""
    def given(op, x, scale):
        with entry_keywords(**extra):
            return op.kernel(**x, scale=scale)
    return given


def _call(fn, *args, **kwargs):
    """fn(*args, **kwargs), every keyword a parameter fn names or its body reads from its **kwargs (never one a
    **kwargs would swallow), with the keywords of an enclosing `entry_keywords`; the package's own dtype refusal
    becomes VariantUnsupported."""
    kwargs = {**kwargs, **_EXTRA.get()}
    for taken in _TAKEN.get():
        taken.append(True)
    unknown = sorted(k for k in set(kwargs) - _named_parameters(fn) if not _reads_from_kwargs(fn, k))
    if unknown:
        raise VariantUnsupported(f"{fn.__module__}.{getattr(fn, '__name__', fn)} takes no {', '.join(unknown)}")
    try:
        return fn(*args, **kwargs)
    except AssertionError as exc:
        reason = _refuses_dtype(exc)
        if reason:
            raise VariantUnsupported(f"not offered by this fla: {reason}") from exc
        raise


def _given(**options) -> dict:
    """The options that are given (not None): what an adapter passes besides the tensors (an option left out gets
    the entry point's own default)."""
    return {n: v for n, v in options.items() if v is not None}


# ------------------------------------------------------------------------------ the H200's tiles on a CPU

H200_MAX_SHARED_MEM = 232448       # bytes per block, what triton reports for an H200
H200_TILES = f"H200 (max_shared_mem {H200_MAX_SHARED_MEM})"    # device_properties, only once verified
EMULATE_TILES_ENV = "VERIFY_EMULATE_H200_TILES"                 # "0": leave fla on the CPU's tiles (canary test)
SHARED_MEM_ARCHS = ("hopper", "ampere", "ada")                  # every Backend an H200 meets


class _SharedMemList(list):
    """[H200_MAX_SHARED_MEM], indexable by None too: launchers pass tensor_idx=q.device.index (fla's FoX
    forward, attn decoding, chunk_o), which is None for a CPU tensor, and list[None] would make
    check_shared_mem False (it swallows the TypeError)."""

    def __getitem__(self, i):
        return list.__getitem__(self, 0 if i is None else i)


def shared_mem_module():
    """(fla.utils, the module whose globals check_shared_mem reads, check_shared_mem), found by where the
    function lives (fla/utils.py up to 0.5.0 and the fork, fla/utils/_device.py in 0.5.1 .. HEAD,
    fla/utils/hardware.py in 0.6.0), not by module name; hw and csm are None when the tree has no cached
    check_shared_mem."""
    import sys
    utils = importlib.import_module("fla.utils")
    csm = getattr(utils, "check_shared_mem", None)
    if csm is None or not hasattr(csm, "cache_clear"):
        return utils, None, None
    return utils, sys.modules.get(inspect.unwrap(csm).__module__), csm


def shared_mem_answers() -> dict[str, bool]:
    """check_shared_mem(arch, tensor_idx) for every arch an H200 meets and tensor_idx None (CPU tensors) and 0
    (what launchers see)."""
    _, _, csm = shared_mem_module()
    if csm is None:
        return {}
    return {f"{arch},{idx}": bool(csm(arch, idx)) for arch in SHARED_MEM_ARCHS for idx in (None, 0)}


def h200_shared_mem_answers() -> dict[str, bool]:
    """What a real H200 answers to the same questions in this tree: its 232448 bytes against the tree's own
    threshold per arch (Backend.get_shared_memory).  True everywhere, except in the trees of a457770a .. 229ab441
    (2025-03-31 .. 04-05), whose HOPPER threshold 233472 exceeds the H200's: there check_shared_mem('hopper') is
    False on the H200 itself."""
    _, hw, csm = shared_mem_module()
    if csm is None:
        return {}
    threshold = getattr(getattr(hw, "Backend", None), "get_shared_memory", None)
    return {f"{arch},{idx}": threshold is None or H200_MAX_SHARED_MEM >= threshold(arch)
            for arch in SHARED_MEM_ARCHS for idx in (None, 0)}


def emulate_h200_tiles() -> str:
    """Make fla choose the tile sizes it chooses on an H200, and verify that it does; returns what was done,
    for the results: H200_TILES only when every check_shared_mem(arch, None | 0) answers as on an H200 afterwards
    (True, except where the tree's own threshold exceeds the H200's: h200_shared_mem_answers),
    else "not emulated: why" (and the env.interpreter.tiles canaries fail).  fla asks the driver for the
    shared memory per block (get_all_max_shared_mem); without a GPU it gets nothing and falls back to smaller
    tiles (PaTH: BT 64 / BS 32 instead of 128 / 64), which changes the rounding: measured, the state-tracking
    construction at n = 256 failed on the H200 and passed on the CPU until the CPU used the H200's tiles.
    Shared-memory limits themselves are not emulated (the interpreter has none).  Must run after the
    interpreter fidelity layer is on (pathmdn_verify.platform.fidelity) and before any fla.ops module is imported (fla
    builds some autotune config lists at import, e.g. chunk_delta_h.py from 0.5)."""
    import os
    import sys
    from pathmdn_verify.kernels.fla_import import is_lazy
    _install_import_shim()
    early = sorted(m for m, mod in list(sys.modules.items())
                   if (m == "fla.ops" or m.startswith("fla.ops.")) and not is_lazy(mod))
    if os.environ.get(EMULATE_TILES_ENV) == "0":
        return f"not emulated: disabled by {EMULATE_TILES_ENV}=0"
    utils, hw, csm = shared_mem_module()
    if csm is None:
        return "not emulated: fla.utils has no cached check_shared_mem"
    if not hasattr(hw, "get_all_max_shared_mem"):
        return f"not emulated: {hw.__name__} (where check_shared_mem lives) has no get_all_max_shared_mem"
    patched = lambda: _SharedMemList([H200_MAX_SHARED_MEM])
    hw.get_all_max_shared_mem = patched
    if hw is not utils and hasattr(utils, "get_all_max_shared_mem"):
        utils.get_all_max_shared_mem = patched
    csm.cache_clear()
    h200 = h200_shared_mem_answers()
    wrong = [k for k, ok in shared_mem_answers().items() if ok != h200[k]]
    if wrong:
        return (f"not emulated: {hw.__name__}.check_shared_mem does not answer ({'), ('.join(wrong)}) as an H200 "
                "after patching get_all_max_shared_mem")
    if early:
        return f"not emulated: {', '.join(early[:3])} imported before the patch (import-time tile lists kept)"
    return H200_TILES


# ----------------------------------------------------------------- the H200's other device answers on a CPU
# What the trees ask about the device besides shared memory, on the layers' paths (the research on fla's history
# behind each line: docs/design.md "Layers on any checkout").  Each is answered as an H200 answers it, before any
# fla.ops module is imported, and read back from the tree by an env.interpreter.device.<name> canary
# (verify/checks/tile_canaries.py); VERIFY_EMULATE_H200_OFF="name,..." leaves the named ones unanswered (the
# canaries' negative controls).

H200_SM_COUNT = 132                # triton's multiprocessor_count on an H200
EMULATE_OFF_ENV = "VERIFY_EMULATE_H200_OFF"
DEVICE_ANSWERS = {
    "sm_count": "get_multiprocessor_count() -> 132 (fla asks triton's active driver, which a CPU lacks: -1 or 0 "
                "active drivers from 2025-03-19 to 2026-06-04, 1 after; short convolution tiles until 2026-01-22, "
                "the norms' backward dweight split always)",
    "tf32": "IS_TF32_SUPPORTED = True (GDN's fused kkt + triangular solve in TF32 from baf57d52, 2026-03-24: "
            "changes numerics, the fidelity layer truncates the operands as the H200 does)",
    "hopper": "IS_NVIDIA_HOPPER = True (num_warps lists of chunk_o / chunk_delta_h and the like: no numerical "
              "effect under the interpreter)",
    "triton_guard": "fla's guard for Hopper with Triton 3.4 .. 3.7.1 (#640; chunk_bwd_dqkwg raises RuntimeError) "
                    "lifted: it protects against the native compiler, which the interpreter is not (the H200 "
                    "raises: that xfail is scoped to the H200)",
}
_FLAGS = {"tf32": ("IS_TF32_SUPPORTED", "is_tf32_supported"), "hopper": ("IS_NVIDIA_HOPPER", "is_nvidia_hopper")}
GUARDED = "fla.ops.common.chunk_o"     # where the #640 guard lives (chunk_bwd_dqkwg)


def emulation_off() -> set[str]:
    import os
    return {w.strip() for w in os.environ.get(EMULATE_OFF_ENV, "").split(",") if w.strip()}


class _H200Driver:
    """triton.runtime.driver.active as an H200's driver answers get_device_properties; anything else raises as
    a CPU's does (no other device question is emulated)."""

    class utils:
        @staticmethod
        def get_device_properties(device=None):
            return {"multiprocessor_count": H200_SM_COUNT, "max_shared_mem": H200_MAX_SHARED_MEM}

    def __getattr__(self, name):
        raise RuntimeError(f"0 active drivers: triton.runtime.driver.active.{name} is not emulated (only "
                           "get_device_properties is)")


class _Delegate:
    """A view of a module with some attributes replaced (the rest read through)."""

    def __init__(self, wrapped, **replaced):
        self._wrapped, self._replaced = wrapped, replaced

    def __getattr__(self, name):
        return self._replaced[name] if name in self._replaced else getattr(self._wrapped, name)


def sm_count_module():
    """(the module whose globals get_multiprocessor_count reads, the function), or (None, None) in a tree that
    has none (before d6380a04, 2025-02-24: callers asked torch.cuda.get_device_properties themselves)."""
    import sys
    utils = importlib.import_module("fla.utils")
    fn = getattr(utils, "get_multiprocessor_count", None)
    if fn is None:
        return None, None
    return sys.modules.get(inspect.unwrap(fn).__module__), fn


def _answer_sm_count() -> str:
    hw, fn = sm_count_module()
    if fn is None or not hasattr(fn, "cache_clear"):
        return "not emulated: fla.utils has no cached get_multiprocessor_count (before 2025-02-24 the norms asked " \
               "torch.cuda.get_device_properties at call time)"
    driver = _Delegate(hw.triton.runtime.driver, active=_H200Driver())
    hw.triton = _Delegate(hw.triton, runtime=_Delegate(hw.triton.runtime, driver=driver))
    fn.cache_clear()
    return f"{H200_SM_COUNT} SMs ({hw.__name__}.get_multiprocessor_count)"


def _answer_flag(part: str) -> str:
    """Set the tree's module constant (upper- or lower-case, where it is defined and where fla.utils re-exports
    it) to the H200's True."""
    import sys
    utils = importlib.import_module("fla.utils")
    done = []
    for module in {m for m in (utils, *[sys.modules[n] for n in list(sys.modules) if n.startswith("fla.utils.")])
                   if m is not None}:
        for name in _FLAGS[part]:
            if name in vars(module):
                setattr(module, name, True)
                done.append(f"{module.__name__}.{name}")
    return f"True ({', '.join(sorted(done))})" if done else f"not emulated: this fla defines no {' / '.join(_FLAGS[part])}"


def guard_condition(module) -> tuple[str, ...]:
    """The version flags of fla's #640 guard in chunk_o, as the module reads them (names it defines)."""
    return tuple(n for n in ("TRITON_ABOVE_3_4_0", "TRITON_ABOVE_3_7_1") if n in vars(module))


def _lift_guard(module) -> None:
    """chunk_o's guard raises when IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1 (HEAD,
    0.6.0; no upper bound in v0.5.0 .. v0.5.1): answered for this module alone as a Triton without the defect."""
    if "TRITON_ABOVE_3_7_1" in vars(module):
        module.TRITON_ABOVE_3_7_1 = True
    elif "TRITON_ABOVE_3_4_0" in vars(module):
        module.TRITON_ABOVE_3_4_0 = False


def emulate_h200_device() -> dict[str, str]:
    """Answer the device questions of DEVICE_ANSWERS as an H200 (before any fla.ops module is imported; run after
    emulate_h200_tiles); returns part -> what was done or "not emulated: why" (the results'
    interpreter_fidelity.device_emulation; the env.interpreter.device canaries read each back from the tree)."""
    from pathmdn_verify.kernels.fla_import import after_import
    off = emulation_off()
    done = {}
    for part in DEVICE_ANSWERS:
        if part in off:
            done[part] = f"not emulated: {EMULATE_OFF_ENV} names it"
        elif part == "sm_count":
            done[part] = _answer_sm_count()
        elif part in _FLAGS:
            done[part] = _answer_flag(part)
        else:
            after_import(GUARDED, _lift_guard)
            done[part] = f"lifted in {GUARDED} once imported"
    return done


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


# ------------------------------------------------------------------------------------------- PaTH

PATH_CONVENTIONS = Conventions(
    scale_default="1/sqrt(D)",
    gate_scaled=True,
    head_dims=(16, 32, 64, 128),
    dtypes=("bf16", "fp32"),
    varlen=True,
    notes="w and beta must be fp32, g fp32; w is used as given (not re-normalised); the log forget gate "
          "is multiplied by the attention scale together with the path logit: softmax(scale*(A~ + gate)), "
          "unlike the paper's softmax(A~ + gate) (with scale folded into q).  Measured on " + MEASURED_ON
          + "; the entry point's signature and tiles (BS 64 / BT 128 on an H200) read the same in "
          + MEASURED_ON_HISTORY + " (absent from the MDN fork)",
)
PATH_NAMES = ("parallel_path_attn", "parallel_path_attention")   # renamed 2025-09-02 (3d70f7de, first in v0.3.2)
PATH_REQUIRED = ("q", "k", "v", "w", "beta", "g", "scale", "cu_seqlens", "use_cache")


def _path_entry():
    """fla names the PaTH entry point parallel_path_attn since 2025-09 (3d70f7de), parallel_path_attention before."""
    return _entry("fla.ops.path_attn", PATH_NAMES, PATH_REQUIRED)


def _path(q, k, v, w, beta, g, scale, cu_seqlens, use_cache):
    out = _call(_path_entry(), q=q, k=k, v=v, w=w, beta=beta, g=g, scale=scale, cu_seqlens=cu_seqlens,
                use_cache=use_cache)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"the PaTH entry point returned {type(out).__name__}, not (o, k_cache)")
    return out


@functools.cache
def path_takes_fp32_w() -> bool:
    """Whether this fla's PaTH takes w and beta in fp32 (its entry point asserts it: from 721a205a, 2025-10-03, "the
    NaN fix"; first in v0.4.0), or, before it, in q's dtype (its layer passed them so; given fp32 with bf16 q, its
    kernels meet a tl.dot of a bf16 and an fp32 operand, which every Triton from 3.1 to 3.6 refuses, compiled or
    interpreted).  Read off the entry point's source."""
    source = inspect.getsource(inspect.unwrap(_path_entry()))
    return re.search(r"assert\s+w\.dtype\s*==\s*beta\.dtype\s*==\s*torch\.float32", source) is not None


def path_inputs_as_taken(x: dict) -> dict:
    """The canonical PaTH inputs (w, beta in fp32) as this fla takes them: w and beta rounded to q's dtype where
    the tree takes them so (path_takes_fp32_w), before the kernel, the oracle or the budget's implementation
    sees them."""
    if path_takes_fp32_w() or x["q"].dtype == torch.float32:
        return x
    return {**x, "w": x["w"].to(x["q"].dtype), "beta": x["beta"].to(x["q"].dtype)}


def path_attn(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None):
    """fla.ops.path_attn.parallel_path_attn -> o [B, T, HQ, Dv]."""
    return _path(q, k, v, w, beta, g, scale, cu_seqlens, use_cache=False)[0]


def path_attn_cache(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None):
    """The decode cache of parallel_path_attn(use_cache=True): keys after every later Householder
    update, row j = H_T ... H_{j+1} k_j (measured: equals the oracle's decode_keys)."""
    return _path(q, k, v, w, beta, g, scale, cu_seqlens, use_cache=True)[1]


# -------------------------------------------------------------------------------------------- FoX

FOX_CONVENTIONS = Conventions(
    scale_default="1/sqrt(D)",
    gate_scaled=False,
    head_dims=(16, 32, 64, 128),
    dtypes=("bf16", "fp32"),
    varlen=True,
    notes="g (log forget gate) is added to the scaled logit, as in the FoX paper.  Measured on " + MEASURED_ON
          + "; the entry point reads the same in " + MEASURED_ON_HISTORY + " (window_size inserted before "
          "cu_seqlens in 0.5.0: every argument is passed by keyword; absent from the MDN fork)",
)
FOX_REQUIRED = ("q", "k", "v", "g", "scale", "cu_seqlens")


def fox_entry():
    return _entry("fla.ops.forgetting_attn", ("parallel_forgetting_attn",), FOX_REQUIRED)


def forgetting_attn(q, k, v, g, scale=None, cu_seqlens=None):
    """fla.ops.forgetting_attn.parallel_forgetting_attn -> o [B, T, HQ, Dv]."""
    return _call(fox_entry(), q=q, k=k, v=v, g=g, scale=scale, cu_seqlens=cu_seqlens)


# -------------------------------------------------------------------------------------------- MDN

MDN_CONVENTIONS = Conventions(
    scale_default="1/sqrt(Dk)",
    dtypes=("bf16",),
    varlen=False,
    chunk_sizes=(16, 32, 64),
    residual="p_t = alpha_t k_t (use_p_times_alpha=True, p defaults to k); rounded to the input dtype",
    eta_placement="k^_t = eta_t k_t, rounded to the input dtype before use",
    final_state="(S_T, M_T) stacked; for T not a multiple of the chunk, fla recomputes it by the recurrence",
    notes="q, k used as given (use_qk_l2norm_in_kernel=False); the chunk path refuses fp32 inputs.  Measured on "
          + MEASURED_ON + " and " + MEASURED_ON_FORK + " (chunk fixed at 64 there); no upstream tag before 0.6.0 "
          "has fla.ops.momentum_delta_rule (its checks skip as unsupported)",
)
MDN_RECURRENT_CONVENTIONS = Conventions(
    scale_default="1/sqrt(Dk)", dtypes=("bf16", "fp32"), varlen=False,
    residual=MDN_CONVENTIONS.residual, eta_placement=MDN_CONVENTIONS.eta_placement,
    final_state="(S_T, M_T) stacked", notes="q, k used as given (use_qk_l2norm_in_kernel=False).  Measured on "
    + MEASURED_ON + " and " + MEASURED_ON_FORK)
MDN_REQUIRED = ("q", "k", "v", "log_alpha", "log_mu", "p", "beta", "eta", "scale", "initial_state",
                "output_final_state", "use_qk_l2norm_in_kernel", "use_p_times_alpha")


def _mdn_entry(kind: str):
    """fla-core names the entry points *_momentum_delta_rule; the authors' fork *_mode_rule."""
    return _entry("fla.ops.momentum_delta_rule", (f"{kind}_momentum_delta_rule", f"{kind}_mode_rule"), MDN_REQUIRED)


# The MDN authors' chunk_mode_rule takes no chunk_size: its chunk is fixed at 64 (chunk.py asserts it).
FORK_FIXED_CHUNK = 64


def _accepts(fn, name: str) -> bool:
    """fn takes the keyword `name`: a parameter it names, or one its body reads out of **kwargs (a **kwargs
    alone does not count: old trees' swallow unknown keywords silently)."""
    return name in _named_parameters(fn) or _reads_from_kwargs(fn, name)


def mdn(q, k, v, log_alpha, log_mu, beta, eta, p=None, scale=None, S0=None, M0=None, chunk=None):
    """chunk (chunk=16|32|64) or fused recurrent (chunk=None) MDN -> (o, S_T, M_T) (S_T, M_T None where an option
    probe leaves output_final_state out).  A chunk size the
    package's entry point does not take (the authors' fork: fixed at 64) is VariantUnsupported."""
    init = None if S0 is None else (S0, M0)
    kwargs = dict(p=p, beta=beta, eta=eta, scale=scale, initial_state=init, output_final_state=True,
                  use_qk_l2norm_in_kernel=False, use_p_times_alpha=p is None)
    fn = _mdn_entry("fused_recurrent" if chunk is None else "chunk")
    if chunk is not None and _accepts(fn, "chunk_size"):
        kwargs["chunk_size"] = chunk
    elif chunk not in (None, FORK_FIXED_CHUNK):
        raise VariantUnsupported(f"{fn.__module__}.{fn.__name__} takes no chunk_size (its chunk is fixed at "
                                 f"{FORK_FIXED_CHUNK}): chunk {chunk} is not offered")
    if "chunk_size" in kwargs and "chunk_size" not in _named_parameters(fn):
        o, state = _call(functools.partial(fn, chunk_size=chunk), q=q, k=k, v=v, log_alpha=log_alpha,
                         log_mu=log_mu, **{n: a for n, a in kwargs.items() if n != "chunk_size"})
    else:
        o, state = _call(fn, q=q, k=k, v=v, log_alpha=log_alpha, log_mu=log_mu, **kwargs)
    return (o, None, None) if state is None else (o, state[0], state[1])


# ------------------------------------------------------------------------------------- Gated DeltaNet

GDN_CONVENTIONS = Conventions(
    scale_default="1/sqrt(K)", dtypes=("bf16", "fp32"), varlen=True, chunk_sizes=(64,),
    residual="S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T: MDN with mu = 0, p = alpha k, eta = 1",
    final_state="S_T [N, H, K, V] per sequence (state_v_first=False)",
    notes="g = log alpha (natural log); beta used as given (use_beta_sigmoid_in_kernel=False; the docstring asks "
          "for post-sigmoid values, allow_neg_eigval's domain is [0, 2)); q, k used as given "
          "(use_qk_l2norm_in_kernel=False); with v, g, beta of HV = G H heads (grouped value attention) value head "
          "j reads key head j // G; the fused recurrent path has no backward (it raises).  Measured on "
          + MEASURED_ON + "; the keywords passed are named parameters with the same defaults (state layout "
          "[K, V]) in " + MEASURED_ON_HISTORY + " and the MDN fork; the chunk path refuses fp32 up to v0.3.2 "
          "and in the fork (skipped as unsupported there)")
GDN_REQUIRED = ("q", "k", "v", "g", "beta", "scale", "initial_state", "output_final_state",
                "use_qk_l2norm_in_kernel", "cu_seqlens")


@functools.cache
def gdn_takes_grouped_values(chunk: bool) -> bool:
    """Whether this fla's GDN entry point takes value heads grouped over fewer key heads (v, g, beta with HV > H
    heads): its module names HV (the chunk path from 8bcc1057, 2026-04-05, "native GVA"; the fused recurrent one
    earlier).  Read off the module's source, so that a tree without it is `unsupported` there, never failed."""
    fn = gdn_entry(chunk)
    source = Path(inspect.getsourcefile(inspect.unwrap(fn))).read_text()
    return re.search(r"\bHV\b", source) is not None


def gdn_unsupported(chunk: bool):
    """The fla record's capability check: a case with grouped value heads where the tree has none."""
    def unsupported(x: dict) -> str | None:
        if x["v"].shape[2] != x["k"].shape[2] and not gdn_takes_grouped_values(chunk):
            return (f"this fla's {'chunk' if chunk else 'fused recurrent'} gated delta rule has no grouped value "
                    "heads (HV > H; the chunk path has them from 8bcc1057, 2026-04-05)")
        return None
    return unsupported


def gdn_entry(chunk: bool):
    name = "chunk_gated_delta_rule" if chunk else "fused_recurrent_gated_delta_rule"
    return _entry("fla.ops.gated_delta_rule", (name,), GDN_REQUIRED)


def gdn_chunk_backward_refusal() -> RuntimeError | None:
    """fla's own refusal of the gated chunk backward (chunk_bwd_dqkwg in fla.ops.common.chunk_o; issue #640 of fla),
    decided before any launch by fla's condition: IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1
    (that module's flags), with no backend of fla's 'common' registry enabled to take the call instead (tilelang).
    The exception is the one fla's function raises, from fla's code (its guard is its first statement and reads no
    tensor).  None where fla would run the backward, or a tree without that guard (fla decides as it runs)."""
    try:
        chunk_o = importlib.import_module("fla.ops.common.chunk_o")
        hopper, above_340, above_371 = (getattr(chunk_o, n) for n in
                                        ("IS_NVIDIA_HOPPER", "TRITON_ABOVE_3_4_0", "TRITON_ABOVE_3_7_1"))
        backends = importlib.import_module("fla.backends")
        taken = (not getattr(backends, "_DISPATCH_DISABLED", False)
                 and backends._load_operation_registry("common").get_active() is not None)
        guard = inspect.unwrap(chunk_o.chunk_bwd_dqkwg)
    except (ImportError, AttributeError):
        return None
    if not (hopper and above_340 and not above_371) or taken:
        return None
    try:
        guard(None, None, None, None, None, None, g=torch.zeros(()))
    except RuntimeError as exc:
        return exc
    except Exception:           # noqa: BLE001  the guard is gone: fla decides as it runs
        return None
    return None


def _differentiated(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def gated_delta_rule(q, k, v, g=None, beta=None, S0=None, output_final_state=None, cu_seqlens=None, scale=None,
                     chunk=True):
    """fla.ops.gated_delta_rule: chunk_gated_delta_rule (chunk=True) or fused_recurrent_gated_delta_rule
    -> (o [B, T, H, V], S_T [N, H, K, V], or None where output_final_state is False: the canonical call returns S_T
    unless told not to, as it always did).  g and beta left out (None) are passed as None: the fused recurrent
    kernel's no decay and beta = 1; the chunk path requires both.  A gated chunk call that will be differentiated
    raises fla's own refusal of its backward before anything launches (gdn_chunk_backward_refusal), where fla
    would raise it after compiling and running the forward and chunk_bwd_dv_local."""
    refusal = gdn_chunk_backward_refusal() if chunk and g is not None and _differentiated(q, k, v, g, beta, S0) \
        else None
    if refusal is not None:
        raise refusal
    return _call(gdn_entry(chunk), q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=S0,
                 output_final_state=output_final_state is not False, use_qk_l2norm_in_kernel=False,
                 cu_seqlens=None if cu_seqlens is None else cu_seqlens.long())


# --------------------------------------------------------------------------------------------- fla's modules
# The short convolution and the norms the layers call (fla/modules).  0.6.0 keeps them in fla/modules/causal_conv1d
# and fla/modules/norm/; fla.modules registers the older module names (convolution, fused_norm_gate, l2norm,
# layernorm) as aliases, which every tree since 2025 has, so the adapters import those.  An option a canonical call
# leaves out (None) is not passed: the entry point's own default applies.

SHORT_CONV_CONVENTIONS = Conventions(
    scale_default="none (no attention scale)", dtypes=("bf16", "fp32"), varlen=True,
    final_state="S_T [N, D, W]: slot j holds token T - W + j of the sequence (the initial state's slots before it)",
    notes="y_t = act(sum_i weight[:, i] x_{t-W+1+i} + bias) + residual_t: weight's last column multiplies the current "
          "token; the initial state [N, D, W] holds the W tokens before the sequence, oldest first (slot 0 is never "
          "read); activation None or silu / swish, applied before the residual.  backend 'triton' (the default; the "
          "CUDA and mix backends need the causal-conv1d package).  Measured on " + MEASURED_ON)
SHORT_CONV_REQUIRED = ("x", "weight", "bias", "residual", "initial_state", "output_final_state", "activation",
                       "cu_seqlens")


def short_conv_entry():
    return _entry("fla.modules.convolution", ("causal_conv1d",), SHORT_CONV_REQUIRED)


def short_conv(x, weight, bias=None, residual=None, S0=None, output_final_state=None, activation=None,
               cu_seqlens=None):
    """fla.modules causal_conv1d -> (y [B, T, D], S_T [N, D, W] or None when output_final_state is left out)."""
    return _call(short_conv_entry(), x=x, weight=weight, bias=bias, residual=residual, initial_state=S0,
                 cu_seqlens=None if cu_seqlens is None else cu_seqlens.long(),
                 **_given(output_final_state=output_final_state, activation=activation))


def short_conv_update_entry():
    return _entry("fla.modules.convolution", ("causal_conv1d_update",),
                  ("x", "cache", "residual", "weight", "bias", "activation"))


UPDATE_LAYOUTS = ("N1D", "1ND", "ND")     # x of N one-token sequences as [N, 1, D], [1, N, D] (packed) or [N, D]


def short_conv_update(x, cache, weight, bias=None, residual=None, activation=None, layout=None):
    """fla.modules causal_conv1d_update: one token of each of N sequences, x [N, 1, D] (given to fla in `layout`:
    None or "N1D" as it is, "1ND" packed, "ND" flat) and its cache [N, D, W] -> (y [N, 1, D], the cache after the
    step [N, D, W]).  fla updates the cache in place: a copy is given, the caller's inputs stay as they were."""
    N, _, D = x.shape
    shaped = {None: lambda t: t, "N1D": lambda t: t, "1ND": lambda t: t.reshape(1, N, D), "ND": lambda t: t.reshape(N, D)}
    y, after = _call(short_conv_update_entry(), x=shaped[layout](x), cache=cache.clone(), weight=weight, bias=bias,
                     residual=None if residual is None else shaped[layout](residual), **_given(activation=activation))
    return y.reshape(N, 1, D), after


NORM_CONVENTIONS = Conventions(
    scale_default="none (no attention scale)", dtypes=("bf16", "fp32"),
    notes="rows of the last dim normalised: rms y = r / sqrt(mean(r^2) + eps) (layer norm: r - mean(r) over "
          "sqrt(var + eps)), r = x + residual; then * weight + bias; the gated norms multiply by swish(g) (activation "
          "'swish' / 'silu', the default) or sigmoid(g); prenorm also returns r, in residual's dtype (fp32 with "
          "residual_in_fp32).  eps defaults: 1e-6 gated, 1e-5 group norm; l2norm y = x / sqrt(sum(x^2) + eps), "
          "eps 1e-6.  Group norm: group g normalises channels g D .. (g + 1) D - 1 of the last dim.  Measured on "
          + MEASURED_ON)


def _norm_entry(module: str, name: str, required: tuple[str, ...]):
    return _entry(module, (name,), required)


def rms_norm_gated_entry():
    return _norm_entry("fla.modules.fused_norm_gate", "rms_norm_gated",
                       ("x", "g", "weight", "bias", "activation", "residual", "prenorm", "residual_in_fp32", "eps"))


def _with_residual_out(out, prenorm) -> tuple:
    """(output, r) with prenorm, (output, None) without: the norms' canonical outputs."""
    return tuple(out) if prenorm else (out, None)


def rms_norm_gated(x, g, weight=None, bias=None, activation=None, residual=None, prenorm=None, residual_in_fp32=None,
                   eps=None):
    """fla.modules rms_norm_gated -> (y, r = x + residual when prenorm, else None)."""
    out = _call(rms_norm_gated_entry(), x=x, g=g, weight=weight, bias=bias, residual=residual,
                **_given(activation=activation, prenorm=prenorm, residual_in_fp32=residual_in_fp32, eps=eps))
    return _with_residual_out(out, prenorm)


def rms_norm_gate_linear_entry():
    return _norm_entry("fla.modules.fused_norm_gate", "rms_norm_swish_gate_linear",
                       ("x", "g", "norm_weight", "norm_bias", "linear_weight", "linear_bias", "residual", "prenorm",
                        "residual_in_fp32", "eps"))


def rms_norm_gate_linear(x, g, norm_weight, linear_weight, norm_bias=None, linear_bias=None, residual=None,
                         prenorm=None, residual_in_fp32=None, eps=None):
    """fla.modules rms_norm_swish_gate_linear -> (linear(rms_norm(x) * swish(g)), r when prenorm, else None)."""
    out = _call(rms_norm_gate_linear_entry(), x=x, g=g, norm_weight=norm_weight, norm_bias=norm_bias,
                linear_weight=linear_weight, linear_bias=linear_bias, residual=residual,
                **_given(prenorm=prenorm, residual_in_fp32=residual_in_fp32, eps=eps))
    return _with_residual_out(out, prenorm)


def l2norm_entry():
    return _norm_entry("fla.modules.l2norm", "l2norm", ("x", "eps", "output_dtype"))


OUTPUT_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def l2norm(x, eps=None, output_dtype=None):
    """fla.modules l2norm -> y = x / sqrt(sum(x^2) + eps) (in output_dtype, "fp32" or "bf16", when given)."""
    return _call(l2norm_entry(), x=x, **_given(eps=eps, output_dtype=OUTPUT_DTYPES.get(output_dtype)))


def group_norm_entry():
    return _norm_entry("fla.modules.layernorm", "group_norm",
                       ("x", "weight", "bias", "residual", "eps", "prenorm", "residual_in_fp32", "is_rms_norm",
                        "num_groups"))


def group_norm(x, weight=None, bias=None, residual=None, eps=None, prenorm=None, residual_in_fp32=None,
               is_rms_norm=None, num_groups=None):
    """fla.modules group_norm -> (y, r = x + residual when prenorm, else None)."""
    out = _call(group_norm_entry(), x=x, weight=weight, bias=bias, residual=residual,
                **_given(eps=eps, prenorm=prenorm, residual_in_fp32=residual_in_fp32, is_rms_norm=is_rms_norm,
                         num_groups=num_groups))
    return _with_residual_out(out, prenorm)
