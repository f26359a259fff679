"""Exact proofs of the Momentum DeltaNet identities (DESIGN.md section 3, "MDN"), with sympy.

Recurrence (per head; S, M are d_k x d_v):
    v~_t = v_t - S_{t-1}^T p_t   (p_t = alpha_t k_t in the paper; any p_t here unless stated)
    M_t  = mu_t M_{t-1} - eta_t k_t v~_t^T
    S_t  = alpha_t S_{t-1} - beta_t M_t,        o_t = S_t^T q_t
Chunk indices are 1..C in the statements and rows 0..C-1 in matrices.  Gates are positive symbols (so
logarithms are defined); the identities are otherwise exact rational-function identities, checked with
``cancel`` (coefficients, expansion, second-order rule) or as polynomial identities over QQ (row shift,
chunk output: there Gamma and b are taken in their polynomial product form, which
:func:`coefficients` proves equal to the c-form, the sum form, the recurrence and the log form).
"""
from __future__ import annotations

from functools import lru_cache
from math import prod

import sympy as sp

from references.symbolic import PolyAlgebra, Proof, find_witness

# ----------------------------------------------------------------------------------------------------
# Gates and the coefficient forms (1-based i, j)


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
    """sum_{r=j..i} beta_r (abar_i/abar_r)(mubar_r/mubar_j) (DESIGN.md)."""
    return sum((g["beta"][r - 1] * (_abar(g, i) / _abar(g, r)) * (_mubar(g, r) / _mubar(g, j))
                for r in range(j, i + 1)), sp.Integer(0))


def gamma_c(g, i, j):
    """(abar_i / mubar_j)(c_i - c_{j-1}) (the paper, Appendix C)."""
    return _abar(g, i) / _mubar(g, j) * (_c(g, i) - _c(g, j - 1))


def gamma_recurrence(g, i, j):
    """gamma_{i,j} = alpha_i gamma_{i-1,j} + beta_i mubar_i / mubar_j, gamma_{j-1,j} = 0."""
    val = sp.Integer(0)
    for r in range(j, i + 1):
        val = g["alpha"][r - 1] * val + g["beta"][r - 1] * _mubar(g, r) / _mubar(g, j)
    return val


def _log_quantities(g, C):
    A = [sum((sp.log(a) for a in g["alpha"][:i]), sp.Integer(0)) for i in range(C + 1)]
    U = [sum((sp.log(m) for m in g["mu"][:i]), sp.Integer(0)) for i in range(C + 1)]
    terms = [sp.log(g["beta"][r - 1]) + U[r] - A[r] for r in range(1, C + 1)]
    l = [-sp.oo] + [sp.log(sum((sp.exp(t) for t in terms[:i]), sp.Integer(0))) for i in range(1, C + 1)]
    return A, U, l


def gamma_log(g, i, j, logq):
    """exp(A_i + l_i - U_j)(1 - exp(l_{j-1} - l_i)), l_0 = -inf (the paper's log domain)."""
    A, U, l = logq
    return sp.exp(A[i] + l[i] - U[j]) * (1 - sp.exp(l[j - 1] - l[i]))


def b_product(g, i):
    """b_i = sum_{r<=i} beta_r (alpha_{r+1} ... alpha_i) mubar_r: polynomial."""
    return sum((g["beta"][r - 1] * prod(g["alpha"][r:i]) * _mubar(g, r) for r in range(1, i + 1)), sp.Integer(0))


def _exact(e):
    """Reduce an expression built from logs/exps of positive symbols and rational functions to a
    canonical rational function (exp(log x) = x, exp(a + b) = exp(a) exp(b))."""
    return sp.cancel(sp.expand_power_exp(sp.sympify(e)))


def _unroll_scalar(C):
    """The recurrence with scalar stand-ins: S_0, M_0 and x_j for the write k^_j v~_j^T (the update only
    multiplies these by scalars, so their coefficients are the matrix case's)."""
    g = gate_symbols(C)
    S0, M0 = sp.symbols("S0 M0")
    x = sp.symbols(f"x1:{C + 1}")
    S, M, Ss, Ms = S0, M0, [], []
    for t in range(C):
        M = sp.expand(g["mu"][t] * M - x[t])
        S = sp.expand(g["alpha"][t] * S - g["beta"][t] * M)
        Ss.append(S), Ms.append(M)
    return g, S0, M0, x, Ss, Ms


# ----------------------------------------------------------------------------------------------------
# 7. Cumulative coefficients


@lru_cache(maxsize=None)
def coefficients(C: int = 4) -> Proof:
    g, S0, M0, x, Ss, Ms = _unroll_scalar(C)
    logq = _log_quantities(g, C)
    A, U, l = logq
    diffs = []
    gam = sp.zeros(C, C)
    Rm = sp.zeros(C, C)
    for i in range(1, C + 1):
        S_i, M_i = Ss[i - 1], Ms[i - 1]
        abar_t, b_t = S_i.coeff(S0), -S_i.coeff(M0)
        diffs += [abar_t - _abar(g, i), M_i.coeff(M0) - _mubar(g, i),
                  _exact(b_t - _abar(g, i) * _c(g, i)), b_t - b_product(g, i),
                  _exact(sp.exp(A[i] + l[i]) - b_t), _exact(sp.exp(l[i]) - _c(g, i))]
        for j in range(1, i + 1):
            truth = S_i.coeff(x[j - 1])
            gam[i - 1, j - 1] = truth
            Rm[i - 1, j - 1] = -M_i.coeff(x[j - 1])
            diffs += [sp.expand(gamma_product(g, i, j) - truth), _exact(gamma_sum(g, i, j) - truth),
                      _exact(gamma_c(g, i, j) - truth), _exact(gamma_recurrence(g, i, j) - truth),
                      _exact(gamma_log(g, i, j, logq) - truth), _exact(Rm[i - 1, j - 1] - _mubar(g, i) / _mubar(g, j))]
    gens = tuple(g["alpha"]) + tuple(g["mu"]) + tuple(g["beta"])
    exprs = {"abar": sp.Matrix([_abar(g, i) for i in range(1, C + 1)]),
             "mubar": sp.Matrix([_mubar(g, i) for i in range(1, C + 1)]),
             "c": sp.Matrix([sp.cancel(_c(g, i)) for i in range(1, C + 1)]),
             "b": sp.Matrix([b_product(g, i) for i in range(1, C + 1)]),
             "gamma": gam, "R": Rm}
    return Proof(
        "mdn.coefficients",
        f"for a chunk of {C} tokens, the coefficients read off the unrolled recurrence (S_i = abar_i S_0 - b_i M_0 "
        f"+ sum_j gamma_ij k^_j v~_j^T, M_i = mubar_i M_0 - sum_j R_ij k^_j v~_j^T) equal gamma_ij in product "
        f"form, sum form sum_r beta_r (abar_i/abar_r)(mubar_r/mubar_j), c-form (abar_i/mubar_j)(c_i - c_(j-1)), "
        f"row recurrence and log form exp(A_i + l_i - U_j)(1 - exp(l_(j-1) - l_i)); b_i = abar_i c_i = "
        f"exp(A_i + l_i); exp(l_i) = c_i; R_ij = mubar_i/mubar_j",
        "alpha_r, mu_r, beta_r > 0 (for the logarithms); the non-log forms hold for any nonzero gates",
        sp.Matrix(diffs), gens, exprs, sizes={"C": C})


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


def _mat(name, m, n):
    return sp.Matrix(m, n, lambda i, j: sp.Symbol(f"{name}{i}_{j}"))


@lru_cache(maxsize=None)
def state_expansion(C: int = 4, dk: int = 2, dv: int = 2) -> Proof:
    g = gate_symbols(C)
    S0, M0 = _mat("S0_", dk, dv), _mat("M0_", dk, dv)
    k = [sp.Matrix(sp.symbols(f"k{t}_0:{dk}")) for t in range(1, C + 1)]
    vt = [sp.Matrix(sp.symbols(f"vt{t}_0:{dv}")) for t in range(1, C + 1)]
    S, M, diffs, states = S0, M0, [], {}
    for t in range(1, C + 1):
        M = g["mu"][t - 1] * M - g["eta"][t - 1] * k[t - 1] * vt[t - 1].T
        S = g["alpha"][t - 1] * S - g["beta"][t - 1] * M
        S_exp = _abar(g, t) * S0 - _abar(g, t) * _c(g, t) * M0 + sum(
            (gamma_c(g, t, j) * g["eta"][j - 1] * k[j - 1] * vt[j - 1].T for j in range(1, t + 1)), sp.zeros(dk, dv))
        M_exp = _mubar(g, t) * M0 - sum(
            ((_mubar(g, t) / _mubar(g, j)) * g["eta"][j - 1] * k[j - 1] * vt[j - 1].T for j in range(1, t + 1)),
            sp.zeros(dk, dv))
        diffs += list((S - S_exp).applyfunc(sp.cancel)) + list((M - M_exp).applyfunc(sp.cancel))
        states[f"S{t}"] = S_exp
        states[f"M{t}"] = M_exp
    gens = tuple(g["alpha"]) + tuple(g["mu"]) + tuple(g["beta"]) + tuple(g["eta"]) + tuple(S0) + tuple(M0) \
        + tuple(e for kk in k for e in kk) + tuple(e for vv in vt for e in vv)
    return Proof(
        "mdn.state_expansion",
        f"unrolling M_t = mu_t M_(t-1) - eta_t k_t v~_t^T, S_t = alpha_t S_(t-1) - beta_t M_t for i = 1..{C} steps "
        f"from symbolic ({dk}x{dv}) S_0, M_0 gives exactly S_i = abar_i S_0 - b_i M_0 + sum_(j<=i) gamma_ij "
        f"k^_j v~_j^T (b_i = abar_i c_i, gamma in c-form) and M_i = mubar_i M_0 - sum_(j<=i) (mubar_i/mubar_j) "
        f"k^_j v~_j^T, with the residuals v~_j free symbols",
        "gates nonzero (divisions in the c-form); residuals treated as given",
        sp.Matrix(diffs), gens, states, sizes={"C": C, "dk": dk, "dv": dv},
        extra={"k": k, "vt": vt, "S0": S0, "M0": M0})


# ----------------------------------------------------------------------------------------------------
# 9 and 10. Row shift and the chunk output: polynomial identities over QQ


class ChunkSymbols:
    """Everything of one chunk as matrices over QQ[gates, q, k, p, v, S_0, M_0], the true recurrence
    (residuals, states, outputs) and the chunk algorithm's closed forms."""

    def __init__(self, C: int, dk: int, dv: int, point: dict | None = None):
        self.C, self.dk, self.dv = C, dk, dv
        g = self.g = gate_symbols(C)
        self.Qs, self.Ks, self.Ps = _mat("q", C, dk), _mat("k", C, dk), _mat("p", C, dk)
        self.Vs = _mat("v", C, dv)
        self.S0s, self.M0s = _mat("S0_", dk, dv), _mat("M0_", dk, dv)
        self.gens = (tuple(g["alpha"]) + tuple(g["mu"]) + tuple(g["beta"]) + tuple(g["eta"]) + tuple(self.Qs)
                     + tuple(self.Ks) + tuple(self.Ps) + tuple(self.Vs) + tuple(self.S0s) + tuple(self.M0s))
        A = self.alg = PolyAlgebra(self.gens, point)
        self.Q, self.K, self.P, self.V = (A.mat(x) for x in (self.Qs, self.Ks, self.Ps, self.Vs))
        self.S0, self.M0 = A.mat(self.S0s), A.mat(self.M0s)
        sc = A.scalar
        self.alpha, self.mu, self.beta, self.eta = ([sc(x) for x in g[n]] for n in ("alpha", "mu", "beta", "eta"))
        self.Khat = A.diag(self.eta) * self.K
        self.Gamma = A.build([[sc(gamma_product(g, i, j)) for j in range(1, C + 1)] for i in range(1, C + 1)])
        self.abar = [sc(_abar(g, i)) for i in range(1, C + 1)]
        self.mubar = [sc(_mubar(g, i)) for i in range(1, C + 1)]
        self.b = [sc(b_product(g, i)) for i in range(1, C + 1)]
        self._recurrence()

    def _recurrence(self):
        A = self.alg
        S, M = self.S0, self.M0
        res, outs, self.states = [], [], []
        for t in range(self.C):
            p = A.build([self.P.to_list()[t]]).transpose()
            k = A.build([self.K.to_list()[t]]).transpose()
            q = A.build([self.Q.to_list()[t]]).transpose()
            v = A.build([self.V.to_list()[t]]).transpose()
            vt = v - S.transpose() * p
            M = A.smul(self.mu[t], M) - A.smul(self.eta[t], k * vt.transpose())
            S = A.smul(self.alpha[t], S) - A.smul(self.beta[t], M)
            res.append(vt.transpose().to_list()[0])
            outs.append((S.transpose() * q).transpose().to_list()[0])
            self.states.append((S, M))
        self.V_true = A.build(res)
        self.O_true = A.build(outs)
        self.S_true, self.M_true = self.states[-1]

    def shifted(self, G):
        """Gamma^-: row i = row i-1 of G, row 0 zero."""
        A = self.alg
        rows = G.to_list()
        return A.build([[A.R.zero] * self.C] + rows[:-1])

    def system(self, Gminus):
        return self.alg.eye(self.C) + self.alg.hadamard(self.P * self.Khat.transpose(), Gminus)

    def minus(self, xs, first):
        return self.alg.diag([first] + xs[:-1])


@lru_cache(maxsize=None)
def chunk_symbols(C: int, dk: int, dv: int) -> ChunkSymbols:
    return ChunkSymbols(C, dk, dv)


def _chunk_proof(parts, C, dk, dv, name, statement, hypothesis, exprs, negative=False) -> Proof:
    """Run parts(X) symbolically; `at` reruns it with the symbols specialised to a rational point."""
    X = chunk_symbols(C, dk, dv)
    got = parts(X)
    at = lambda pt: parts(ChunkSymbols(C, dk, dv, pt))          # noqa: E731
    return Proof(name, statement, hypothesis, got["difference"], X.gens, {n: got[n] for n in exprs},
                 negative=negative, sizes={"C": C, "dk": dk, "dv": dv}, at=at,
                 witness=find_witness(got["difference"], X.gens, at=at) if negative else None)


def _row_shift_parts(X, wrong=False):
    A = X.alg
    G = A.tril(X.Gamma, -1) if wrong else X.shifted(X.Gamma)      # wrong: Gamma with its diagonal deleted
    rhs = X.V - X.minus(X.abar, A.R.one) * X.P * X.S0 + X.minus(X.b, A.R.zero) * X.P * X.M0
    return {"difference": X.system(G) * X.V_true - rhs, "Gamma": X.Gamma, "Gamma_minus": G,
            "system": X.system(G), "V_tilde": X.V_true}


@lru_cache(maxsize=None)
def row_shift(C: int = 4, dk: int = 2, dv: int = 1) -> Proof:
    return _chunk_proof(
        _row_shift_parts, C, dk, dv, "mdn.row_shift",
        f"the true residuals v~_i = v_i - S_(i-1)^T p_i of a {C}-token chunk (p_i free, {dk}x{dv} states) satisfy "
        f"[I + (P K^^T) .* Gamma^-] V~ = V - Diag(abar^-) P S_0 + Diag(b^-) P M_0 with Gamma^- = Gamma shifted "
        f"down one row (row i = gamma_(i-1, .)), abar^- = (1, abar_1, ...), b^- = (0, b_1, ...)",
        "none beyond the recurrence: any p_i (p_i = alpha_i k_i is a special case), any gates; Gamma and b in "
        "their polynomial product form, equal to the c-form by symbolic.mdn.coefficients",
        ("Gamma", "Gamma_minus", "system", "V_tilde"))


def row_shift_negative(C: int = 4, dk: int = 2, dv: int = 1) -> Proof:
    return _chunk_proof(
        lambda X: _row_shift_parts(X, wrong=True), C, dk, dv, "mdn.row_shift.negative",
        "the system built with Gamma's diagonal deleted (strictLower(Gamma)) instead of the row shift Gamma^- "
        "is not satisfied by the true residuals", "none", (), negative=True)


def _chunk_parts(X):
    A = X.alg
    C = X.C
    Gm = X.shifted(X.Gamma)
    T = A.unit_lower_inverse(X.system(Gm))
    U = T * X.V
    Y = T * X.minus(X.abar, A.R.one) * X.P
    Z = T * X.minus(X.b, A.R.zero) * X.P
    Vt = U - Y * X.S0 + Z * X.M0
    O = A.diag(X.abar) * X.Q * X.S0 - A.diag(X.b) * X.Q * X.M0 \
        + A.hadamard(X.Q * X.Khat.transpose(), X.Gamma) * Vt
    last = C - 1
    gl = A.diag(X.Gamma.to_list()[last])
    Rl = A.diag([A.scalar(_mubar(X.g, C) / _mubar(X.g, j)) for j in range(1, C + 1)])
    S_C = A.smul(X.abar[last], X.S0) - A.smul(X.b[last], X.M0) + X.Khat.transpose() * gl * Vt
    M_C = A.smul(X.mubar[last], X.M0) - X.Khat.transpose() * Rl * Vt
    diff = A.column(Vt - X.V_true, O - X.O_true, S_C - X.S_true, M_C - X.M_true)
    return {"difference": diff, "O": X.O_true, "S": X.S_true, "M": X.M_true, "V_tilde": X.V_true,
            "T": T, "U": U, "Y": Y, "Z": Z}


@lru_cache(maxsize=None)
def chunk_output(C: int = 3, dk: int = 2, dv: int = 2) -> Proof:
    return _chunk_proof(
        _chunk_parts, C, dk, dv, "mdn.chunk_output",
        f"for a {C}-token chunk with symbolic gates, q, k, p, v and {dk}x{dv} states S_0, M_0: T = [I + (P K^^T) .* "
        f"Gamma^-]^-1, U = T V, Y = T Diag(abar^-) P, Z = T Diag(b^-) P give V~ = U - Y S_0 + Z M_0 equal to the "
        f"recurrence's residuals, O = Diag(abar) Q S_0 - Diag(b) Q M_0 + [(Q K^^T) .* Gamma] V~ equal to its outputs "
        f"o_i^T = q_i^T S_i, and the carried states S_C = abar_C S_0 - b_C M_0 + K^^T Diag(gamma_C) V~, "
        f"M_C = mubar_C M_0 - K^^T Diag(mubar_C/mubar_j) V~ equal to its final states",
        "none beyond the recurrence: any p_i, any gates (the solve is exact: the system is unit lower triangular, "
        "its inverse a finite Neumann series); Gamma and b in product form (= c-form by symbolic.mdn.coefficients)",
        ("O", "S", "M", "V_tilde", "T", "U", "Y", "Z"))


# ----------------------------------------------------------------------------------------------------
# 11. Transition matrix and spectrum


@lru_cache(maxsize=None)
def transition(dk: int = 3, dv: int = 2) -> Proof:
    alpha, beta, mu, eta, x = sp.symbols("alpha beta mu eta x")
    k = sp.Matrix(sp.symbols(f"k0:{dk}"))
    v = sp.Matrix(sp.symbols(f"v0:{dv}"))
    S, M = _mat("S", dk, dv), _mat("M", dk, dv)
    I = sp.eye(dk)
    kk = k * k.T
    # one recurrence step with p = alpha k
    vt = v - S.T * (alpha * k)
    M1 = mu * M - eta * k * vt.T
    S1 = alpha * S - beta * M1
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
        f"(d_k={dk}, d_v={dv}, symbolic S, M, k, v) one MDN step with p = alpha k is exactly (S_t; M_t) = "
        f"A (S; M) + (beta eta k v^T; -eta k v^T) with the block matrix A = (alpha I - alpha beta eta k k^T, "
        f"-beta mu I; alpha eta k k^T, mu I) of DESIGN.md, signs included; the block matrix's characteristic "
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

    def step(S, M, alpha, beta, mu, eta, k, v):
        vt = v - S.T * (alpha * k)
        M = mu * M - eta * k * vt.T
        return alpha * S - beta * M, M

    S1, M1 = step(S2, M2, a0, b0, m0, e0, kp, vp)
    S, _ = step(S1, M1, a1, b1, m1, e1, k, v)
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
