"""Planted bugs: source patches applied to a temporary copy of the kernel package (fla), which the checks
then verify through --kernel-root in a fresh subprocess.  A mutant is killed when one of its checks fails.

Each mutant is one real kind of mistake in these kernels, registered once here; adding one is a few lines.
A patch whose target text is not found exactly `count` times raises: the mutant is out of date, which is
an error, never a silent survivor.  Killers are checks that take seconds at the quick and ci profiles and
are green on the unmodified kernels; the mutant.* checks (verify/checks/mutants.py) run them, and
`verify mutants` prints which one killed each mutant.  A bug that hides while K == V needs a case with
D != Dv: the PaTH and FoX convention checks use D = 16, Dv = 32.
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

    @property
    def ops(self) -> set[str]:
        """The kernel ops (verify.ops.OPS names) whose checks kill this mutant."""
        return {k.split(".")[2] for k in self.killers}


PATH_FWD, PATH_PRE, PATH_API = ("ops/path_attn/parallel_path_fwd.py", "ops/path_attn/intra_chunk_preprocess_fwd.py",
                                "ops/path_attn/parallel.py")
FOX, MDN = "ops/attn/parallel.py", "ops/momentum_delta_rule/naive.py"

MUTANTS = {m.name: m for m in [
    # PaTH (Triton)
    Mutant("path_zero_mask", "PaTH forward: a zero causal mask instead of -inf inside the diagonal block", PATH_FWD,
           'b_s = tl.where(m_s[:, None], b_s * sm_scale, float("-inf"))',
           "b_s = tl.where(m_s[:, None], b_s * sm_scale, 0.0)",
           ("kernel.fla.path_attn.fwd.bf16.beta_uniform",)),
    Mutant("path_beta_clipped", "PaTH: beta clipped below 2 (no exact reflections)", PATH_API,
           "o, k_cache = ParallelPATHAttentionFunction.apply(q, k, v, w, beta, g, scale, cu_seqlens, use_cache)",
           "o, k_cache = ParallelPATHAttentionFunction.apply(q, k, v, w, beta.clamp(max=1.99), g, scale, "
           "cu_seqlens, use_cache)",
           # not state_tracking.fp32: it is a listed failure (xfail), which this mutant cannot turn red
           ("kernel.fla.path_attn.bwd.fp32.beta_two", "kernel.fla.path_attn.fwd.fp32.beta_two")),
    Mutant("path_householder_reversed", "PaTH forward: in-block query transform uses U^T, i.e. the Householder "
           "product in reversed order", PATH_PRE,
           "b_qwT = tl.dot(b_qw, b_T.to(b_q.dtype))", "b_qwT = tl.dot(b_qw, tl.trans(b_T).to(b_q.dtype))",
           ("kernel.fla.path_attn.fwd.fp32.beta_uniform",)),
    Mutant("path_transition_ut_untransposed", "PaTH forward: block transition F_b built from U instead of U^T "
           "(the UT factor without its transpose)", PATH_PRE,
           "b_Twb = tl.dot(b_T, b_w)", "b_Twb = tl.dot(tl.trans(b_T), b_w)",
           ("kernel.fla.path_attn.fwd.fp32.beta_uniform",)),
    Mutant("path_transition_no_identity", "PaTH forward: cross-block transition F_b = -W^T U^T W (the \"I -\" "
           "dropped, as printed in the paper)", PATH_FWD,
           "        b_s2 = tl.dot(b_q.to(b_w1.dtype), b_w1)\n        b_q -= tl.dot(b_s2.to(b_w2.dtype), b_w2)\n\n",
           "        b_s2 = tl.dot(b_q.to(b_w1.dtype), b_w1)\n        b_q = -tl.dot(b_s2.to(b_w2.dtype), b_w2)\n\n",
           ("kernel.fla.path_attn.fwd.fp32.beta_uniform",)),
    Mutant("path_transition_mask_dropped", "PaTH forward: in the diagonal block, the Householders of a key sub-block "
           "also applied to the queries that precede it (mask dropped)", PATH_FWD,
           "        b_s2 = tl.where(m_s[:, None], b_s2, 0)\n", "",
           ("kernel.fla.path_attn.fwd.fp32.beta_uniform",)),
    Mutant("path_gate_unscaled", "PaTH forward: in-block forget gate added after the attention scale (FoX's "
           "convention, not PaTH's declared gate_scaled=True)", PATH_PRE,
           "b_A = b_A + (b_g_cumsum[:, None] - b_g_cumsum[None, :])",
           "b_A = b_A + (b_g_cumsum[:, None] - b_g_cumsum[None, :]) / scale",
           ("kernel.fla.path_attn.convention.gate_scaled",)),
    Mutant("path_gate_cumsum_off_by_one", "PaTH: exclusive instead of inclusive cumsum of the log forget gate "
           "(gate sums over s = j..i-1)", PATH_API,
           "g_cumsum = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, output_dtype=torch.float32) if g is not None",
           "g_cumsum = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, output_dtype=torch.float32) - g if g is not None",
           ("kernel.fla.path_attn.fwd.fp32.gate_strong",)),
    Mutant("path_kv_dims_swapped", "PaTH forward: the in-block output is read with the key head dim K as its row "
           "stride instead of V (hides while K == V)", PATH_FWD,
           "p_o = o + (bos * HQ + i_hq) * V + o_q[:, None] * (HQ*V)",
           "p_o = o + (bos * HQ + i_hq) * K + o_q[:, None] * (HQ*K)",
           ("kernel.fla.path_attn.convention.gate_scaled",)),
    Mutant("path_tail_block_dropped", "PaTH forward: T // BT query blocks instead of cdiv(T, BT): the rows past the "
           "last full block are never computed when T is not a multiple of the block", PATH_FWD,
           "NT = triton.cdiv(T, BT) if cu_seqlens is None", "NT = T // BT if cu_seqlens is None",
           # the unwritten rows are NaN (verify.checks.kernels.prepare), not whatever the allocator reused
           ("kernel.fla.path_attn.fwd.fp32.beta_uniform",)),
    # PaTH stages only the coverage regression cases of verify.ops reach (T > 512 backward, varlen decode)
    Mutant("path_bwd_superblock_query_frame", "PaTH backward: dq against an earlier 512-token super-block's keys "
           "read the queries transformed to the wrong super-block (idx_j for idx_j + 1; runs only for T > 512)",
           "ops/path_attn/parallel_path_bwd_inter_dqh.py", "(bos.to(tl.int64) * NUM_BLOCKS + idx_j + 1) * HQ",
           "(bos.to(tl.int64) * NUM_BLOCKS + idx_j) * HQ", ("kernel.fla.path_attn.bwd.fp32.gate_weak",)),
    Mutant("path_decode_varlen_ignored", "PaTH decode cache: cu_seqlens ignored (one sequence: the keys of a "
           "sequence updated by the next sequence's tokens)", "ops/path_attn/prepare_k_cache.py",
           "'IS_VARLEN': lambda args: args['offsets'] is not None,", "'IS_VARLEN': lambda args: False,",
           ("kernel.fla.path_attn.decode.fp32.beta_uniform",)),
    # FoX (Triton)
    Mutant("fox_gate_dropped_offdiag", "FoX: the forget gate dropped from the off-diagonal key blocks (forward and "
           "backward)", FOX,
           "            b_s += b_gq[:, None] - b_gk[None, :]\n\n        if USE_WINDOW:",
           "            pass\n\n        if USE_WINDOW:",
           ("kernel.fla.forgetting_attn.fwd.fp32.gate_strong",), count=2),
    Mutant("fox_gate_scaled", "FoX: forget gate multiplied by the attention scale in the forward and dq kernels "
           "(against the declared gate_scaled=False)", FOX,
           "b_s += b_gq[:, None] - b_gk[None, :]", "b_s += (b_gq[:, None] - b_gk[None, :]) * scale",
           ("kernel.fla.forgetting_attn.convention.gate_scaled",), count=4),
    Mutant("fox_gate_cumsum_off_by_one", "FoX: exclusive instead of inclusive cumsum of the log forget gate", FOX,
           "g_cumsum = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, scale=RCP_LN2) if g is not None",
           "g_cumsum = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, scale=RCP_LN2) - g * RCP_LN2 if g is not None",
           ("kernel.fla.forgetting_attn.fwd.fp32.gate_strong",)),
    # MDN (PyTorch)
    Mutant("mdn_b_noncumulative", "MDN chunk: b_i = alpha_i c_i (non-cumulative alpha) instead of abar_i c_i", MDN,
           "b_t = (log_a_cum + log_ct).exp()", "b_t = (log_alpha.squeeze(-1) + log_ct).exp()",
           ("kernel.fla.mdn_chunk16.fwd.bf16.initial_state",)),
    Mutant("mdn_gamma_diag_deleted", "MDN chunk: Gamma^- with its diagonal deleted instead of its rows shifted", MDN,
           "gamma_mask = torch.cat(\n        [torch.zeros_like(gamma_mask_q[:, :, :, :1]), gamma_mask_q[:, :, :, :-1]],"
           " dim=3,\n    )",
           "gamma_mask = gamma_mask_q.tril(-1)",
           # the narrowest kill (the error is O(beta eta)): typical alone missed at ci seeds 4 and 5 (0.74x),
           # beta_near_max and eta_near2 caught it at seeds 0-5 (1.39x, 1.18x)
           ("kernel.fla.mdn_chunk16.fwd.bf16.typical", "kernel.fla.mdn_chunk16.fwd.bf16.beta_near_max",
            "kernel.fla.mdn_chunk16.fwd.bf16.eta_near2")),
    Mutant("mdn_mu_cumsum_off_by_one", "MDN chunk: exclusive instead of inclusive cumsum of log mu", MDN,
           "log_m_cum = log_mu.squeeze(-1).cumsum(-1)",
           "log_m_cum = log_mu.squeeze(-1).cumsum(-1) - log_mu.squeeze(-1)",
           # naive.py serves every chunk size: a killer per size (chunk 64's typical regime is a listed failure)
           ("kernel.fla.mdn_chunk16.fwd.bf16.typical", "kernel.fla.mdn_chunk32.fwd.bf16.typical",
            "kernel.fla.mdn_chunk64.convention.scale_default")),
    Mutant("mdn_state_bf16", "MDN recurrent: the state S rounded to bf16 after every step", MDN,
           "M_prev = Mt\n        S_prev = St", "M_prev = Mt\n        S_prev = St.bfloat16().float()",
           ("kernel.fla.mdn_recurrent.fwd.fp32.typical",)),
    Mutant("mdn_final_state_dropped", "MDN: the final state (S_T, M_T) never written (zeros returned)", MDN,
           "final_state = torch.stack([S_prev, M_prev], dim=0)",
           "final_state = torch.zeros_like(torch.stack([S_prev, M_prev], dim=0))",
           ("kernel.fla.mdn_recurrent.fwd.fp32.typical",)),
    # Gated DeltaNet (Triton)
    Mutant("gdn_recurrent_gate_base2", "GDN fused recurrent: the state decayed by 2^g instead of e^g (fla's chunk "
           "kernels work in base 2; the recurrent one takes g = ln alpha)", "ops/gated_delta_rule/fused_recurrent.py",
           "            b_h *= exp(b_g)\n", "            b_h *= tl.exp2(b_g)\n",
           ("kernel.fla.gdn_recurrent.convention.gate_natural_log", "kernel.fla.gdn_recurrent.fwd.fp32.typical")),
    Mutant("gdn_chunk_state_decay_dropped", "GDN chunk: the in-chunk decay of the keys entering the chunk state "
           "dropped", "ops/common/chunk_delta_h.py",
           "b_v = b_v * tl.where(m_t, exp2(b_g_last - b_g), 0)[:, None]", "b_v = b_v * tl.where(m_t, 1.0, 0)[:, None]",
           # bf16: the fp32 checks wait for a TF32 same-dtype implementation (fla's chunk dots are TF32)
           ("kernel.fla.gdn_chunk.fwd.bf16.typical",)),
    Mutant("mdn_explicit_p_times_alpha", "MDN chunk: an explicit p multiplied by alpha as the default p = k is "
           "(use_p_times_alpha ignored)", "ops/momentum_delta_rule/chunk.py",
           "p_eff = p if not use_p_times_alpha else (p * log_alpha.exp().unsqueeze(-1)).to(q.dtype)",
           "p_eff = (p * log_alpha.exp().unsqueeze(-1)).to(q.dtype)",
           ("kernel.fla.mdn_chunk16.fwd.bf16.typical",)),
    Mutant("mdn_residual_no_alpha", "MDN recurrent: residual reads S with p_t = k_t instead of the declared "
           "alpha_t k_t", "ops/momentum_delta_rule/fused_recurrent.py",
           "p_eff = p if not use_p_times_alpha else (p * log_alpha.exp().unsqueeze(-1)).to(q.dtype)",
           "p_eff = p",
           ("kernel.fla.mdn_recurrent.convention.residual_alpha_k",)),
    # Mutants that only the expected-failure ratchet can kill (verify/xfails.py): their code is already
    # listed as failing, so without the ratchet their checks stay xfail and every other check stays green.
    Mutant("mdn_beta_bias_larger", "MDN chunk: log(beta + 1e-4) instead of fla's own log(beta + 1e-6) (a listed "
           "defect made a hundred times larger; every unlisted MDN chunk check still passes)", MDN,
           "log_beta = (beta + 1e-6).squeeze(-1).log()", "log_beta = (beta + 1e-4).squeeze(-1).log()",
           ("kernel.fla.mdn_chunk16.fwd.bf16.beta_near0", "kernel.fla.mdn_chunk32.fwd.bf16.beta_near0")),
    Mutant("mdn_gamma_tril_dropped", "MDN chunk: Gamma's upper triangle masked only by the cancelling factor "
           "(.tril() dropped): exp overflows there to inf x 0 = NaN where log mu decays fast", MDN,
           "gamma_mask_q = (log_a_cum.unsqueeze(-1) - log_m_cum.unsqueeze(-2) + a).exp().float().tril() * temp",
           "gamma_mask_q = (log_a_cum.unsqueeze(-1) - log_m_cum.unsqueeze(-2) + a).exp().float() * temp",
           ("kernel.fla.mdn_chunk32.fwd.bf16.logmu_below_floor", "kernel.fla.mdn_chunk32.bwd.bf16.logmu_below_floor")),
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


def run_checks(kernel_root: Path | str | None, ids: tuple[str, ...], profile: str = "quick", seed: int = 0,
               device: str = "cpu", extra: tuple[str, ...] = ()) -> tuple[int, dict]:
    """Run `verify all --id ...` in a fresh interpreter; returns (exit status, JSON document)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, "-m", "verify", "all", "--device", device, "--profile", profile,
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
