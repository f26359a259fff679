"""Production-kernel checks end to end: one planted bug turns its killer red through --kernel-root (a patched
copy of fla in a fresh process: red with the bug, green without); the CPU picks the H200's tile sizes; a
stand-in for the MDN authors' fork runs through --kernel-root."""
import json

from helpers import run_cli
from test_kernels import MUTANTS

from pathmdn_verify.platform.mutation import materialize

# One planted bug through --kernel-root (the whole set, 26 mutants with their killers green on the
# unmodified kernels, is test_mutants_slow.py's test_every_mutant_is_killed)
PLANTED = "fox_gate_dropped_offdiag"


def test_planted_bug_turns_its_killer_red_through_kernel_root(tmp_path):
    mutant = MUTANTS[PLANTED]
    ids = [a for k in mutant.killers for a in ("--id", k)]
    proc, doc = run_cli("all", *ids, "--profile", "quick", "--json", tmp_path / "clean.json")
    assert proc.returncode == 0 and {c["id"] for c in doc["checks"]} == set(mutant.killers), \
        [(c["id"], c["message"]) for c in doc["checks"] if c["status"] != "pass"]
    root = materialize(mutant, tmp_path)
    proc, doc = run_cli("all", *ids, "--profile", "quick", "--kernel-root", root, "--json", tmp_path / "m.json")
    assert proc.returncode == 1
    assert doc["environment"]["kernel_root"] == str(root)
    red = [c for c in doc["checks"] if c["status"] == "fail"]
    assert red, f"{mutant.name} survived: {[c['message'] for c in doc['checks']]}"
    for c in red:
        assert "reproduce" not in c["message"] and c["repro"].endswith(f"--kernel-root {root}")


def test_cpu_runs_pick_the_h200_tile_sizes():
    """fla asks the driver for shared memory; on the CPU it must get the H200's answer (tile sizes change
    the rounding: the state-tracking construction at n = 256 fails with H200 tiles and passed without)."""
    import subprocess
    import sys
    code = ("from pathmdn_verify.platform.setup import prepare; from pathmdn_verify.core.registry import Context; prepare(Context()); "
            "import fla.utils; from pathmdn_verify.platform import fidelity; "
            "print(fla.utils.check_shared_mem('hopper'), fidelity.active_parts()['device_properties'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "True H200 (max_shared_mem 232448)"


FORK_UTILS = '''"""As the MDN authors' fork's fla/utils.py: FLA_CACHE_RESULTS is read and never defined."""
import inspect

import triton

SUPPORTS_AUTOTUNE_CACHE = "cache_results" in inspect.signature(triton.autotune).parameters
autotune_cache_kwargs = {"cache_results": FLA_CACHE_RESULTS} if SUPPORTS_AUTOTUNE_CACHE else {}
'''


STUB_MODE_RULE = '''
import torch

from pathmdn_verify.references import mdn_oracle as MDN


def _exact(q, k, v, log_alpha, log_mu, beta, eta, p, scale, initial_state, use_p_times_alpha):
    d = lambda t: None if t is None else t.double()
    S0, M0 = initial_state if initial_state is not None else (None, None)
    o, S, M = MDN.recurrence(d(q), d(k), d(v), d(log_alpha), d(log_mu), d(beta), d(eta),
                             p=None if use_p_times_alpha else d(k if p is None else p), scale=scale, S0=d(S0), M0=d(M0))
    return o.to(q.dtype), S.float(), M.float()


def chunk_mode_rule(q, k, v, log_alpha, log_mu, p=None, beta=None, eta=None, scale=None, initial_state=None,
                    output_final_state=False, cu_seqlens=None, use_qk_l2norm_in_kernel=True, use_p_times_alpha=True):
    """As the fork's: no chunk_size argument (its chunk is fixed at 64)."""
    assert not use_qk_l2norm_in_kernel
    o, S, M = _exact(q, k, v, log_alpha, log_mu, beta, eta, p, scale, initial_state, use_p_times_alpha)
    return o, (S, M)


class _FusedRecurrent(torch.autograd.Function):
    """As the fork's FusedRecurrentFunction: a forward, and a backward that raises."""
    @staticmethod
    def forward(ctx, q, k, v, log_alpha, log_mu, beta, eta, p, scale, initial_state, use_p_times_alpha):
        return _exact(q, k, v, log_alpha, log_mu, beta, eta, p, scale, initial_state, use_p_times_alpha)

    @staticmethod
    def backward(ctx, do, dS, dM):
        raise NotImplementedError("Backward pass is not implemented yet and we do not have plans to implement it")


def fused_recurrent_mode_rule(q, k, v, log_alpha, log_mu, p=None, beta=None, eta=None, scale=None,
                              initial_state=None, output_final_state=False, cu_seqlens=None,
                              use_qk_l2norm_in_kernel=True, use_p_times_alpha=True):
    assert not use_qk_l2norm_in_kernel
    o, S, M = _FusedRecurrent.apply(q, k, v, log_alpha, log_mu, beta, eta, p, scale, initial_state, use_p_times_alpha)
    return o, (S, M)
'''


def test_authors_fork_api_through_kernel_root(tmp_path):
    """A stand-in for the MDN authors' fork (fla 0.3.2, entry points *_mode_rule, the exact recurrence inside,
    and, as in the fork, a chunk fixed at 64 and a fused recurrent path whose backward raises; its two import
    defects under Triton 3.6: fla/utils.py reads FLA_CACHE_RESULTS, never defined, and an op module imports pandas,
    not installed, unused): the adapter finds the fork's API and maps every argument, so its checks pass; the
    chunk sizes and the backward the fork does not offer are skipped with the reason, per check; the run names
    the declared import fixes it applied, and exits 0."""
    import subprocess
    import sys
    from pathlib import Path

    pkg = tmp_path / "fork" / "fla"
    (pkg / "ops" / "momentum_delta_rule").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.3.2"\n')
    (pkg / "utils.py").write_text(FORK_UTILS)
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "ops" / "momentum_delta_rule" / "__init__.py").write_text(
        "import pandas as pd\nimport fla.utils\n" + STUB_MODE_RULE)
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "r.json"
    passing = ("kernel.fla.mdn_chunk64.fwd.bf16.typical", "kernel.fla.mdn_chunk64.bwd.bf16.typical",
               "kernel.fla.mdn_recurrent.fwd.fp32.initial_state", "kernel.fla.mdn_recurrent.convention.residual_alpha_k")
    skipped = {"kernel.fla.mdn_chunk16.fwd.bf16.typical": "chunk is fixed at 64",
               "kernel.fla.mdn_recurrent.bwd.fp32.typical": "has no backward"}
    r = subprocess.run(
        [sys.executable, "-m", "pathmdn_verify", "kernels", "--device", "cpu", "--profile", "quick", "--json", str(out),
         "--kernel-root", str(tmp_path / "fork"), *[a for i in (*passing, *skipped) for a in ("--id", i)]],
        capture_output=True, text=True, cwd=repo)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(out.read_text())
    checks = {c["id"]: c for c in doc["checks"]}
    assert {i: checks[i]["status"] for i in passing} == dict.fromkeys(passing, "pass")
    import importlib.util
    pandas_fix = {} if importlib.util.find_spec("pandas") else {"fla/ops/momentum_delta_rule/__init__.py": ["unused_missing_import"]}
    assert doc["kernel_package"]["import_fixes"] == {**pandas_fix, "fla/utils.py": ["undefined_fla_cache_results"]}
    assert "import fix for fla/utils.py: undefined_fla_cache_results" in r.stdout
    for i, reason in skipped.items():
        assert checks[i]["status"] == "skip" and reason in checks[i]["message"], checks[i]
