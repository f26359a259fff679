"""`--configs cover|all|autotune|first` (verify/platform/configs.py): the context and repro line, the coverage of
configs in aggregate, the autotune count, and autotune on the CPU a usage error.  GDN and _check serve
test_configs_cli.py and test_configs_slow.py too."""
from __future__ import annotations

import pickle

import pytest
from helpers import run_cli


GDN = "kernel.fla.gdn_chunk.fwd.fp32.typical"


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
    """--configs autotune: each check counts the configs Triton's timing ran (configs_timed; the count itself:
    cli/test_configs_cli.py); the run sums them, 0 when its choices came from the cache directory."""
    from pathmdn_verify.platform import configs
    checks = [{"details": {"configs": {"k": [1]}, "configs_declared": {"k": 4}, "configs_timed": {"k": 4}}},
              {"details": {"configs": {"k": [1]}, "configs_declared": {"k": 4}, "configs_timed": {"k": 0}}}]
    assert configs.summary("autotune", checks)["timed"] == 4
    assert "Triton timed 4 configs" in configs.summary_line(configs.summary("autotune", checks))
    assert "timed" not in configs.summary("cover", checks)


def test_autotune_on_the_cpu_exits_2_with_one_line(tmp_path):
    r, _ = run_cli("kernels", "--id", GDN, "--device", "cpu", "--configs", "autotune")
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs a GPU" in lines[0], r.stderr


def test_a_specialization_is_what_triton_compiles_a_launch_for():
    """cover's key for running a config again: each constexpr's value, each integer's class (1, else its width and
    whether 16 divides it), each tensor's dtype; nothing an integer's other digits or a pointer's address change."""
    from types import SimpleNamespace

    from pathmdn_verify.platform import configs

    def kern(x, n, m, BLOCK: "tl.constexpr"):      # noqa: F821 (as fla writes it, a string under PEP 563)
        pass
    tuner = SimpleNamespace(fn=SimpleNamespace(fn=kern), arg_names=["x", "n", "m", "BLOCK"])    # a JITFunction's
    f32, bf16 = SimpleNamespace(dtype="torch.float32"), SimpleNamespace(dtype="torch.bfloat16")
    spec = configs._specialization(tuner, (f32, 32, 7), {"BLOCK": 64})
    assert spec == ("torch.float32", "i32D", "i32", "64")
    assert configs._specialization(tuner, (f32, 48, 9), {"BLOCK": 64}) == spec
    assert configs._specialization(tuner, (f32, 1, 2 ** 40 + 1), {"BLOCK": 64}) == ("torch.float32", "1", "i64", "64")
    for other in ((bf16, 32, 7), (f32, 33, 7), (f32, 32, 16)):
        assert configs._specialization(tuner, other, {"BLOCK": 64}) != spec, other
    assert configs._specialization(tuner, (f32, 32, 7), {"BLOCK": 32}) != spec


def test_a_checks_position_counts_the_registered_checks_of_its_op_and_pass(registry):
    from pathmdn_verify.platform import configs
    cid = "kernel.fla.l2norm.bwd.fp32.typical"
    _, i, count, j, passes = configs._position(cid)
    assert count == sum(i.startswith("kernel.fla.l2norm.bwd.") for i in registry) > 1
    assert count < sum(i.startswith("kernel.fla.l2norm.") for i in registry)   # not the forward's
    assert 0 <= i < count and 0 <= j < passes > 1
    assert configs._position("env.configs_share.cover")[1:] == (0, 1, 0, 1)     # a group no check is registered in


def _windows_cover(starts, n: int, share: int) -> bool:
    """Whether [s, s + share) mod n over the starts covers all n configs."""
    return {(s + k) % n for s in starts for k in range(share)} == set(range(n))


def test_the_checks_of_every_pass_cover_a_kernel_with_their_shares(registry):
    """offset: for every op and pass, and kernels of 1 to 60 configs, the P checks' starts with ceil(n / P) launches
    each cover all n configs; the control: starts spread over the op's checks instead (r ceil(n / R), r the rank in
    the op), as before, leave configs of fla's l2norm backward kernel (25) to its 4 backward checks unrun."""
    from pathmdn_verify.platform import configs
    passes: dict = {}
    for cid in registry:
        if cid.startswith(("kernel.", "layer.")):
            passes.setdefault(configs._pass(cid), []).append(cid)
    assert len(passes) > 50
    for ids in passes.values():
        for n in range(1, 61):
            starts = [configs.offset(cid, "kern", 0, n) for cid in ids]
            assert _windows_cover(starts, n, -(-n // len(ids))), (ids[0], n)
    bwd = sorted(passes[("kernel", "fla", "l2norm", "bwd")])
    group = sorted(i for i in registry if i.startswith("kernel.fla.l2norm."))
    old = [group.index(cid) * -(-25 // len(group)) for cid in bwd]
    assert not _windows_cover(old, 25, -(-25 // len(bwd)))
