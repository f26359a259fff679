"""Production kernels in this process and through the command: --kernel-root without a package is exit 2;
`--save-failing` saves the minimal failing example and the `verify compare` command it prints reproduces the
failure; fla's missing backward is the package's own refusal; the regression cases and their fixes; where a check's
time went."""
import json

import pytest


def test_kernel_root_without_package_is_usage_error(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "pathmdn_verify", "kernels", "--device", "cpu", "--kernel-root", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "fla/__init__.py" in r.stderr and "Traceback" not in r.stderr


def test_save_failing_writes_a_file_that_compare_replays(tmp_path, registry):
    """--save-failing (Context.save_failing): the minimal example of a failing check (the listed
    log(beta + 1e-6) bias of fla's MDN chunk path at T = 1) is saved, the failure message prints the
    `verify compare` command, and that command reproduces the failure with the same error."""
    import shlex

    from pathmdn_verify import cli
    from pathmdn_verify.core.registry import Context
    cid = "kernel.fla.mdn_chunk16.fwd.bf16.alpha_near1"
    result = registry[cid].run(Context(device="cpu", profile="quick", save_failing=str(tmp_path / "f")))
    command = result.details["compare_command"]
    assert result.status == "fail" and command in result.message and (tmp_path / "f" / f"{cid}.pt").is_file()
    argv = shlex.split(command)
    assert argv[:2] == ["verify", "compare"]
    replay = tmp_path / "replay.json"
    assert cli.main([*argv[1:], "--json", str(replay)]) == 1
    tensors = json.loads(replay.read_text())["tensors"]
    assert [t["err_rel"] for t in tensors] == [t["err_rel"] for t in result.details["tensors"]]


def test_missing_backward_is_only_the_packages_own():
    """fla's fused recurrent GDN has no backward (it raises NotImplementedError in its autograd backward): that
    is a variant the package lacks.  The same error raised anywhere else stays a failure."""
    import torch

    from pathmdn_verify.kernels import fla_ops
    from pathmdn_verify.platform.setup import prepare
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.ops.gdn_ops import GdnCase, gdn_inputs
    prepare(Context(device="cpu"))
    x = {n: t.requires_grad_() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
         for n, t in gdn_inputs(GdnCase(T=4), torch.float32).items()}
    o, _ = fla_ops.gated_delta_rule(**x, chunk=False)
    with pytest.raises(NotImplementedError) as raised:
        o.sum().backward()
    assert "gated_delta_rule/fused_recurrent.py has no backward" in fla_ops.missing_backward(raised.value)

    def backward():
        raise NotImplementedError("not the package's")
    with pytest.raises(NotImplementedError) as raised:
        backward()
    assert fla_ops.missing_backward(raised.value) is None


def test_regression_cases_fail_without_their_fixes(monkeypatch):
    """The regression cases of pathmdn_verify.ops pass with the budget's summed-terms floor (MDN) and the
    same-dtype implementations' stored-O delta (FoX, PaTH), and each fix is what sets their budget: without
    it the budget's same-dtype term is several times smaller.  Those terms come from the float64 oracle and
    the fixed-order same-dtype implementation (pathmdn_verify.core.precision), so this holds on every machine; whether
    a kernel's own error would cross the smaller budget depends on the machine and is not asserted."""
    from pathmdn_verify.references import path_oracle as P
    from pathmdn_verify import same_dtype
    from pathmdn_verify.core import engine as K
    from pathmdn_verify.core.budget import budget, judged
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.ops import OPS, regression_cases
    ctx = Context(device="cpu", profile="quick")
    from pathmdn_verify.platform.setup import prepare
    prepare(ctx)
    mdn_case = regression_cases("kernel.fla.mdn_recurrent.fwd.fp32.eta_near2")[0]
    fox_case = regression_cases("kernel.fla.forgetting_attn.bwd.bf16.saturated")[0]
    path_case = regression_cases("kernel.fla.path_attn.bwd.fp32.saturated")[0]
    probes = {"mdn": lambda: K.probe(OPS["mdn_recurrent"], mdn_case, "fp32", "fwd", ctx),
              "fox": lambda: K.probe(OPS["forgetting_attn"], fox_case, "bf16", "bwd", ctx),
              "path": lambda: K.probe(OPS["path_attn"], path_case, "fp32", "bwd", ctx)}

    def verdicts(probe, floor=True):
        """(name -> Verdict of each tensor the probe judges, the probe's worst ratio); floor=False judges
        without the summed-terms floor."""
        seen = {}
        with monkeypatch.context() as m:
            if not floor:
                m.setattr(K, "budget", lambda r64, r, prec, c, scale=0.0, terms=None, terms_u=None: budget(
                    r64, r, prec, c, scale))
            m.setattr(K, "judged", lambda n, o, r64, b: seen.setdefault(n, judged(n, o, r64, b)))
            ratio = probe().verdict.ratio
        return seen, ratio

    fixed = {name: verdicts(p) for name, p in probes.items()}
    assert all(ratio <= 1 for _, ratio in fixed.values()), {n: r for n, (_, r) in fixed.items()}
    # MDN at T = 1: o_1 is a cancelling sum; the floor u ||terms|| / ||o|| sets its budget, not rounding luck
    assert fixed["mdn"][0]["o"].same_dtype_rel > 4 * verdicts(probes["mdn"], floor=False)[0]["o"].same_dtype_rel
    with monkeypatch.context() as m:     # delta from the exact output (plain autograd)
        m.setattr(same_dtype, "fox_attn", lambda q, k, v, g, cu_seqlens, prec, scale, gate_scaled: prec.store(
            P.fox_attn(q, k, v, g, scale, gate_scaled, cu_seqlens, prec.mm)))
        m.setattr(same_dtype, "path_attn", lambda q, k, v, w, beta, g, cu_seqlens, prec, scale, gate_scaled:
                  prec.store(P.path_attn_blockwise(q, k, v, w, beta, g, scale, gate_scaled, cu_seqlens, 64, prec.mm)))
        plain = {name: verdicts(probes[name])[0] for name in ("fox", "path")}
    # FoX saturated (bf16): the stored O's rounding enters delta, as in the kernel; PaTH at T = 1: the exact dk
    # and dq are 0, and only the stored O gives the same-dtype implementation the kernel's (and the H200's) 1.7e-2
    for name, t in (("fox", "dq"), ("fox", "dk"), ("fox", "dg"), ("path", "dq"), ("path", "dk")):
        assert fixed[name][0][t].same_dtype_abs > 4 * plain[name][t].same_dtype_abs, (name, t)


def test_a_kernel_check_says_where_its_time_went(monkeypatch):
    """details.seconds_in splits a kernel check's time into kernel, float64 oracle and same-dtype
    implementation (within the check's own seconds); Triton's compile hooks add compile time and count."""
    from pathmdn_verify.platform import timing
    from pathmdn_verify.core.registry import REGISTRY, Context

    from pathmdn_verify.run.runner import execute
    from pathmdn_verify.run import load_checks
    load_checks()
    record = execute(REGISTRY["kernel.fla.mdn_recurrent.bwd.fp32.typical"], Context(device="cpu", profile="quick"))
    from triton import knobs  # after the check installed the interpreter
    split = record.result.details["seconds_in"]
    assert set(split) == {"kernel", "oracle", "same_dtype"} and all(s > 0 for s in split.values()), split
    assert sum(split.values()) <= record.seconds, (split, record.seconds)
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", None)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", None)
    monkeypatch.setattr(knobs.compilation, "listener", None)
    timing.reset()
    timing.time_compilations()
    from types import SimpleNamespace
    clock = iter([10.0, 12.5, 20.0, 30.0, 30.25])            # the hooks' clock readings, in order
    with monkeypatch.context() as m:
        m.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
        assert knobs.runtime.jit_cache_hook(key=0) is False      # False: Triton goes on and compiles
        knobs.runtime.jit_post_compile_hook(key=0)               # 10 -> 12.5
        assert timing.spent() == {"compile": 2.5}
        knobs.runtime.jit_cache_hook(key=1)                      # a compilation that failed: no post hook;
        knobs.runtime.jit_cache_hook(key=2)                      # the next one starts the clock again
        knobs.runtime.jit_post_compile_hook(key=2)               # 30 -> 30.25
        assert timing.spent() == {"compile": 2.75}
    kernel = SimpleNamespace(fn=SimpleNamespace(__name__="k"))   # what triton.compile tells its listener
    knobs.compilation.listener(src=kernel, metadata={"hash": "h1"}, metadata_group={}, times=None, cache_hit=False)
    knobs.compilation.listener(src=kernel, metadata={"hash": "h2"}, metadata_group={}, times=None, cache_hit=True)
    assert timing.spent() == {"compile": 2.75, "compilations": 1, "cache_loads": 1, "compiled": ["k:h1"],
                              "loaded": ["k:h2"]}
    assert timing.keys_used({"seconds_in": timing.spent()}) == ["k:h1", "k:h2"]
    mine = lambda **_: False
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", mine)
    timing.time_compilations()                               # a user's own hook is left in place
    assert knobs.runtime.jit_cache_hook is mine
