"""The MomentumDeltaNet and GatedDeltaNet literal layers (references/mdn_layer_literal.py) against facts computed by
hand."""
import math

import torch
import torch.nn.functional as F

from pathmdn_verify.references import mdn_layer_literal as L


H, DK, DV, HIDDEN = 2, 2, 3, 4


def _params(gen, zero_gates=True):
    """A MomentumDeltaNet's parameters (state_dict names) at tiny sizes; gate projections zero when asked."""
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    p = {f"{n}_proj.weight": r(D * H, HIDDEN) for n, D in (("q", DK), ("k", DK), ("v", DV), ("g", DV))}
    p.update({f"{n}_conv1d.weight": r(D * H, 1, 3) for n, D in (("q", DK), ("k", DK), ("v", DV))})
    p.update({f"{n}_proj.weight": (0 if zero_gates else 1) * r(H, HIDDEN) for n in "abme"})
    p.update({"A_log": r(H), "dt_bias": r(H), "Mu_log": r(H), "mu_bias": r(H), "log_factor": r(H), "D_log": r(H),
              "o_norm.weight": r(DV), "o_proj.weight": r(HIDDEN, H * DV)})
    return p


KW = {"num_heads": H, "head_k_dim": DK, "head_v_dim": DV}


def test_mdn_gates_at_zero_projections_are_the_papers_closed_forms():
    """W x = 0: eta = 1, theta = arctan s, alpha_max = 1 / (1 + s^2), beta = sigmoid(0) s^2 / (1 + s^2),
    log mu = max(-exp(Mu_log) softplus(mu_bias), -2); allow_neg_eigval doubles beta."""
    p = _params(torch.Generator().manual_seed(3))
    x = torch.randn(1, 5, HIDDEN, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    s = torch.exp(p["log_factor"])
    out = L.mdn_layer(L.TRUTH, p, x, **KW)
    assert torch.equal(out["eta"], torch.ones(1, 5, H, dtype=torch.float64))
    torch.testing.assert_close(out["beta"][0, 0], 0.5 * s ** 2 / (1 + s ** 2), rtol=1e-14, atol=0)
    torch.testing.assert_close(out["log_alpha"][0, 0], -torch.exp(p["A_log"]) * F.softplus(p["dt_bias"])
                               - torch.log(1 + s ** 2), rtol=1e-14, atol=0)
    torch.testing.assert_close(out["log_mu"][0, 0], torch.clamp(-torch.exp(p["Mu_log"]) * F.softplus(p["mu_bias"]),
                                                                min=-2.0), rtol=1e-14, atol=0)
    assert bool((out["log_alpha"].exp() + out["beta"] <= 1).all())
    neg = L.mdn_layer(L.TRUTH, p, x, **KW, neg_eigval=True)
    torch.testing.assert_close(neg["beta"], 2 * out["beta"], rtol=0, atol=0)
    const = L.mdn_layer(L.TRUTH, p, x, **KW, learned_s=False, s=1.0)     # theta = pi/4: beta_max = 1/2
    torch.testing.assert_close(const["beta"], torch.full_like(const["beta"], 0.25), rtol=1e-14, atol=0)


def test_short_conv_l2norm_and_correction_by_hand():
    A = L.TRUTH
    x = torch.tensor([[[1.0], [2.0], [4.0]]], dtype=torch.float64)
    w = torch.tensor([[[0.5, -1.0, 2.0]]], dtype=torch.float64)      # y_t = 0.5 x_{t-2} - x_{t-1} + 2 x_t
    torch.testing.assert_close(L.short_conv(A, x, w), F.silu(torch.tensor([[[2.0], [3.0], [6.5]]],
                                                                            dtype=torch.float64)))
    v = torch.tensor([3.0, 4.0], dtype=torch.float64)
    torch.testing.assert_close(L.l2norm(A, v, eps=0.0), torch.tensor([0.6, 0.8], dtype=torch.float64))
    p = _params(torch.Generator().manual_seed(5))
    x = torch.randn(1, 4, HIDDEN, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    out, plain = L.mdn_layer(A, p, x, **KW), L.mdn_layer(A, p, x, **KW, correction=False)
    torch.testing.assert_close(out["q"], plain["q"] - torch.exp(p["D_log"])[:, None] * plain["k"])


def test_gdn_literal_is_the_gated_delta_rule():
    """S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = Dk^-1/2 S_t^T q_t on the normalised
    q, k (GDN through references/mdn_oracle.py's recurrence with no momentum)."""
    p = _params(torch.Generator().manual_seed(7), zero_gates=False)
    x = torch.randn(1, 6, HIDDEN, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    out = L.gdn_layer(L.TRUTH, p, x, **KW)
    q, k = L.l2norm(L.TRUTH, out["q"]), L.l2norm(L.TRUTH, out["k"])
    for h in range(H):
        S = torch.zeros(DK, DV, dtype=torch.float64)
        for t in range(6):
            a, b, kt = out["log_alpha"][0, t, h].exp(), out["beta"][0, t, h], k[0, t, h]
            S = a * (torch.eye(DK, dtype=torch.float64) - b * torch.outer(kt, kt)) @ S + b * torch.outer(kt, out["v"][0, t, h])
            torch.testing.assert_close(out["core"][0, t, h], S.T @ q[0, t, h] / math.sqrt(DK), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(out["S"][0, h], S, rtol=1e-12, atol=1e-14)
