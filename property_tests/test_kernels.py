"""Production-kernel checks have teeth: each family turns red on a planted bug of its kind (a patched
copy of fla loaded through --kernel-root in a fresh process) and is green on the unmodified kernels."""
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
