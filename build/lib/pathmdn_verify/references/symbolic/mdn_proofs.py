"""Exact proofs of the Momentum DeltaNet identities (docs/design.md, "Momentum DeltaNet"), with sympy.

Recurrence (per head; S, M are d_k x d_v):
    v~_t = v_t - S_{t-1}^T p_t   (p_t = alpha_t k_t in the paper; any p_t here unless stated)
    M_t  = mu_t M_{t-1} - eta_t k_t v~_t^T
    S_t  = alpha_t S_{t-1} - beta_t M_t,        o_t = S_t^T q_t
The step, the chunk coefficients (stable and log form), the row shift and the chunk algorithm are the code
that runs, references/mdn_forms.py, called with an exact binding (:class:`pathmdn_verify.references.symbolic.Ring` for
polynomial identities over QQ, :data:`pathmdn_verify.references.symbolic.EXPR` where logs or divisions appear).  The
truths they are compared with are the recurrence run token by token (through the same step function: the
step is the model's definition) and the paper's printed coefficient formulas.
Chunk indices are 1..C in the statements and rows 0..C-1 in arrays.  Gates are positive symbols (so
logarithms are defined).
"""
from __future__ import annotations

from functools import lru_cache
from math import prod

import numpy as np
import sympy as sp

from pathmdn_verify.references import mdn_forms as forms
from pathmdn_verify.references.symbolic import EXPR, Proof, Ring, column, find_witness

# ----------------------------------------------------------------------------------------------------
# Gates and the paper's coefficient formulas (1-based i, j)


@lru_cache(maxsize=None)
def gate_symbols(C: int) -> dict:
    pos = {"positive": True}
    return {n: [sp.Symbol(f"{n}{r}", **pos) for r in range(1, C + 1)] for n in ("alpha", "mu", "beta", "eta")}


def _abar(g, i):
    return prod(g["alpha"][:i]) if i else sp.Integer(1)


def _mubar(g, i):
    return prod(g["mu"][:i]) if i else sp.Integer(1)


def _c(g, i):
    return sum((g["beta"][r - 1] * _mubar(g, r) / _abar(g, r) for r in range(1, i + 1)), sp.Integer(0))


def gamma_product(g, i, j):
    """sum_{r=j..i} beta_r (alpha_{r+1} ... alpha_i)(mu_{j+1} ... mu_r): polynomial, no division."""
    if j > i:
        return sp.Integer(0)
    return sum((g["beta"][r - 1] * prod(g["alpha"][r:i]) * prod(g["mu"][j:r]) for r in range(j, i + 1)),
               sp.Integer(0))


def gamma_sum(g, i, j):
    """sum_{r=j..i} beta_r (abar_i/abar_r)(mubar_r/mubar_j)."""
    return sum((g["beta"][r - 1] * (_abar(g, i) / _abar(g, r)) * (_mubar(g, r) / _mubar(g, j))
                for r in range(j, i + 1)), sp.Integer(0))


def gamma_c(g, i, j):
    """(abar_i / mubar_j)(c_i - c_{j-1}) (the paper, Appendix C)."""
    return _abar(g, i) / _mubar(g, j) * (_c(g, i) - _c(g, j - 1))


def b_product(g, i):
    """b_i = sum_{r<=i} beta_r (alpha_{r+1} ... alpha_i) mubar_r: polynomial."""
    return sum((g["beta"][r - 1] * prod(g["alpha"][r:i]) * _mubar(g, r) for r in range(1, i + 1)), sp.Integer(0))


def _exact(e):
    """Reduce an expression built from logs/exps of positive symbols and rational functions to a
    canonical rational function (exp(log x) = x, exp(a + b) = exp(a) exp(b))."""
    return sp.cancel(sp.expand_power_exp(sp.sympify(e)))


def _vec(xs):
    return EXPR.array(list(xs))


def _mat(name, m, n):
    return sp.Matrix(m, n, lambda i, j: sp.Symbol(f"{name}{i}_{j}"))


def _unroll_scalar(C):
    """The recurrence (mdn_forms.step) with scalar stand-ins: 1 x 1 states S_0, M_0, key 1, p = 0 and value
    x_j, eta = 1, so that x_j stands for the write k^_j v~_j^T (the update only multiplies these by
    scalars, so their coefficients are the matrix case's)."""
    g = gate_symbols(C)
    S0, M0 = sp.symbols("S0 M0")
    x = sp.symbols(f"x1:{C + 1}")
    S, M, Ss, Ms = EXPR.array([[S0]]), EXPR.array([[M0]]), [], []
    one, zero = _vec([1]), _vec([0])
    for t in range(C):
        _, S, M = forms.step(EXPR, S, M, one, _vec([x[t]]), zero, g["alpha"][t], g["mu"][t], g["beta"][t], 1)
        Ss.append(sp.expand(S[0, 0])), Ms.append(sp.expand(M[0, 0]))
    return g, S0, M0, x, Ss, Ms


# ----------------------------------------------------------------------------------------------------
# 7. Cumulative coefficients


@lru_cache(maxsize=None)
def coefficients(C: int = 4) -> Proof:
    g, S0, M0, x, Ss, Ms = _unroll_scalar(C)
    code = {form: forms.coefficients(EXPR, *(_vec(g[n]) for n in ("alpha", "mu", "beta")), form=form)
            for form in ("stable", "log")}
    diffs = []
    for i in range(1, C + 1):
        S_i, M_i = Ss[i - 1], Ms[i - 1]
        truth = {"abar": S_i.coeff(S0), "b": -S_i.coeff(M0), "mubar": M_i.coeff(M0)}
        diffs += [truth["abar"] - _abar(g, i), truth["mubar"] - _mubar(g, i),
                  _exact(truth["b"] - _abar(g, i) * _c(g, i)), truth["b"] - b_product(g, i),
                  _exact(code["log"]["c"][i - 1] - _c(g, i))]
        diffs += [_exact(code[f][n][i - 1] - truth[n]) for f in code for n in truth]
        for j in range(1, C + 1):
            gam = S_i.coeff(x[j - 1])                                 # 0 for j > i
            R = -M_i.coeff(x[j - 1])
            diffs += [_exact(code[f]["gamma"][i - 1, j - 1] - gam) for f in code]
            diffs += [_exact(code[f]["R"][i - 1, j - 1] - R) for f in code]
            if j <= i:
                diffs += [sp.expand(gamma_product(g, i, j) - gam), _exact(gamma_sum(g, i, j) - gam),
                          _exact(gamma_c(g, i, j) - gam), _exact(R - _mubar(g, i) / _mubar(g, j))]
    gens = tuple(g["alpha"]) + tuple(g["mu"]) + tuple(g["beta"])
    return Proof(
        "mdn.coefficients",
        f"for a chunk of {C} tokens, the coefficients read off the unrolled recurrence (S_i = abar_i S_0 - b_i M_0 "
        f"+ sum_j gamma_ij k^_j v~_j^T, M_i = mubar_i M_0 - sum_j R_ij k^_j v~_j^T) equal mdn_forms.coefficients "
        f"in its stable (row recurrence) and log form (exp(A_i + l_i - U_j)(1 - exp(l_(j-1) - l_i)), b_i = "
        f"exp(A_i + l_i), c_i = exp(l_i)), entry by entry including the zeros above the diagonal, and the paper's "
        f"gamma in product form, sum form sum_r beta_r (abar_i/abar_r)(mubar_r/mubar_j) and c-form "
        f"(abar_i/mubar_j)(c_i - c_(j-1)); b_i = abar_i c_i; R_ij = mubar_i/mubar_j",
        "alpha_r, mu_r, beta_r > 0 (for the logarithms); the non-log forms hold for any nonzero gates",
        sp.Matrix(diffs), gens, sizes={"C": C})


def coefficients_negative(C: int = 4) -> Proof:
    g, S0, M0, x, Ss, _ = _unroll_scalar(C)
    diff = sp.Matrix([_exact(g["alpha"][i - 1] * _c(g, i) - (-Ss[i - 1].coeff(M0))) for i in range(1, C + 1)])
    gens = tuple(g["alpha"]) + tuple(g["mu"]) + tuple(g["beta"])
    return Proof(
        "mdn.coefficients.negative",
        "b_i = alpha_i c_i (the non-cumulative alpha of the paper's Eq. (10)) is not the M_0 coefficient b_i",
        "gates > 0", diff, gens, negative=True, sizes={"C": C}, witness=find_witness(diff, gens))


# ----------------------------------------------------------------------------------------------------
# 8. State expansion


@lru_cache(maxsize=None)
def state_expansion(C: int = 4, dk: int = 2, dv: int = 2) -> Proof:
    g = gate_symbols(C)
    S0, M0 = _mat("S0_", dk, dv), _mat("M0_", dk, dv)
    k = [sp.Matrix(sp.symbols(f"k{t}_0:{dk}")) for t in range(1, C + 1)]
    vt = [sp.Matrix(sp.symbols(f"vt{t}_0:{dv}")) for t in range(1, C + 1)]
    S, M, diffs, states = EXPR.array(S0.tolist()), EXPR.array(M0.tolist()), [], {}
    zero = EXPR.zeros(dk)
    for t in range(1, C + 1):       # p = 0: the residual is the given v~_t
        _, S, M = forms.step(EXPR, S, M, _vec(k[t - 1]), _vec(vt[t - 1]), zero,
                             *(g[n][t - 1] for n in ("alpha", "mu", "beta", "eta")))
        S_exp = _abar(g, t) * S0 - _abar(g, t) * _c(g, t) * M0 + sum(
            (gamma_c(g, t, j) * g["eta"][j - 1] * k[j - 1] * vt[j - 1].T for j in range(1, t + 1)), sp.zeros(dk, dv))
        M_exp = _mubar(g, t) * M0 - sum(
            ((_mubar(g, t) / _mubar(g, j)) * g["eta"][j - 1] * k[j - 1] * vt[j - 1].T for j in range(1, t + 1)),
            sp.zeros(dk, dv))
        diffs += list((sp.Matrix(S) - S_exp).applyfunc(sp.cancel)) + list((sp.Matrix(M) - M_exp).applyfunc(sp.cancel))
        states[f"S{t}"] = S_exp
        states[f"M{t}"] = M_exp
    gens = tuple(g["alpha"]) + tuple(g["mu"]) + tuple(g["beta"]) + tuple(g["eta"]) + tuple(S0) + tuple(M0) \
        + tuple(e for kk in k for e in kk) + tuple(e for vv in vt for e in vv)
    return Proof(
        "mdn.state_expansion",
        f"unrolling mdn_forms.step (M_t = mu_t M_(t-1) - eta_t k_t v~_t^T, S_t = alpha_t S_(t-1) - beta_t M_t) for "
        f"i = 1..{C} steps from symbolic ({dk}x{dv}) S_0, M_0 gives exactly S_i = abar_i S_0 - b_i M_0 + "
        f"sum_(j<=i) gamma_ij k^_j v~_j^T (b_i = abar_i c_i, gamma in c-form) and M_i = mubar_i M_0 - "
        f"sum_(j<=i) (mubar_i/mubar_j) k^_j v~_j^T, with the residuals v~_j free symbols (p = 0)",
        "gates nonzero (divisions in the c-form); residuals treated as given",
        sp.Matrix(diffs), gens, states, sizes={"C": C, "dk": dk, "dv": dv},
        extra={"k": k, "vt": vt, "S0": S0, "M0": M0})


# ----------------------------------------------------------------------------------------------------
# 9 and 10. Row shift and the chunk output: polynomial identities over QQ


class ChunkSymbols:
    """One chunk as arrays over QQ[gates, q, k, p, v, S_0, M_0] (ops: the Ring): the recurrence run token by
    token (residuals, states, outputs) and the coefficients of the code's stable form."""

    def __init__(self, C: int, dk: int, dv: int, point: dict | None = None):
        self.C, self.dk, self.dv = C, dk, dv
        g = self.g = gate_symbols(C)
        syms = {n: _mat(n, C, dk) for n in ("q", "k", "p")}
        syms.update(v=_mat("v", C, dv), S0=_mat("S0_", dk, dv), M0=_mat("M0_", dk, dv))
        self.gens = sum((tuple(g[n]) for n in ("alpha", "mu", "beta", "eta")), ()) \
            + sum((tuple(syms[n]) for n in ("q", "k", "p", "v", "S0", "M0")), ())
        ops = self.ops = Ring(self.gens, point)
        self.x = {n: ops.arr(m) for n, m in syms.items()}
        self.x.update({n: ops.arr(g[n]) for n in ("alpha", "mu", "beta", "eta")})
        self.coef = forms.coefficients(ops, self.x["alpha"], self.x["mu"], self.x["beta"])
        S, M = self.x["S0"], self.x["M0"]
        res, outs = [], []
        for t in range(C):
            v_res, S, M = forms.step(ops, S, M, *(self.x[n][t] for n in ("k", "v", "p", "alpha", "mu", "beta", "eta")))
            res.append(v_res), outs.append(S.T @ self.x["q"][t])
        self.V_true, self.O_true, self.S_true, self.M_true = ops.array(res), ops.array(outs), S, M

    def chunk(self, shift=None) -> dict:
        """mdn_forms.chunk on this chunk (scale 1, the given p), with the code's row shift unless told."""
        x = self.x
        return forms.chunk(self.ops, x["q"], x["k"], x["v"], x["alpha"], x["beta"], x["eta"], x["p"], 1,
                           x["S0"], x["M0"], self.coef, shift)


@lru_cache(maxsize=None)
def chunk_symbols(C: int, dk: int, dv: int) -> ChunkSymbols:
    return ChunkSymbols(C, dk, dv)


def _chunk_proof(parts, C, dk, dv, name, statement, hypothesis, negative=False) -> Proof:
    """Run parts(X) symbolically; `at` reruns it with the symbols specialised to a rational point."""
    X = chunk_symbols(C, dk, dv)
    got = parts(X)
    at = lambda pt: parts(ChunkSymbols(C, dk, dv, pt))          # noqa: E731
    return Proof(name, statement, hypothesis, got["difference"], X.gens, negative=negative,
                 sizes={"C": C, "dk": dk, "dv": dv}, at=at,
                 witness=find_witness(got["difference"], X.gens, at=at) if negative else None)


def _row_shift_parts(X, wrong=False):
    st = X.chunk(shift=(lambda G: X.ops.tril(G, -1)) if wrong else None)   # wrong: Gamma's diagonal deleted
    P, one, zero = X.x["p"], X.ops.one, X.ops.zero
    abar_minus = np.concatenate([[one], X.coef["abar"][:-1]])
    b_minus = np.concatenate([[zero], X.coef["b"][:-1]])
    rhs = X.x["v"] - (abar_minus[:, None] * P) @ X.x["S0"] + (b_minus[:, None] * P) @ X.x["M0"]
    return {"difference": st["system"] @ X.V_true - rhs}


@lru_cache(maxsize=None)
def row_shift(C: int = 4, dk: int = 2, dv: int = 1) -> Proof:
    return _chunk_proof(
        _row_shift_parts, C, dk, dv, "mdn.row_shift",
        f"the true residuals v~_i = v_i - S_(i-1)^T p_i of a {C}-token chunk (p_i free, {dk}x{dv} states) satisfy "
        f"mdn_forms.chunk's system [I + (P K^^T) .* Gamma^-] V~ = V - Diag(abar^-) P S_0 + Diag(b^-) P M_0 with "
        f"Gamma^- = mdn_forms.shift_rows(Gamma) (row i = gamma_(i-1, .)), abar^- = (1, abar_1, ...), "
        f"b^- = (0, b_1, ...)",
        "none beyond the recurrence: any p_i (p_i = alpha_i k_i is a special case), any gates; Gamma and b from "
        "the stable form of mdn_forms.coefficients (equal to the paper's forms by symbolic.mdn.coefficients)")


def row_shift_negative(C: int = 4, dk: int = 2, dv: int = 1) -> Proof:
    return _chunk_proof(
        lambda X: _row_shift_parts(X, wrong=True), C, dk, dv, "mdn.row_shift.negative",
        "the system built with Gamma's diagonal deleted (strictLower(Gamma)) instead of the row shift Gamma^- "
        "is not satisfied by the true residuals", "none", negative=True)


def _chunk_parts(X):
    st = X.chunk()
    return {"difference": column(st["V_tilde"] - X.V_true, st["O"] - X.O_true, st["S"] - X.S_true,
                                 st["M"] - X.M_true)}


@lru_cache(maxsize=None)
def chunk_output(C: int = 3, dk: int = 2, dv: int = 2) -> Proof:
    return _chunk_proof(
        _chunk_parts, C, dk, dv, "mdn.chunk_output",
        f"for a {C}-token chunk with symbolic gates, q, k, p, v and {dk}x{dv} states S_0, M_0, mdn_forms.chunk "
        f"(T = [I + (P K^^T) .* Gamma^-]^-1, U = T V, Y = T Diag(abar^-) P, Z = T Diag(b^-) P, V~ = U - Y S_0 + "
        f"Z M_0, O = Diag(abar) Q S_0 - Diag(b) Q M_0 + [(Q K^^T) .* Gamma] V~, S_C = abar_C S_0 - b_C M_0 + "
        f"K^^T Diag(gamma_C) V~, M_C = mubar_C M_0 - K^^T Diag(R_C) V~) gives the recurrence's residuals, "
        f"outputs o_i^T = q_i^T S_i and final states exactly",
        "none beyond the recurrence: any p_i, any gates (the solve is exact: the system is unit lower triangular, "
        "solved by forward substitution without division); stable-form coefficients")


# ----------------------------------------------------------------------------------------------------
# 11. Transition matrix and spectrum


def _matrix_step(S, M, k, v, p, alpha, mu, beta, eta):
    """mdn_forms.step on sympy matrices and column vectors: (S', M') as sympy matrices."""
    _, S, M = forms.step(EXPR, EXPR.array(S.tolist()), EXPR.array(M.tolist()), _vec(k), _vec(v), _vec(p),
                         alpha, mu, beta, eta)
    return sp.Matrix(S), sp.Matrix(M)



@lru_cache(maxsize=None)
def transition(dk: int = 3, dv: int = 2) -> Proof:
    alpha, beta, mu, eta, x = sp.symbols("alpha beta mu eta x")
    k = sp.Matrix(sp.symbols(f"k0:{dk}"))
    v = sp.Matrix(sp.symbols(f"v0:{dv}"))
    S, M = _mat("S", dk, dv), _mat("M", dk, dv)
    I = sp.eye(dk)
    kk = k * k.T
    S1, M1 = _matrix_step(S, M, k, v, alpha * k, alpha, mu, beta, eta)      # one step with p = alpha k
    Amat = sp.Matrix(sp.BlockMatrix([[alpha * I - alpha * beta * eta * kk, -beta * mu * I],
                                     [alpha * eta * kk, mu * I]]).as_explicit())
    step = Amat * sp.Matrix.vstack(S, M) + sp.Matrix.vstack(beta * eta * k * v.T, -eta * k * v.T)
    d_step = (sp.Matrix.vstack(S1, M1) - step).expand()
    nk = (k.T * k)[0]
    r = alpha + mu - alpha * beta * eta * nk
    charpoly = Amat.charpoly(x).as_expr()
    target = (x - alpha) ** (dk - 1) * (x - mu) ** (dk - 1) * (x ** 2 - r * x + alpha * mu)
    d_char = sp.expand(charpoly - target)
    # closed-form pair: roots of x^2 - r x + alpha mu, product alpha mu (modulus sqrt(alpha mu) when complex)
    r1 = alpha + mu - alpha * beta * eta
    disc = sp.sqrt(r1 ** 2 - 4 * alpha * mu)
    lp, lm = (r1 + disc) / 2, (r1 - disc) / 2
    d_roots = [sp.expand(lp ** 2 - r1 * lp + alpha * mu), sp.expand(lm ** 2 - r1 * lm + alpha * mu),
               sp.expand(lp * lm - alpha * mu), sp.expand(lp + lm - r1)]
    # GDN (mu = 0, eta = 1): the key-aligned eigenvalue is alpha (1 - beta), the others alpha and 0
    gdn = sp.factor(((x - alpha) ** (dk - 1) * (x - mu) ** (dk - 1) * (x ** 2 - r1 * x + alpha * mu)).subs(
        {mu: 0, eta: 1}))
    diff = sp.Matrix(list(d_step) + [d_char] + d_roots)
    gens = (alpha, beta, mu, eta) + tuple(k) + tuple(v) + tuple(S) + tuple(M)
    return Proof(
        "mdn.transition",
        f"(d_k={dk}, d_v={dv}, symbolic S, M, k, v) one mdn_forms.step with p = alpha k is exactly (S_t; M_t) = "
        f"A (S; M) + (beta eta k v^T; -eta k v^T) with the block matrix A = (alpha I - alpha beta eta k k^T, "
        f"-beta mu I; alpha eta k k^T, mu I), signs included; the block matrix's characteristic "
        f"polynomial equals (x - alpha)^{dk - 1} (x - mu)^{dk - 1} (x^2 - r x + alpha mu) with "
        f"r = alpha + mu - alpha beta eta ||k||^2 (r = alpha + mu - alpha beta eta for a unit key), and "
        f"lambda_pm = (r +- sqrt(r^2 - 4 alpha mu))/2 are its roots with product alpha mu",
        "none for the step and the polynomial (any k; the unit key only sets ||k||^2 = 1 in r)",
        diff, gens, {"A": Amat}, sizes={"dk": dk, "dv": dv},
        extra={"charpoly": charpoly, "factored": target, "r": r, "x": x, "lambda": (lp, lm),
               "symbols": (alpha, beta, mu, eta, k), "gdn_unit_key_charpoly": gdn})


# ----------------------------------------------------------------------------------------------------
# 12. Second-order rule


def _second_order_setup(dk, dv):
    a0, b0, m0, e0, a1, b1, m1, e1 = sp.symbols("alpha_prev beta_prev mu_prev eta_prev alpha beta mu eta",
                                                 positive=True)
    S2, M2 = _mat("S2_", dk, dv), _mat("M2_", dk, dv)
    kp, k = sp.Matrix(sp.symbols(f"kprev0:{dk}")), sp.Matrix(sp.symbols(f"k0:{dk}"))
    vp, v = sp.Matrix(sp.symbols(f"vprev0:{dv}")), sp.Matrix(sp.symbols(f"v0:{dv}"))

    S1, M1 = _matrix_step(S2, M2, kp, vp, a0 * kp, a0, m0, b0, e0)
    S, _ = _matrix_step(S1, M1, k, v, a1 * k, a1, m1, b1, e1)
    gens = (a0, b0, m0, e0, a1, b1, m1, e1) + tuple(S2) + tuple(M2) + tuple(kp) + tuple(k) + tuple(vp) + tuple(v)
    return locals()


def _second_order_rhs(x, with_alpha=True):
    a = x["a1"] if with_alpha else 1
    c = x["b1"] * x["m1"] / x["b0"]
    I = sp.eye(x["k"].rows)
    return ((x["a1"] + c) * I - a * x["b1"] * x["e1"] * x["k"] * x["k"].T) * x["S1"] \
        - c * x["a0"] * x["S2"] + x["b1"] * x["e1"] * x["k"] * x["v"].T


@lru_cache(maxsize=None)
def second_order(dk: int = 2, dv: int = 2) -> Proof:
    x = _second_order_setup(dk, dv)
    rhs = _second_order_rhs(x)
    diff = (x["S"] - rhs).applyfunc(sp.cancel)
    return Proof(
        "mdn.second_order",
        f"(d_k={dk}, d_v={dv}, symbolic S_(t-2), M_(t-2), keys, values and gates of steps t-1 and t, p = alpha k) "
        f"S_t = [(alpha_t + beta_t mu_t/beta_(t-1)) I - alpha_t beta_t eta_t k_t k_t^T] S_(t-1) - "
        f"(beta_t mu_t alpha_(t-1)/beta_(t-1)) S_(t-2) + beta_t eta_t k_t v_t^T exactly",
        "beta_(t-1) != 0 (M_(t-1) = (alpha_(t-1) S_(t-2) - S_(t-1))/beta_(t-1)); any keys",
        diff, x["gens"], {"S_t": x["S"], "S_prev": x["S1"], "S_prev2": x["S2"]}, sizes={"dk": dk, "dv": dv},
        extra={"setup": x})


def second_order_negative(dk: int = 2, dv: int = 2) -> Proof:
    x = _second_order_setup(dk, dv)
    diff = (_second_order_rhs(x, with_alpha=False) - x["S"]).applyfunc(sp.cancel)
    return Proof(
        "mdn.second_order.negative",
        "Table 1's form, with -beta_t eta_t k_t k_t^T (no alpha_t) as the key-dependent transition term, is not "
        "the MDN recurrence",
        "beta_(t-1) != 0", diff, x["gens"], negative=True, sizes={"dk": dk, "dv": dv},
        witness=find_witness(diff, x["gens"]))


# ----------------------------------------------------------------------------------------------------
# 14. Gated DeltaNet: MDN without momentum

GDN_VARIANTS = {
    "gdn": "S_t = alpha_t (I - beta_t eta_t k_t k_t^T) S_(t-1) + beta_t eta_t k_t v_t^T (GDN with its beta = beta eta)",
    "beta_without_eta": "GDN's rule with its beta = beta alone (eta dropped)",
    "correction_without_alpha": "S_t = (alpha_t I - beta_t eta_t k_t k_t^T) S_(t-1) + beta_t eta_t k_t v_t^T "
                                "(no alpha on the correction term)",
}


def _gdn_difference(T, dk, dv, variant):
    """S_t of mdn_forms.step with mu = 0, p = alpha k, minus S_t of GDN's rule in `variant`, for t = 1..T."""
    g = gate_symbols(T)
    k = [sp.Matrix(sp.symbols(f"k{t}_0:{dk}")) for t in range(1, T + 1)]
    v = [sp.Matrix(sp.symbols(f"v{t}_0:{dv}")) for t in range(1, T + 1)]
    S0, M0 = _mat("S0_", dk, dv), _mat("M0_", dk, dv)
    S, M, S_gdn, diffs = S0, M0, S0, []
    for t in range(T):
        a, b, e = g["alpha"][t], g["beta"][t], g["eta"][t]
        S, M = _matrix_step(S, M, k[t], v[t], a * k[t], a, 0, b, e)
        b_gdn = b if variant == "beta_without_eta" else b * e
        decay = a * sp.eye(dk) - b_gdn * k[t] * k[t].T if variant == "correction_without_alpha" \
            else a * (sp.eye(dk) - b_gdn * k[t] * k[t].T)
        S_gdn = decay * S_gdn + b_gdn * k[t] * v[t].T
        diffs += list((S - S_gdn).expand())
    gens = tuple(g["alpha"]) + tuple(g["beta"]) + tuple(g["eta"]) + tuple(S0) + tuple(M0) \
        + tuple(e for kk in k for e in kk) + tuple(e for vv in v for e in vv)
    return sp.Matrix(diffs), gens


@lru_cache(maxsize=None)
def gdn_reduction(T: int = 2, dk: int = 2, dv: int = 2) -> Proof:
    diff, gens = _gdn_difference(T, dk, dv, "gdn")
    return Proof(
        "mdn.gdn_reduction",
        f"mdn_forms.step with mu = 0 and p = alpha k, run for {T} tokens from symbolic ({dk}x{dv}) S_0 and any M_0, "
        f"is Gated DeltaNet: {GDN_VARIANTS['gdn']}, so fla's gated delta rule is the MDN oracle with no momentum",
        "mu_t = 0 and p_t = alpha_t k_t; any keys (no unit norm), any gates, any M_0 (it is multiplied by mu = 0)",
        diff, gens, sizes={"T": T, "dk": dk, "dv": dv})


def gdn_reduction_negative(variant: str, T: int = 1, dk: int = 2, dv: int = 1) -> Proof:
    diff, gens = _gdn_difference(T, dk, dv, variant)
    return Proof(
        f"mdn.gdn_reduction.negative.{variant}",
        f"{GDN_VARIANTS[variant]} is not MDN with mu = 0, p = alpha k", "mu_t = 0, p_t = alpha_t k_t",
        diff, gens, negative=True, sizes={"T": T, "dk": dk, "dv": dv}, witness=find_witness(diff, gens))


# ----------------------------------------------------------------------------------------------------
# 13. The sufficient condition mu > 1/8


@lru_cache(maxsize=None)
def sufficient_condition() -> Proof:
    alpha, beta, eta, mu = sp.symbols("alpha beta eta mu", real=True)
    r = alpha + mu - alpha * beta * eta
    f = sp.expand(r - mu + sp.Rational(1, 8))           # claim: f >= 0 on the hypothesis set
    # nonnegative slack symbols: a = alpha >= 0, s = 1 - alpha - beta >= 0, e = eta >= 0, h = 2 - eta >= 0,
    # case beta >= 0: bp = beta; case beta < 0: bn = -beta
    a, s, e, h, bp, bn = sp.symbols("a s e h b_plus b_minus", nonnegative=True)
    # case beta >= 0:  f = a bp h + 2 a s + 2 (a - 1/4)^2
    cert_pos = a * bp * h + 2 * a * s + 2 * (a - sp.Rational(1, 4)) ** 2
    d_pos = sp.expand(f.subs({alpha: a, beta: bp, eta: 2 - h}) - cert_pos.subs(s, 1 - a - bp))
    # case beta < 0:  f = a + a bn e + 1/8   (no use of beta <= 1 - alpha or eta <= 2)
    cert_neg = a + a * bn * e + sp.Rational(1, 8)
    d_neg = sp.expand(f.subs({alpha: a, beta: -bn, eta: e}) - cert_neg)
    nonneg = [bool(cert_pos.is_nonnegative), bool(cert_neg.is_positive)]
    # sharpness: the infimum over the closed box is attained at beta = 1 - alpha, eta = 2, alpha = 1/4
    corner = sp.expand(f.subs({beta: 1 - alpha, eta: 2}))           # 2 alpha^2 - alpha + 1/8 = 2(alpha - 1/4)^2
    amin = sp.solve(sp.diff(corner, alpha), alpha)
    minimum = corner.subs(alpha, amin[0]) if len(amin) == 1 else None
    # real parts: for x^2 - r x + alpha mu with r > 0 and alpha mu > 0, lambda_+ + lambda_- = r, lambda_+ lambda_- =
    # alpha mu (Vieta, proved in mdn.transition): real roots share a sign and sum to r > 0; a complex pair has
    # real part r/2 > 0.
    diff = sp.Matrix([d_pos, d_neg, 0 if all(nonneg) else 1, sp.expand(corner - 2 * (alpha - sp.Rational(1, 4)) ** 2),
                      0 if minimum == 0 else 1])
    return Proof(
        "mdn.sufficient_condition",
        "r - mu + 1/8 = alpha beta (2 - eta) + 2 alpha (1 - alpha - beta) + 2 (alpha - 1/4)^2 (beta >= 0) and = "
        "alpha + alpha (-beta) eta + 1/8 (beta < 0): sums of products of nonnegative factors, so r >= mu - 1/8 "
        "whenever alpha >= 0, 0 <= eta <= 2, beta <= 1 - alpha; the bound is sharp (at beta = 1 - alpha, "
        "eta = 2 the value is 2 (alpha - 1/4)^2, minimum 0 at alpha = 1/4); hence mu > 1/8 gives trace r > 0 and "
        "determinant alpha mu > 0, so both key-aligned eigenvalues have positive real part (Vieta)",
        "alpha >= 0, 0 <= eta <= 2, beta <= 1 - alpha (alpha < 1 and beta > 0 are not needed); unit key "
        "(or ||k|| <= 1, which scales eta down); alpha > 0 and mu > 0 for the determinant",
        diff, (alpha, beta, eta, mu), {"r_minus_mu_plus_eighth": sp.Matrix([f])},
        sizes={"scalars": "alpha, beta, eta, mu"},
        extra={"certificate_beta_nonneg": cert_pos, "certificate_beta_neg": cert_neg, "minimum": minimum,
               "argmin": {"alpha": sp.Rational(1, 4), "beta": sp.Rational(3, 4), "eta": 2}})
