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

import importlib
import importlib.util
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

# fla versions these adapters were written and measured against: fla-core 0.6.0, and the MDN paper
# authors' fork (HuuYuLong/MomentumDeltaNet, whose fla/__init__.py says 0.3.2).
SUPPORTED_FLA = ("0.6.0", "0.3.2")


@dataclass(frozen=True)
class Conventions:
    scale_default: str                 # what scale=None means
    gate_scaled: bool | None = None    # True: softmax(scale * (logit + gate)); False: scale * logit + gate
    head_dims: tuple[int, ...] = ()    # supported D (and Dv)
    dtypes: tuple[str, ...] = ()       # input dtypes q, k, v may have
    varlen: bool = False               # cu_seqlens supported
    chunk_sizes: tuple[int, ...] = ()  # MDN chunk sizes
    residual: str = ""                 # MDN: what multiplies S_{t-1} in v~_t
    eta_placement: str = ""            # MDN: where eta enters
    final_state: str = ""              # MDN: final-state semantics
    notes: str = ""


class KernelUnavailable(RuntimeError):
    """The kernel package or entry point cannot be used here (the CLI reports it with exit status 2)."""


class VariantUnsupported(RuntimeError):
    """The kernel package does not offer this variant (a chunk size, a backward, an argument): the check is
    skipped with kind "unsupported" and the reason, never failed."""


def check_fla_version() -> str:
    """The version of the fla that `import fla` would load, read from its fla/__init__.py without importing
    it (a --kernel-root checkout has no installed metadata); KernelUnavailable if fla is missing or the
    version is not one of SUPPORTED_FLA."""
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        raise KernelUnavailable("the kernel package fla is not importable: install fla-core==0.6.0 or give --kernel-root")
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", Path(spec.origin).read_text(), re.M)
    version = found.group(1) if found else "without __version__"
    if version not in SUPPORTED_FLA:
        raise KernelUnavailable(f"fla {version} at {Path(spec.origin).parent}: the adapters support fla "
                                f"{' or '.join(SUPPORTED_FLA)}")
    return version


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


def _import(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise KernelUnavailable(f"cannot import {module}: {exc}") from exc


# ------------------------------------------------------------------------------ the H200's tiles on a CPU

H200_MAX_SHARED_MEM = 232448       # bytes per block, what triton reports for an H200


def emulate_h200_tiles() -> str:
    """Make fla choose the tile sizes it chooses on an H200; returns what was done, for the results.  fla
    asks the driver for the shared memory per block (fla.utils.hardware.get_all_max_shared_mem); without a
    GPU it gets -1 and falls back to smaller tiles (PaTH: BT 64 / BS 32 instead of 128 / 64), which changes
    the rounding: measured, the state-tracking construction at n = 256 failed on the H200 and passed on the
    CPU until the CPU used the H200's tiles.  Shared-memory limits themselves are not emulated (the
    interpreter has none).  Call it after the interpreter fidelity layer is on (verify.fidelity)."""
    hw = importlib.import_module("fla.utils.hardware" if _has_module("fla.utils.hardware") else "fla.utils")
    if hasattr(hw, "get_all_max_shared_mem") and hasattr(getattr(hw, "check_shared_mem", None), "cache_clear"):
        hw.get_all_max_shared_mem = lambda: [H200_MAX_SHARED_MEM]
        hw.check_shared_mem.cache_clear()
        return f"H200 (max_shared_mem {H200_MAX_SHARED_MEM})"
    # an older fla or a fork without this query: say so in the results, do not guess
    return f"not emulated: {hw.__name__} has no get_all_max_shared_mem / cached check_shared_mem"


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
          "unlike the paper's softmax(A~ + gate) (with scale folded into q)",
)


def _path_entry():
    """fla names the PaTH entry point parallel_path_attn since 2025-09 (3d70f7de), parallel_path_attention before."""
    mod = _import("fla.ops.path_attn")
    for name in ("parallel_path_attn", "parallel_path_attention"):
        if hasattr(mod, name):
            return getattr(mod, name)
    raise KernelUnavailable(f"fla.ops.path_attn ({mod.__file__}) has neither parallel_path_attn nor "
                            "parallel_path_attention")


def path_attn(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None):
    """fla.ops.path_attn.parallel_path_attn -> o [B, T, HQ, Dv]."""
    o, _ = _path_entry()(q, k, v, w, beta, g, scale, cu_seqlens, use_cache=False)
    return o


def path_attn_cache(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None):
    """The decode cache of parallel_path_attn(use_cache=True): keys after every later Householder
    update, row j = H_T ... H_{j+1} k_j (measured: equals the oracle's decode_keys)."""
    _, k_cache = _path_entry()(q, k, v, w, beta, g, scale, cu_seqlens, use_cache=True)
    return k_cache


# -------------------------------------------------------------------------------------------- FoX

FOX_CONVENTIONS = Conventions(
    scale_default="1/sqrt(D)",
    gate_scaled=False,
    head_dims=(16, 32, 64, 128),
    dtypes=("bf16", "fp32"),
    varlen=True,
    notes="g (log forget gate) is added to the scaled logit, as in the FoX paper",
)


def forgetting_attn(q, k, v, g, scale=None, cu_seqlens=None):
    """fla.ops.forgetting_attn.parallel_forgetting_attn -> o [B, T, HQ, Dv]."""
    mod = _import("fla.ops.forgetting_attn")
    return mod.parallel_forgetting_attn(q, k, v, g, scale, cu_seqlens=cu_seqlens)


# -------------------------------------------------------------------------------------------- MDN

MDN_CONVENTIONS = Conventions(
    scale_default="1/sqrt(Dk)",
    dtypes=("bf16",),
    varlen=False,
    chunk_sizes=(16, 32, 64),
    residual="p_t = alpha_t k_t (use_p_times_alpha=True, p defaults to k); rounded to the input dtype",
    eta_placement="k^_t = eta_t k_t, rounded to the input dtype before use",
    final_state="(S_T, M_T) stacked; for T not a multiple of the chunk, fla recomputes it by the recurrence",
    notes="q, k used as given (use_qk_l2norm_in_kernel=False); the chunk path refuses fp32 inputs",
)
MDN_RECURRENT_CONVENTIONS = Conventions(
    scale_default="1/sqrt(Dk)", dtypes=("bf16", "fp32"), varlen=False,
    residual=MDN_CONVENTIONS.residual, eta_placement=MDN_CONVENTIONS.eta_placement,
    final_state="(S_T, M_T) stacked", notes="q, k used as given (use_qk_l2norm_in_kernel=False)")


def _mdn_entry(kind: str):
    """fla-core names the entry points *_momentum_delta_rule; the authors' fork *_mode_rule."""
    mod = _import("fla.ops.momentum_delta_rule")
    for name in (f"{kind}_momentum_delta_rule", f"{kind}_mode_rule"):
        if hasattr(mod, name):
            return getattr(mod, name)
    raise KernelUnavailable(f"fla.ops.momentum_delta_rule ({mod.__file__}) has neither {kind}_momentum_delta_rule "
                     f"nor {kind}_mode_rule")


# The MDN authors' chunk_mode_rule takes no chunk_size: its chunk is fixed at 64 (chunk.py asserts it).
FORK_FIXED_CHUNK = 64


def _accepts(fn, name: str) -> bool:
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def mdn(q, k, v, log_alpha, log_mu, beta, eta, p=None, scale=None, S0=None, M0=None, chunk=None):
    """chunk (chunk=16|32|64) or fused recurrent (chunk=None) MDN -> (o, S_T, M_T).  A chunk size the
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
    o, state = fn(q, k, v, log_alpha, log_mu, **kwargs)
    return o, state[0], state[1]


# ------------------------------------------------------------------------------------- Gated DeltaNet

GDN_CONVENTIONS = Conventions(
    scale_default="1/sqrt(K)", dtypes=("bf16", "fp32"), varlen=True, chunk_sizes=(64,),
    residual="S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T: MDN with mu = 0, p = alpha k, eta = 1",
    final_state="S_T [N, H, K, V] per sequence (state_v_first=False)",
    notes="g = log alpha (natural log); beta used as given (use_beta_sigmoid_in_kernel=False; the docstring asks "
          "for post-sigmoid values, allow_neg_eigval's domain is [0, 2)); q, k used as given "
          "(use_qk_l2norm_in_kernel=False); the fused recurrent path has no backward (it raises)")


def gated_delta_rule(q, k, v, g, beta, S0=None, cu_seqlens=None, scale=None, chunk=True):
    """fla.ops.gated_delta_rule: chunk_gated_delta_rule (chunk=True) or fused_recurrent_gated_delta_rule
    -> (o [B, T, H, V], S_T [N, H, K, V])."""
    mod = _import("fla.ops.gated_delta_rule")
    fn = mod.chunk_gated_delta_rule if chunk else mod.fused_recurrent_gated_delta_rule
    return fn(q, k, v, g=g, beta=beta, scale=scale, initial_state=S0, output_final_state=True,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None if cu_seqlens is None else cu_seqlens.long())
