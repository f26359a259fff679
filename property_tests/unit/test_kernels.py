"""The kernel checks' search on stand-in evaluations, in this process: its outcomes (skips, a fatal device error,
shrinking charged by case size, draws independent of the loaded modules), a stale mutant, GDN as MDN without
momentum.  What runs a kernel is in cli/test_kernels_cli.py."""
import pytest

from pathmdn_verify.platform.mutation import materialize
from pathmdn_verify.ops import mutants as _mutants


MUTANTS = _mutants()


def test_stale_mutant_is_an_error(tmp_path):
    from dataclasses import replace
    stale = replace(MUTANTS["path_zero_mask"], old="text that is not in the kernel")
    with pytest.raises(RuntimeError, match="update the mutant"):
        materialize(stale, tmp_path)


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
