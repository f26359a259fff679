"""Production-kernel checks have teeth: each family turns red on a planted bug of its kind (a patched
copy of fla loaded through --kernel-root in a fresh process) and is green on the unmodified kernels."""
import json

import pytest

from verify.mutants import MUTANTS, materialize, run_checks

# one planted bug per check family
FAMILY_MUTANTS = {
    "kernel.fla.path_attn.fwd": "path_zero_mask",
    "kernel.fla.path_attn.state_tracking": "path_beta_clipped",
    "kernel.fla.forgetting_attn.fwd": "fox_gate_dropped_offdiag",
    "kernel.fla.mdn_chunk16.fwd": "mdn_b_noncumulative",
}


def test_killer_checks_are_green_on_unmodified_kernels():
    ids = tuple(sorted({i for m in FAMILY_MUTANTS.values() for i in MUTANTS[m].killers}))
    status, doc = run_checks(None, ids)
    assert status == 0, [(c["id"], c["message"]) for c in doc["checks"] if c["status"] != "pass"]
    assert {c["id"] for c in doc["checks"]} == set(ids)


@pytest.mark.parametrize("family", sorted(FAMILY_MUTANTS))
def test_family_turns_red_on_planted_bug(family, tmp_path):
    mutant = MUTANTS[FAMILY_MUTANTS[family]]
    root = materialize(mutant, tmp_path)
    status, doc = run_checks(root, mutant.killers)
    assert status == 1
    assert doc["environment"]["kernel_root"] == str(root)
    red = [c for c in doc["checks"] if c["status"] == "fail"]
    assert red, f"{mutant.name} survived: {[c['message'] for c in doc['checks']]}"
    for c in red:
        assert "reproduce" not in c["message"] and c["repro"].endswith(f"--kernel-root {root}")


def test_stale_mutant_is_an_error(tmp_path):
    from dataclasses import replace
    stale = replace(MUTANTS["path_zero_mask"], old="text that is not in the kernel")
    with pytest.raises(RuntimeError, match="update the mutant"):
        materialize(stale, tmp_path)


def test_kernel_root_without_package_is_usage_error(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "verify", "kernels", "--device", "cpu", "--kernel-root", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "fla/__init__.py" in r.stderr and "Traceback" not in r.stderr


def test_cpu_runs_pick_the_h200_tile_sizes():
    """fla asks the driver for shared memory; on the CPU it must get the H200's answer (tile sizes change
    the rounding: the state-tracking construction at n = 256 fails with H200 tiles and passed without)."""
    import subprocess
    import sys
    code = ("from verify.checks.kernels import prepare; from verify.registry import Context; prepare(Context()); "
            "import fla.utils; from verify import fidelity; "
            "print(fla.utils.check_shared_mem('hopper'), fidelity.active_parts()['device_properties'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "True H200 (max_shared_mem 232448)"


STUB_MODE_RULE = '''
from references import mdn as MDN


def chunk_mode_rule(q, k, v, log_alpha, log_mu, p=None, beta=None, eta=None, scale=None, initial_state=None,
                    output_final_state=False, cu_seqlens=None, use_qk_l2norm_in_kernel=True, use_p_times_alpha=True):
    assert not use_qk_l2norm_in_kernel
    d = lambda t: None if t is None else t.double()
    S0, M0 = initial_state if initial_state is not None else (None, None)
    o, S, M = MDN.recurrence(d(q), d(k), d(v), d(log_alpha), d(log_mu), d(beta), d(eta),
                             p=None if use_p_times_alpha else d(k if p is None else p), scale=scale, S0=d(S0), M0=d(M0))
    return o.to(q.dtype), (S.float(), M.float())


fused_recurrent_mode_rule = chunk_mode_rule     # same signature in the fork; the stand-in computes exactly
'''


def test_authors_fork_api_through_kernel_root(tmp_path):
    """A stand-in for the MDN authors' fork (fla 0.3.2, entry points *_mode_rule, chunk fixed at 64, the
    exact recurrence inside): the adapter finds the fork's API and maps every argument, so its checks pass;
    asking it for another chunk size is a clear usage error."""
    import subprocess
    import sys
    from pathlib import Path
    pkg = tmp_path / "fork" / "fla"
    (pkg / "ops" / "momentum_delta_rule").mkdir(parents=True)
    (pkg / "utils").mkdir()
    (pkg / "__init__.py").write_text('__version__ = "0.3.2"\n')
    (pkg / "utils" / "__init__.py").write_text("")
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "ops" / "momentum_delta_rule" / "__init__.py").write_text(STUB_MODE_RULE)
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "r.json"
    run = lambda *ids: subprocess.run(
        [sys.executable, "-m", "verify", "kernels", "--device", "cpu", "--profile", "quick", "--json", str(out),
         "--kernel-root", str(tmp_path / "fork"), *[a for i in ids for a in ("--id", i)]],
        capture_output=True, text=True, cwd=repo)
    r = run("kernel.fla.mdn_chunk64.fwd.bf16.typical", "kernel.fla.mdn_recurrent.fwd.fp32.initial_state",
            "kernel.fla.mdn_recurrent.convention.residual_alpha_k")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert {c["status"] for c in json.loads(out.read_text())["checks"]} == {"pass"}
    r = run("kernel.fla.mdn_chunk16.fwd.bf16.typical")
    assert r.returncode == 2 and "fixed chunk size of 64" in r.stderr and "Traceback" not in r.stderr


def test_regression_cases_fail_without_their_fixes(monkeypatch):
    """The regression cases of verify.strategies pass with the budget's summed-terms floor (MDN) and the
    same-dtype implementations' stored-O delta (FoX, PaTH), and each fix is what sets their budget: without
    it the budget's same-dtype term is several times smaller.  Those terms come from the float64 oracle and
    the fixed-order same-dtype implementation (verify.precision), so this holds on every machine; whether
    a kernel's own error would cross the smaller budget depends on the machine and is not asserted."""
    from references import path_attn as P
    from verify.budget import judge
    from verify.checks import kernels as K
    from verify.registry import Context
    from verify.strategies import REGRESSION_CASES
    ctx = Context(device="cpu", profile="quick")
    K.prepare(ctx)
    mdn_case = REGRESSION_CASES["kernel.fla.mdn_recurrent.fwd.fp32.eta_near2"][0]
    fox_case = REGRESSION_CASES["kernel.fla.forgetting_attn.bwd.bf16.saturated"][0]
    path_case = REGRESSION_CASES["kernel.fla.path_attn.bwd.fp32.saturated"][0]
    probes = {"mdn": lambda: K._mdn_probe(mdn_case, "fp32", "fwd", None, ctx),
              "fox": lambda: K._path_probe(fox_case, "bf16", "bwd", ctx, fox=True),
              "path": lambda: K._path_probe(path_case, "fp32", "bwd", ctx, fox=False)}

    def verdicts(probe, floor=True):
        """(name -> Verdict of each tensor the probe judges, the probe's worst ratio); floor=False judges
        without the summed-terms floor."""
        seen = {}
        with monkeypatch.context() as m:
            m.setattr(K, "judge", lambda n, o, r64, r, prec, c, scale=0.0, terms=None: seen.setdefault(
                n, judge(n, o, r64, r, prec, c, scale, terms if floor else None)))
            ratio = probe().verdict.ratio
        return seen, ratio

    fixed = {name: verdicts(p) for name, p in probes.items()}
    assert all(ratio <= 1 for _, ratio in fixed.values()), {n: r for n, (_, r) in fixed.items()}
    # MDN at T = 1: o_1 is a cancelling sum; the floor u ||terms|| / ||o|| sets its budget, not rounding luck
    assert fixed["mdn"][0]["o"].ref_rel > 4 * verdicts(probes["mdn"], floor=False)[0]["o"].ref_rel
    with monkeypatch.context() as m:     # delta from the exact output (plain autograd)
        m.setattr(K.lowprec, "fox_attn", lambda q, k, v, g, cu_seqlens, prec, scale, gate_scaled: prec.store(
            P.fox_attn(q, k, v, g, scale, gate_scaled, cu_seqlens, prec.mm)))
        m.setattr(K.lowprec, "path_attn", lambda q, k, v, w, beta, g, cu_seqlens, prec, scale, gate_scaled:
                  prec.store(P.path_attn_blockwise(q, k, v, w, beta, g, scale, gate_scaled, cu_seqlens, 64, prec.mm)))
        plain = {name: verdicts(probes[name])[0] for name in ("fox", "path")}
    # FoX saturated (bf16): the stored O's rounding enters delta, as in the kernel; PaTH at T = 1: the exact dk
    # and dq are 0, and only the stored O gives the same-dtype implementation the kernel's (and the H200's) 1.7e-2
    for name, t in (("fox", "dq"), ("fox", "dk"), ("fox", "dg"), ("path", "dq"), ("path", "dk")):
        assert fixed[name][0][t].ref_abs > 4 * plain[name][t].ref_abs, (name, t)
