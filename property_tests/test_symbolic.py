"""symbolic.*: every sympy identity is proved, every printed-but-wrong form is rejected, the family is fast,
and a wrong edit to the float64 references turns the tied check red (mutation tests)."""
import time

import pytest
import torch

from references import mdn as MDN
from references import path_attn as PA
from references import spectra as SP
from references.symbolic import mdn as SM
from references.symbolic import path as SPATH
from verify.registry import Context

IDENTITIES = [
    "symbolic.path.ut_orientation", "symbolic.path.causal_logits", "symbolic.path.block_transform",
    "symbolic.path.cross_block", "symbolic.path.decode_keys", "symbolic.path.reflection",
    "symbolic.mdn.coefficients", "symbolic.mdn.state_expansion", "symbolic.mdn.row_shift",
    "symbolic.mdn.chunk_output", "symbolic.mdn.transition", "symbolic.mdn.second_order",
    "symbolic.mdn.sufficient_condition",
]
NEGATIVES = [
    "symbolic.path.ut_orientation.negative", "symbolic.path.block_transform.negative",
    "symbolic.path.cross_block.negative", "symbolic.mdn.coefficients.negative",
    "symbolic.mdn.row_shift.negative", "symbolic.mdn.second_order.negative",
]


@pytest.fixture(scope="module")
def results(registry):
    t0 = time.perf_counter()
    out = {cid: registry[cid].run(Context()) for cid in registry if cid.startswith("symbolic.")}
    out["__seconds__"] = time.perf_counter() - t0
    return out


def test_registered_ids_are_exactly_the_issue_list(registry):
    assert sorted(i for i in registry if i.startswith("symbolic.")) == sorted(IDENTITIES + NEGATIVES)


@pytest.mark.parametrize("cid", IDENTITIES)
def test_identity_is_proved_and_tied_to_code(results, cid):
    r = results[cid]
    assert r.status == "pass", r.message
    assert r.measured is None and r.budget is None
    assert "proved exactly" in r.message and "tied to code" in r.message and "hypothesis" in r.message


@pytest.mark.parametrize("cid", NEGATIVES)
def test_negative_control_is_rejected_with_a_concrete_value(results, cid):
    r = results[cid]
    assert r.status == "pass", r.message
    assert "rejected" in r.message and "(nonzero)" in r.message
    assert r.details["witness_value"] not in ("0", "")


def test_family_runs_in_under_two_minutes(results):
    assert results["__seconds__"] < 120, results["__seconds__"]


# ----------------------------------------------------------------------------------------------------
# the proofs themselves


def test_proofs_hold_and_negatives_are_refuted():
    for pr in (SPATH.ut_orientation(3, 2), SPATH.causal_logits(3, 2), SPATH.block_transform(3, 2),
               SPATH.decode_keys(3, 2), SM.coefficients(3), SM.row_shift(3, 2, 1), SM.chunk_output(3, 1, 1)):
        assert pr.holds, pr.name
    for pr in (SPATH.ut_orientation_negative(3, 2), SPATH.block_transform_negative(3, 2),
               SM.coefficients_negative(3), SM.second_order_negative(2, 1)):
        assert not pr.holds and pr.refuted, pr.name
        pt, _, val = pr.witness
        assert val != 0


def test_evaluation_at_a_point_equals_substitution():
    """Proof.evaluate runs the construction on substituted inputs; it must equal substituting into the
    symbolic result (substitution is a ring homomorphism)."""
    import sympy as sp
    from references.symbolic import _evaluate_exact
    pr = SPATH.block_transform(3, 2)
    pt = {g: sp.Rational(i % 7 - 3, 5) for i, g in enumerate(pr.gens)}
    for name in pr.exprs:
        assert pr.evaluate(name, pt) == _evaluate_exact(pr.exprs[name], pr.gens, pt), name


# ----------------------------------------------------------------------------------------------------
# mutations: a wrong edit to references/ turns the tied check red


def _run(registry, cid):
    return registry[cid].run(Context())


def test_mutation_block_transform_without_I_minus(registry, monkeypatch):
    real = PA.block_transform

    def wrong(q, k, w, beta, *args, **kw):
        out = real(q, k, w, beta, *args, **kw)
        out["F"] = w.T @ out["U"].T @ w          # the paper's block product without "I -"
        return out

    assert _run(registry, "symbolic.path.block_transform").status == "pass"
    monkeypatch.setattr(PA, "block_transform", wrong)
    r = _run(registry, "symbolic.path.block_transform")
    assert r.status == "fail" and "DISAGREES" in r.message and "block_transform.F" in r.message, r.message
    # the scan reads F through the same function: the cross-block check turns red too
    assert _run(registry, "symbolic.path.cross_block").status == "fail"


def test_mutation_ut_product_wrong_orientation(registry, monkeypatch):
    real = PA.ut_product
    monkeypatch.setattr(PA, "ut_product", lambda W, beta, order="forward", *a, **kw:
                        real(W, beta, "reverse" if order == "forward" else "forward", *a, **kw))
    r = _run(registry, "symbolic.path.ut_orientation")
    assert r.status == "fail" and "ut_product" in r.message, r.message


def test_mutation_decode_keys_skips_last_update(registry, monkeypatch):
    real = PA.decode_keys

    def wrong(k, w, beta, *args, **kw):                     # forgets the last token's key update
        if k.shape[0] == 1:
            return k.clone()
        return torch.cat([real(k[:-1], w[:-1], beta[:-1], *args, **kw), k[-1:]])

    monkeypatch.setattr(PA, "decode_keys", wrong)
    assert _run(registry, "symbolic.path.decode_keys").status == "fail"


def test_mutation_chunk_output_drops_momentum_term(registry, monkeypatch):
    real = MDN.chunk_step

    def wrong(*args, **kw):
        st = real(*args, **kw)
        st["V_tilde"] = st["U"] - st["Y"] @ st["S0"]         # V~ without + Z M_0
        return st

    monkeypatch.setattr(MDN, "chunk_step", wrong)
    r = _run(registry, "symbolic.mdn.chunk_output")
    assert r.status == "fail" and "V_tilde" in r.message, r.message


def test_mutation_gamma_shift_deletes_diagonal(registry, monkeypatch):
    monkeypatch.setattr(MDN, "gamma_shifted", lambda gamma: torch.tril(gamma, -1))
    r = _run(registry, "symbolic.mdn.row_shift")
    assert r.status == "fail" and "gamma_shifted" in r.message, r.message


def test_mutation_b_with_non_cumulative_alpha(registry, monkeypatch):
    real = MDN.chunk_coefficients

    def wrong(log_alpha, log_mu, beta, form="stable", *args, **kw):
        out = dict(real(log_alpha, log_mu, beta, form, *args, **kw))
        out["b"] = torch.exp(log_alpha) * out["c"]          # b_i = alpha_i c_i
        return out

    monkeypatch.setattr(MDN, "chunk_coefficients", wrong)
    r = _run(registry, "symbolic.mdn.coefficients")
    assert r.status == "fail" and ".b" in r.message, r.message


def test_mutation_transition_matrix_sign(registry, monkeypatch):
    real = SP.transition_matrix

    def wrong(alpha, beta, mu, eta, k, *args, **kw):
        A = real(alpha, beta, mu, eta, k, *args, **kw).clone()
        d = k.shape[0]
        A[:d, d:] = -A[:d, d:]                              # +beta mu I instead of -beta mu I
        return A

    monkeypatch.setattr(SP, "transition_matrix", wrong)
    assert _run(registry, "symbolic.mdn.transition").status == "fail"


def test_mutation_second_order_without_alpha(registry, monkeypatch):
    def wrong(S_prev, S_prev2, k, v, alpha, beta, mu, eta, alpha_prev, beta_prev):
        c = beta * mu / beta_prev
        return ((alpha + c) * S_prev - beta * eta * torch.outer(k, k @ S_prev)      # Table 1: no alpha_t
                - c * alpha_prev * S_prev2 + beta * eta * torch.outer(k, v))

    monkeypatch.setattr(SP, "second_order_step", wrong)
    assert _run(registry, "symbolic.mdn.second_order").status == "fail"


def test_mutation_closed_form_spectrum(registry, monkeypatch):
    real = SP.closed_form_spectrum
    monkeypatch.setattr(SP, "closed_form_spectrum",
                        lambda alpha, beta, mu, eta, d_k, *a, **kw: real(alpha, beta, mu, eta * 0.5, d_k, *a, **kw))
    assert _run(registry, "symbolic.mdn.sufficient_condition").status == "fail"
    assert _run(registry, "symbolic.mdn.transition").status == "fail"
