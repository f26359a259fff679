"""Planted bugs: source patches applied to a temporary copy of the kernel package (fla), which the checks
then verify through --kernel-root in a fresh subprocess.  A mutant is killed when one of its checks fails.

Each mutant is one real kind of mistake in these kernels, registered once here; adding one is a few lines.
A patch whose target text is not found exactly `count` times raises: the mutant is out of date, which is
an error, never a silent survivor.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    path: str                    # file inside the fla package, e.g. "ops/path_attn/parallel_path_fwd.py"
    old: str
    new: str
    killers: tuple[str, ...]     # check ids expected to turn red
    count: int = 1               # occurrences of `old` the patch replaces


MUTANTS = {m.name: m for m in [
    Mutant("path_zero_mask", "PaTH forward: a zero causal mask instead of -inf inside the diagonal block",
           "ops/path_attn/parallel_path_fwd.py",
           'b_s = tl.where(m_s[:, None], b_s * sm_scale, float("-inf"))',
           "b_s = tl.where(m_s[:, None], b_s * sm_scale, 0.0)",
           ("kernel.fla.path_attn.fwd.bf16.beta_uniform",)),
    Mutant("path_beta_clipped", "PaTH: beta clipped below 2 (no exact reflections)",
           "ops/path_attn/parallel.py",
           "o, k_cache = ParallelPATHAttentionFunction.apply(q, k, v, w, beta, g, scale, cu_seqlens, use_cache)",
           "o, k_cache = ParallelPATHAttentionFunction.apply(q, k, v, w, beta.clamp(max=1.99), g, scale, "
           "cu_seqlens, use_cache)",
           ("kernel.fla.path_attn.state_tracking.fp32", "kernel.fla.path_attn.fwd.fp32.beta_two")),
    Mutant("fox_gate_dropped_offdiag", "FoX: the forget gate dropped from the off-diagonal key blocks (forward and backward)",
           "ops/attn/parallel.py",
           "            b_s += b_gq[:, None] - b_gk[None, :]\n\n        if USE_WINDOW:",
           "            pass\n\n        if USE_WINDOW:",
           ("kernel.fla.forgetting_attn.fwd.fp32.gate_strong",), count=2),
    Mutant("mdn_b_noncumulative", "MDN chunk: b_i = alpha_i c_i (non-cumulative alpha) instead of abar_i c_i",
           "ops/momentum_delta_rule/naive.py",
           "b_t = (log_a_cum + log_ct).exp()",
           "b_t = (log_alpha.squeeze(-1) + log_ct).exp()",
           ("kernel.fla.mdn_chunk16.fwd.bf16.initial_state",)),
]}


def fla_package_dir() -> Path:
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        raise RuntimeError("the fla package (fla-core) is not installed")
    return Path(spec.origin).parent


def materialize(mutant: Mutant, dest: Path, source: Path | None = None) -> Path:
    """Copy the fla package into dest/fla with the mutant's patch applied; returns dest (a kernel root)."""
    source = source or fla_package_dir()
    shutil.copytree(source, dest / "fla", ignore=shutil.ignore_patterns("__pycache__"))
    target = dest / "fla" / mutant.path
    text = target.read_text()
    found = text.count(mutant.old)
    if found != mutant.count:
        raise RuntimeError(f"mutant {mutant.name}: expected {mutant.count} occurrence(s) of its target in "
                           f"{mutant.path}, found {found}; the kernel source changed, update the mutant")
    target.write_text(text.replace(mutant.old, mutant.new))
    return dest


def run_checks(kernel_root: Path | None, ids: tuple[str, ...], profile: str = "quick", seed: int = 0,
               extra: tuple[str, ...] = ()) -> tuple[int, dict]:
    """Run `verify all --id ...` in a fresh interpreter; returns (exit status, JSON document)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, "-m", "verify", "all", "--device", "cpu", "--profile", profile,
               "--seed", str(seed), "--json", str(out), *extra]
        for i in ids:
            cmd += ["--id", i]
        if kernel_root is not None:
            cmd += ["--kernel-root", str(kernel_root)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
        doc = json.loads(out.read_text()) if out.exists() else {}
    if not doc:
        raise RuntimeError(f"verify exited {proc.returncode} without results:\n{proc.stderr[-2000:]}")
    return proc.returncode, doc
