"""Implementations checked through pathmdn_verify.check in this process (the runner prepares the CPU interpreter and
imports the kernel package): what an implementation does not offer is a skip of kind unsupported with the reason,
case by case; its budgets follow its declared fp32 dot format.  The float64 oracle stands in for a kernel."""
from test_impls import exact, registrations_end_with_the_test  # noqa: F401  (the fixture, autouse here too)

import pathmdn_verify as pv


def test_unsupported_variants_are_skips_and_the_rest_is_judged():
    import os
    pv.implement("path_attn", exact, name="t_run", fp32_dot="ieee", dtypes=("fp32",))
    before = os.environ.get("VERIFY_IMPLS")
    results = {r.id: r for r in pv.check("t_run", select="fwd and beta_uniform", profile="ci", workers="0")}
    assert os.environ.get("VERIFY_IMPLS") == before      # the caller's process keeps its environment
    bf16, fp32 = (results[f"kernel.t_run.path_attn.fwd.{d}.beta_uniform"] for d in ("bf16", "fp32"))
    assert bf16.status == "skip" and bf16.kind == "unsupported" and "offers no bf16" in bf16.message
    # fp32 ran its cases but the varlen ones, which it says it did not run and why
    assert fp32.status == "pass" and "case(s) not run: t_run's path_attn takes no cu_seqlens" in fp32.message
    assert fp32.measured < fp32.budget and "--impl t_run" in fp32.repro


def test_budgets_follow_the_declared_dot(monkeypatch):
    """The same kernel judged with TF32 budgets passes a planted error that IEEE budgets catch: the declaration is
    what decides (an IEEE kernel must say so)."""
    def slightly_off(q, k, v, w, beta, g=None, scale=None):
        return exact(q, k, v, w, beta, g, scale) * (1 + 3e-5)
    pv.implement("path_attn", slightly_off, name="t_ieee", fp32_dot="ieee", dtypes=("fp32",))
    pv.implement("path_attn", slightly_off, name="t_tf32", fp32_dot="tf32", dtypes=("fp32",))
    ieee, = pv.check("t_ieee", select="fwd.fp32.beta_uniform", profile="quick", workers="0")
    tf32, = pv.check("t_tf32", select="fwd.fp32.beta_uniform", profile="quick", workers="0")
    assert ieee.status == "fail" and tf32.status == "pass", (ieee.message, tf32.message)
