"""symbolic.*: every sympy identity is proved, every printed-but-wrong form is rejected, and a wrong edit to
the code under proof turns its check red: the proofs run references/path_forms.py and references/mdn_forms.py
themselves (mutation tests), and the float64 code they do not run is tied to them by sampling."""
import pytest
import torch

from pathmdn_verify.references import mdn_forms, path_forms
from pathmdn_verify.references import path_oracle as PA
from pathmdn_verify.references import spectra as SP
from pathmdn_verify.references.symbolic import mdn_proofs as SM
from pathmdn_verify.references.symbolic import path_proofs as SPATH
from pathmdn_verify.core.registry import Context

IDENTITIES = [
    "symbolic.path.ut_orientation", "symbolic.path.causal_logits", "symbolic.path.block_transform",
    "symbolic.path.cross_block", "symbolic.path.decode_keys", "symbolic.path.reflection",
    "symbolic.mdn.coefficients", "symbolic.mdn.state_expansion", "symbolic.mdn.row_shift",
    "symbolic.mdn.chunk_output", "symbolic.mdn.transition", "symbolic.mdn.second_order",
    "symbolic.mdn.sufficient_condition", "symbolic.mdn.gdn_reduction",
]
NEGATIVES = [
    "symbolic.path.ut_orientation.negative", "symbolic.path.block_transform.negative",
    "symbolic.path.cross_block.negative", "symbolic.mdn.coefficients.negative",
    "symbolic.mdn.row_shift.negative", "symbolic.mdn.second_order.negative",
    "symbolic.mdn.gdn_reduction.negative.beta_without_eta",
    "symbolic.mdn.gdn_reduction.negative.correction_without_alpha",
]


@pytest.fixture(scope="module")
def results(registry):
    return {cid: registry[cid].run(Context()) for cid in registry if cid.startswith("symbolic.")}


def test_registered_ids_are_exactly_the_issue_list(registry):
    assert sorted(i for i in registry if i.startswith("symbolic.")) == sorted(IDENTITIES + NEGATIVES)


@pytest.mark.parametrize("cid", IDENTITIES)
def test_identity_is_proved_and_runs_or_is_tied_to_code(results, cid):
    r = results[cid]
    assert r.status == "pass", r.message
    assert r.measured is None and r.budget is None
    assert "proved exactly" in r.message and "hypothesis" in r.message
    assert "runs the code itself" in r.message or "tied to code" in r.message


@pytest.mark.parametrize("cid", NEGATIVES)
def test_negative_control_is_rejected_with_a_concrete_value(results, cid):
    r = results[cid]
    assert r.status == "pass", r.message
    assert "rejected" in r.message and "(nonzero)" in r.message
    assert r.details["witness_value"] not in ("0", "")


# ----------------------------------------------------------------------------------------------------
# the proofs themselves


def test_proofs_hold_and_negatives_are_refuted():
    for pr in (SPATH.ut_orientation(3, 2), SPATH.causal_logits(3, 2), SPATH.block_transform(3, 2),
               SPATH.decode_keys(3, 2), SM.coefficients(3), SM.row_shift(3, 2, 1), SM.chunk_output(3, 1, 1),
               SM.gdn_reduction(2, 1, 1)):
        assert pr.holds, pr.name
    for pr in (SPATH.ut_orientation_negative(3, 2), SPATH.block_transform_negative(3, 2),
               SM.coefficients_negative(3), SM.second_order_negative(2, 1),
               SM.gdn_reduction_negative("beta_without_eta", 2, 1, 1)):
        assert not pr.holds and pr.refuted, pr.name
        pt, _, val = pr.witness
        assert val != 0


def test_evaluation_at_a_point_equals_substitution():
    """Proof.evaluate runs the construction on substituted inputs; it must equal substituting into the
    symbolic result (substitution is a ring homomorphism)."""
    import sympy as sp

    from pathmdn_verify.references.symbolic import _evaluate_exact
    for pr in (SPATH.causal_logits(3, 2), SPATH.ut_orientation(3, 2)):
        pt = {g: sp.Rational(i % 7 - 3, 5) for i, g in enumerate(pr.gens)}
        for name in pr.exprs:
            assert pr.evaluate(name, pt) == _evaluate_exact(pr.exprs[name], pr.gens, pt), name


# ----------------------------------------------------------------------------------------------------
# mutations: a wrong edit to the code under proof turns its check red


@pytest.fixture
def fresh_proofs():
    """The MDN proofs are cached per process; a mutation must reach a fresh construction."""
    cached = [f for f in vars(SM).values() if hasattr(f, "cache_clear")]
    for f in cached:
        f.cache_clear()
    yield
    for f in cached:
        f.cache_clear()


def _run(registry, cid):
    return registry[cid].run(Context())


def test_mutation_block_transform_without_I_minus(registry, monkeypatch):
    real = path_forms.block_transform

    def wrong(ops, Q, K, W, beta):
        out = real(ops, Q, K, W, beta)
        out["F"] = ops.mm(ops.mm(W.T, out["U"].T), W)          # the paper's block product without "I -"
        return out

    x = [torch.randn(12, 4, dtype=torch.float64) for _ in range(3)] + [torch.rand(12, dtype=torch.float64)]
    before = PA.blockwise_logits(*x, block=4)[2]
    assert _run(registry, "symbolic.path.block_transform").status == "pass"
    monkeypatch.setattr(path_forms, "block_transform", wrong)
    r = _run(registry, "symbolic.path.block_transform")
    assert r.status == "fail" and "NOT PROVED" in r.message, r.message
    assert _run(registry, "symbolic.path.cross_block").status == "fail"
    # the float64 reference runs the same function: the edit reaches it too
    assert not torch.allclose(PA.blockwise_logits(*x, block=4)[2], before, equal_nan=True)


def test_mutation_ut_product_wrong_orientation(registry, monkeypatch):
    real = path_forms.ut_product
    monkeypatch.setattr(path_forms, "ut_product", lambda ops, W, beta, order="forward":
                        real(ops, W, beta, "reverse" if order == "forward" else "forward"))
    r = _run(registry, "symbolic.path.ut_orientation")
    assert r.status == "fail" and "NOT PROVED" in r.message, r.message


def test_mutation_decode_keys_skips_last_update(registry, monkeypatch):
    real = path_forms.decode_keys

    def wrong(ops, K, W, beta):                        # forgets the last token's key update
        yield from real(ops, K[:-1], W[:-1], beta[:-1])
        yield K

    monkeypatch.setattr(path_forms, "decode_keys", wrong)
    assert _run(registry, "symbolic.path.decode_keys").status == "fail"


def test_mutation_walk_breaks_the_tie(registry, monkeypatch):
    """The literal walk is not the proved code: the sampled tie is what catches an edit to it."""
    real = PA.path_logits
    monkeypatch.setattr(PA, "path_logits", lambda q, k, w, beta: real(q, k, w.flip(0), beta.flip(0)))
    r = _run(registry, "symbolic.path.causal_logits")
    assert r.status == "fail" and "DISAGREES" in r.message and "path_logits" in r.message, r.message


def test_mutation_chunk_output_drops_momentum_term(registry, monkeypatch, fresh_proofs):
    real = mdn_forms.chunk

    def wrong(ops, *args, **kw):
        st = real(ops, *args, **kw)
        st["V_tilde"] = st["U"] - ops.mm(st["Y"], st["S0"])          # V~ without + Z M_0
        return st

    monkeypatch.setattr(mdn_forms, "chunk", wrong)
    r = _run(registry, "symbolic.mdn.chunk_output")
    assert r.status == "fail" and "NOT PROVED" in r.message, r.message


def test_mutation_gamma_shift_deletes_diagonal(registry, monkeypatch, fresh_proofs):
    monkeypatch.setattr(mdn_forms, "shift_rows", lambda ops, gamma: ops.tril(gamma, -1))
    assert _run(registry, "symbolic.mdn.row_shift").status == "fail"
    assert _run(registry, "symbolic.mdn.chunk_output").status == "fail"


def test_mutation_b_with_non_cumulative_alpha(registry, monkeypatch, fresh_proofs):
    real = mdn_forms.coefficients

    def wrong(ops, alpha, mu, beta, *args, **kw):
        out = dict(real(ops, alpha, mu, beta, *args, **kw))
        out["b"] = alpha * out["b"] / out["abar"]                   # b_i = alpha_i c_i
        return out

    monkeypatch.setattr(mdn_forms, "coefficients", wrong)
    assert _run(registry, "symbolic.mdn.coefficients").status == "fail"


def test_mutation_step_without_alpha_on_the_correction(registry, monkeypatch, fresh_proofs):
    """p = k instead of the given p (the residual v - S^T k): the GDN reduction and the chunk proofs fail."""
    real = mdn_forms.step
    monkeypatch.setattr(mdn_forms, "step", lambda ops, S, M, k, v, p, *gates: real(ops, S, M, k, v, k, *gates))
    assert _run(registry, "symbolic.mdn.gdn_reduction").status == "fail"
    assert _run(registry, "symbolic.mdn.chunk_output").status == "fail"


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
