"""The summed-terms floor with fla's fp32 MDN recurrence in this process (the CPU interpreter): the regression cases
pass with it, the floor is what sets their budgets, and a planted gradient error still fails."""
from dataclasses import replace

import pytest

DETA_CHECK, DQ_CHECK = "kernel.fla.mdn_recurrent.bwd.fp32.logmu_below_floor", "kernel.fla.mdn_recurrent.bwd.fp32.typical"


@pytest.fixture(scope="module")
def ctx():
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.platform.setup import prepare
    ctx = Context(device="cpu", profile="quick")
    prepare(ctx)
    return ctx


def _probe(op, case, ctx):
    from pathmdn_verify.core import engine
    return {t["name"]: t for t in engine.probe(op, case, "fp32", "bwd", ctx).details["tensors"]}


def _cases():
    from pathmdn_verify.ops import regression_cases
    return [("deta", regression_cases(DETA_CHECK)[0]), ("dq", regression_cases(DQ_CHECK)[-1])]


@pytest.mark.parametrize("i", [0, 1], ids=["deta_T37", "dq_T1"])
def test_cancelling_gradients_pass_with_the_floor_that_sets_their_budget(ctx, i):
    """deta at T = 37 (log mu below the floor) and dq at T = 1: fla's fp32 recurrence passes; without the
    gradients' terms the budget is the same-dtype implementation's error, many times smaller (its float64 block
    sums round a cancelling reduction once).  The budgets come from the float64 oracle and the fixed-order
    same-dtype implementation, the same on every machine; the kernel's own error is this machine's."""
    from pathmdn_verify.ops import OPS
    name, case = _cases()[i]
    op = OPS["mdn_recurrent"]
    floored, plain = _probe(op, case, ctx)[name], _probe(replace(op, grad_terms=None), case, ctx)[name]
    assert floored["ratio"] <= 1, floored
    assert floored["budget_abs"] > 4 * plain["budget_abs"], (floored, plain)


@pytest.mark.parametrize("i", [0, 1], ids=["deta_T37", "dq_T1"])
def test_a_planted_gradient_error_still_fails(ctx, i):
    """Control: the kernel's gradient of that input made 1e-3 too large (its other outputs exact as before)
    fails under the floored budget."""
    from pathmdn_verify.ops import OPS
    name, case = _cases()[i]
    op = OPS["mdn_recurrent"]
    leaf = name[1:]

    def kernel(scale, **x):
        y = x[leaf].clone()
        y.register_hook(lambda g: g * (1 + 1e-3))
        return op.kernel(scale=scale, **{**x, leaf: y})
    assert _probe(replace(op, kernel=kernel), case, ctx)[name]["ratio"] > 1
