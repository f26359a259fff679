"""`--configs cover|all|autotune|first` (verify/platform/configs.py): which tile config each autotuned kernel runs,
recorded per check, covered in aggregate, and a bug that lives in one non-first config caught by cover only."""
from __future__ import annotations

import pickle

import pytest
from helpers import run_cli

GDN = "kernel.fla.gdn_chunk.fwd.fp32.typical"
# a planted bug that matters only under chunk_fwd_kernel_o's third config (BK=32): the inter-chunk term
# q @ h dropped.  The initial_state check sees it on every example (its first chunk's h is S0).
BK32 = {"path": "ops/common/chunk_o.py", "old": "        else:\n            b_o = tl.dot(b_q, b_h, b_o)\n",
        "new": "        elif BK != 32:\n            b_o = tl.dot(b_q, b_h, b_o)\n"}
BK32_KILLER = "kernel.fla.gdn_chunk.fwd.fp32.initial_state"


def _check(doc, cid):
    return next(c for c in doc["checks"] if c["id"] == cid)


def test_context_is_frozen_picklable_and_the_repro_names_configs():
    import dataclasses

    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.run.runner import repro_command
    ctx = Context(configs="first")
    assert pickle.loads(pickle.dumps(ctx)) == ctx
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.configs = "cover"
    assert repro_command("x.y", ctx).endswith("--configs first")
    assert "--configs" not in repro_command("x.y", Context())


def test_coverage_counts_configs_run_over_declared():
    from pathmdn_verify.platform import configs
    checks = [{"details": {"configs": {"k": [0, 2]}, "configs_declared": {"k": 4}}},
              {"details": {"configs": {"k": [2]}, "configs_declared": {"k": 4}, "configs_unfit": {"k": [3]}}},
              {"details": {}}]
    assert configs.coverage(checks) == {"k": {"declared": 4, "ran": [0, 2], "unfit": [3], "unrun": [1], "checks": 2}}
    s = configs.summary("cover", checks)
    assert not s["complete"] and s["kernels"]["k"]["ran"] == "2/4"
    assert "unrun: [1]" in configs.summary_line(s)
    assert configs.summary_line(configs.summary("first", checks)) is None


def test_autotune_runs_say_how_many_configs_triton_timed():
    """--configs autotune: each check records the configs Triton's timing ran (configs_timed, counted where
    Autotuner._bench is called); the run sums them, 0 when its choices came from the cache directory."""
    from pathmdn_verify.platform import configs
    checks = [{"details": {"configs": {"k": [1]}, "configs_declared": {"k": 4}, "configs_timed": {"k": 4}}},
              {"details": {"configs": {"k": [1]}, "configs_declared": {"k": 4}, "configs_timed": {"k": 0}}}]
    assert configs.summary("autotune", checks)["timed"] == 4
    assert "Triton timed 4 configs" in configs.summary_line(configs.summary("autotune", checks))
    assert "timed" not in configs.summary("cover", checks)
    from pathmdn_verify.platform.fidelity import prepare_cpu_kernels
    prepare_cpu_kernels()          # triton in this process: the interpreter's, as in a CPU worker
    with configs.scope("kernel.fla.x.fwd.fp32.r", "autotune") as st:
        from triton.runtime.autotuner import Autotuner
        assert Autotuner._bench.__name__ == "bench"       # the count is installed with the configs patch
        st.declared["k"], st.ran["k"], st.timed["k"] = ["BK=16", "BK=32"], {1: 1}, 2
        assert configs.collected()["configs_timed"] == {"k": 2}


def test_autotune_on_the_cpu_exits_2_with_one_line(tmp_path):
    r, _ = run_cli("kernels", "--id", GDN, "--device", "cpu", "--configs", "autotune")
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs a GPU" in lines[0], r.stderr


def test_canary_passes(tmp_path):
    r, doc = run_cli("kernels", "--id", "env.interpreter.configs_cover", "--profile", "quick", "--json",
                     tmp_path / "c.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _check(doc, "env.interpreter.configs_cover")["status"] == "pass"


@pytest.mark.slow
def test_same_seed_same_configs_and_first_is_index_0(tmp_path):
    got = []
    for n, mode in enumerate(("cover", "cover", "first")):
        r, doc = run_cli("kernels", "--id", GDN, "--profile", "quick", "--configs", mode, "--json",
                         tmp_path / f"{n}.json")
        assert r.returncode == 0, r.stdout + r.stderr
        details = _check(doc, GDN)["details"]
        assert set(details["configs"]) == set(details["configs_declared"]) and details["configs"]
        assert all(0 <= i < details["configs_declared"][k] for k, v in details["configs"].items() for i in v)
        assert doc["environment"]["configs"]["mode"] == mode
        got.append(details["configs"])
    assert got[0] == got[1]
    assert all(v == [0] for v in got[2].values()), got[2]
    assert got[0] != got[2]         # cover does not merely run the first config


@pytest.mark.slow
def test_a_bug_only_in_a_non_first_config_is_caught_by_cover_and_missed_by_first(tmp_path):
    from pathmdn_verify.platform.mutation import Mutant, materialize
    tree = materialize(Mutant("gdn_chunk_o_bk32", "test", killers=(BK32_KILLER,), **BK32), tmp_path / "tree")
    status = {}
    for mode in ("first", "cover"):
        r, doc = run_cli("kernels", "--kernel-root", tree, "--id", BK32_KILLER, "--profile", "ci", "--configs", mode,
                         "--json", tmp_path / f"{mode}.json")
        c = _check(doc, BK32_KILLER)
        status[mode] = (r.returncode, c["status"])
        if mode == "cover":
            assert "BK=32" in c["message"], c["message"]
            assert any("BK=32" in s for s in c["details"]["configs_failing_example"]["chunk_fwd_kernel_o"])
        else:
            assert c["details"]["configs"]["chunk_fwd_kernel_o"] == [0]
    assert status == {"first": (0, "pass"), "cover": (1, "fail")}
