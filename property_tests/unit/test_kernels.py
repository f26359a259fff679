"""Production-kernel checks in this process: the search's outcomes (skips, a fatal device error, shrinking charged
by case size, draws independent of the loaded modules), the regression cases and their fixes, a stale mutant,
GDN as MDN without momentum, where a check's time went."""
import pytest

from pathmdn_verify.platform.mutation import materialize
from pathmdn_verify.ops import mutants as _mutants


MUTANTS = _mutants()


def test_stale_mutant_is_an_error(tmp_path):
    from dataclasses import replace
    stale = replace(MUTANTS["path_zero_mask"], old="text that is not in the kernel")
    with pytest.raises(RuntimeError, match="update the mutant"):
        materialize(stale, tmp_path)


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


@pytest.mark.parametrize("raised, kind", [("unsupported", "unsupported"), ("gap", "interpreter_gap"),
                                          ("kernel", None)])
def test_search_skips_what_cannot_be_verified(raised, kind):
    """A variant the package lacks and an operation the interpreter cannot run end the search as a skip of
    that kind, with the reason; any other exception of the kernel stays a failure."""
    from hypothesis import strategies as st

    from pathmdn_verify.core.errors import VariantUnsupported
    from pathmdn_verify.core.errors import Bf16ArithmeticNotEmulated
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.core.search import search
    errors = {"unsupported": VariantUnsupported("chunk 16 is not offered"),
              "gap": Bf16ArithmeticNotEmulated("bf16 multiply"), "kernel": RuntimeError("kernel bug")}

    def evaluate(case):
        raise errors[raised]
    r = search(st.just(0), evaluate, Context(profile="quick"), "test.search")
    assert (r.status, r.kind) == (("skip", kind) if kind else ("fail", "exception"))
    assert str(errors[raised]) in r.message


def test_draws_do_not_depend_on_the_modules_loaded(tmp_path, monkeypatch):
    """A check's examples are the seed's alone: importing a module of 300 in-range literals between two searches
    of one seed leaves the drawn cases as they were.  Control: with hypothesis's own pool of the loaded modules'
    literals (what pathmdn_verify.core.search replaces), the same search draws other cases."""
    import importlib

    from hypothesis import strategies as st
    from hypothesis.internal.conjecture import providers

    from pathmdn_verify.core import search as S
    from pathmdn_verify.core.budget import Verdict
    from pathmdn_verify.core.registry import Context

    def draws():
        seen = []
        S.search(st.lists(st.integers(0, 2**16), min_size=20, max_size=20),
                 lambda c: seen.append(c) or S.Probe(Verdict("o", 0.0, 0.0, 1.0, 1.0, 0.0, 0.0), str(c), {}),
                 Context(profile="full", examples=100), "test.constants")
        return seen
    before = draws()
    (tmp_path / "planted_literals.py").write_text("X = [" + ", ".join(str(211 * i + 1009) for i in range(300)) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("planted_literals")
    assert draws() == before
    assert S.HYPOTHESIS_LOCAL_CONSTANTS is not None, "this hypothesis has no local-constant pool to control"
    replaced = providers._get_local_constants
    try:
        providers._get_local_constants = S.HYPOTHESIS_LOCAL_CONSTANTS
        providers.CONSTANTS_CACHE.cache.clear()
        assert draws() != before
    finally:
        providers._get_local_constants = replaced
        providers.CONSTANTS_CACHE.cache.clear()


@pytest.mark.parametrize("T, tries", [(100, 12), (1024, 12), (2048, 3), (4096, 1)])
def test_shrinking_at_full_is_charged_by_case_size(T, tries):
    """At full a failure gets 12 shrink evaluations of cases up to SHRINK_UNIT_T tokens; a larger case costs
    (T / 1024)^2 of them, so a failure at T = 4096 gets one try (hypothesis shrinks T toward the first
    size).  Planted: every case with seed > 1000 fails, so that the shrinker has a long way down to 1001; its
    candidates keep T and change the seed."""
    from dataclasses import dataclass

    from hypothesis import strategies as st

    from pathmdn_verify.core.budget import Verdict
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.core.search import MAX_EXAMPLES, Probe, search

    @dataclass(frozen=True)
    class Case:
        T: int
        seed: int

        def label(self):
            return f"T={self.T} seed={self.seed}"
    evaluated = []

    def evaluate(case):
        evaluated.append(case)
        if case.seed > 1000:
            return Probe(Verdict.raised(RuntimeError("planted")), case.label(), {})
        return Probe(Verdict("o", 0.0, 0.0, 1.0, 1.0, 0.0, 0.0), case.label(), {})
    r = search(st.builds(Case, st.just(T), st.integers(0, 2**16)), evaluate, Context(profile="full"), "test.shrink")
    explored = MAX_EXAMPLES["full"]          # the search draws all its examples first, whatever failed among them
    assert any(c.seed > 1000 for c in evaluated[:explored])
    assert r.status == "fail" and len(evaluated) - explored == tries, (len(evaluated), r.message)
    assert f"shrinking stopped after {tries} tries" in r.message


def _gdn_literal(q, k, v, g, beta, S0, scale):
    """GDN's rule as its docstring states it, token by token, one sequence and head:
    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = scale S_t^T q_t."""
    import torch
    S, out = S0.clone(), []
    for t in range(q.shape[0]):
        I = torch.eye(k.shape[1], dtype=k.dtype)
        S = torch.exp(g[t]) * (I - beta[t] * torch.outer(k[t], k[t])) @ S + beta[t] * torch.outer(k[t], v[t])
        out.append(scale * S.T @ q[t])
    return torch.stack(out), S


@pytest.mark.parametrize("seed", range(3))
def test_gdn_is_mdn_without_momentum(seed):
    """The GDN records' oracle (pathmdn_verify.ops.gdn_ops.gdn_as_mdn on the MDN recurrence, mu = 0, p = alpha k, eta = 1)
    equals GDN's literal rule sequence by sequence; negative control: with MDN's eta = 2 it does not."""
    import torch

    from pathmdn_verify.references import mdn_oracle as MDN
    from pathmdn_verify.core.inputs import as_oracle
    from pathmdn_verify.ops.gdn_ops import GdnCase, gdn_as_mdn, gdn_inputs
    x = as_oracle(gdn_inputs(GdnCase(T=12, Dk=4, Dv=3, beta="near2", initial_state=True, cu_seqlens=(0, 5, 12), seed=seed)))
    o, S = gdn_as_mdn(MDN.recurrence, **x, scale=0.5)
    for n, (s, e) in enumerate([(0, 5), (5, 12)]):
        o_lit, S_lit = _gdn_literal(*(x[m][0, s:e, 0] for m in ("q", "k", "v", "g", "beta")), x["S0"][n, 0], 0.5)
        assert torch.allclose(o[0, s:e, 0], o_lit, rtol=1e-12, atol=1e-12)
        assert torch.allclose(S[n, 0], S_lit, rtol=1e-12, atol=1e-12)
    doubled = lambda *a, **kw: MDN.recurrence(*a[:6], 2 * a[6], **kw)      # eta = 2: GDN's beta doubled
    o_wrong, _ = gdn_as_mdn(doubled, **x, scale=0.5)
    assert (o_wrong - o).abs().max() > 1e-3


@pytest.mark.parametrize("surfaces_in", ["kernel", "oracle"])
def test_search_stops_at_a_fatal_device_error_wherever_it_surfaces(surfaces_in):
    """A kernel's illegal memory access surfaces at the next CUDA call, often inside the oracle (as an
    OracleFailed caused by it; seen on the H200): either way the search stops at that example, unshrunk, and
    names it, so that the runner can rerun it under compute-sanitizer.  A plain oracle failure stays an error
    of the check (raised)."""
    from hypothesis import strategies as st

    from pathmdn_verify.core.budget import OracleFailed
    from pathmdn_verify.core.registry import DEVICE_LOST, Context
    from pathmdn_verify.core.search import search
    fault = RuntimeError("CUDA error: an illegal memory access was encountered")
    calls = []

    def evaluate(case):
        calls.append(case)
        if surfaces_in == "kernel":
            raise fault
        raise OracleFailed("the float64 oracle raised") from fault
    r = search(st.integers(0, 9), evaluate, Context(profile="ci"), "test.search")
    assert (r.status, r.kind, len(calls)) == ("fail", "cuda_fatal", 1)
    assert r.details[DEVICE_LOST] and r.details["failing_example"] == repr(calls[0])

    def oracle_bug(case):
        raise OracleFailed("the float64 oracle raised: ZeroDivisionError")
    with pytest.raises(OracleFailed):
        search(st.integers(0, 9), oracle_bug, Context(profile="ci"), "test.search")


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
    assert timing.spent() == {"compile": 2.75, "compilations": 1, "cache_loads": 1, "compiled": ["k:h1"]}
    mine = lambda **_: False
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", mine)
    timing.time_compilations()                               # a user's own hook is left in place
    assert knobs.runtime.jit_cache_hook is mine
