"""The budget's summed-terms floor for gradients that are cancelling sums (pathmdn_verify.core.budget, MDN's
dq and deta: pathmdn_verify.ops.mdn_ops._mdn_grad_terms): the terms bound the gradients they sum to.  With fla's
kernel (the regression cases pass with the floor, which sets their budgets; a planted error fails):
cli/test_gradient_terms_cli.py."""
import torch


def test_terms_bound_the_gradients_and_match_dq_at_T1():
    """|dq| <= its terms and |deta| <= its terms elementwise (a sum is no larger than its summands'
    magnitudes); at T = 1 from S_0 = 0, S_1 = beta eta k v^T, so dq's terms are scale beta eta |k| (|v| . |do|)."""
    from pathmdn_verify.core.engine import _upstream, grads_of
    from pathmdn_verify.core.inputs import as_oracle
    from pathmdn_verify.core.records import scale_of
    from pathmdn_verify.ops import OPS
    from pathmdn_verify.ops.mdn_ops import MdnCase, _mdn_grad_terms
    op = OPS["mdn_recurrent"]
    for case in (MdnCase(T=1, seed=4), MdnCase(T=23, seed=4, initial_state=True)):
        x = as_oracle(op.inputs(case, torch.float32, "cpu"))
        s = scale_of(x)
        ups = lambda outs: [_upstream(o, torch.float32, case.seed + j) for j, o in enumerate(outs)]
        leaves = {n: x[n] for n in op.grad_inputs if x.get(n) is not None}
        g = grads_of(lambda **kw: op.oracle(**{**x, **kw}, scale=s), leaves, ups)
        terms = _mdn_grad_terms(ups, scale=s, **x)
        for n in ("q", "eta"):
            assert (g[n].abs() <= terms[n] * (1 + 1e-12)).all(), n
            assert terms[n].max() > g[n].abs().max()     # cancelling: the terms are the larger
        if case.T == 1:
            do = ups(op.oracle(**x, scale=s))[0].double()
            gate = (x["beta"] * x["eta"])[..., None]
            expected = s * gate * x["k"].abs() * (x["v"].abs() * do.abs()).sum(-1, keepdim=True)
            torch.testing.assert_close(terms["q"], expected, rtol=1e-12, atol=0)
