"""Momentum DeltaNet's step and chunk forms, written once against an operations context (references/ops.py).

float64 torch (references/mdn_oracle.py), the same-dtype implementation (verify/same_dtype.py) and the sympy proofs
(references/symbolic/mdn_proofs.py) all run these functions.  They are not oracles: the token-by-token recurrences
of references/mdn_oracle.py (float64) and references/mdn_oracle_mp.py (mpmath) are, written separately and literally.

Gates are vectors of length L (alpha, mu, beta, eta); q, k, p are L x d_k, v is L x d_v, S and M d_k x d_v.
Chunk indices 1..L are rows 0..L-1.
"""
from __future__ import annotations


def step(ops, S, M, k, v, p, alpha, mu, beta, eta):
    """One token: v~ = v - S^T p;  M' = mu M - eta k v~^T;  S' = alpha S - beta M'.  Returns (v~, S', M').
    (p = alpha k in the paper; with mu = 0 this is Gated DeltaNet with its beta = beta eta.)"""
    v_res = v - ops.mm(S.T, p)
    M = ops.scale(mu, M) - ops.scale(eta, ops.outer(k, v_res))
    return v_res, ops.scale(alpha, S) - ops.scale(beta, M), M


def coefficients(ops, alpha, mu, beta, log_alpha=None, log_mu=None, form="stable") -> dict:
    """Coefficients of one chunk: abar_i = prod_{r<=i} alpha_r, mubar_i = prod_{r<=i} mu_r,
    b_i = abar_i c_i with c_i = sum_{r<=i} beta_r mubar_r / abar_r,
    gamma_{i,j} = sum_{r=j..i} beta_r (abar_i/abar_r)(mubar_r/mubar_j) (j <= i, else 0),
    R_{i,j} = mubar_i / mubar_j (j <= i, else 0).

    form="stable": over rows, R_i = mu_i R_{i-1} + e_i and gamma_i = alpha_i gamma_{i-1} + beta_i R_i, with an
    extra column 0 for a virtual token carrying mubar_0 = 1, so that column 0 of R is mubar and column 0 of
    gamma is b.  Every factor is at most 1 and every term non-negative: each entry carries a relative error
    of O(L u).  No division, no exp: a polynomial in the gates.
    form="log" (the paper): A = cumsum log alpha, U = cumsum log mu, l = logcumsumexp(log beta + U - A),
    l_0 = -inf, b = exp(A + l), c = exp(l), gamma_{i,j} = exp(A_i + l_i - U_j)(1 - exp(l_{j-1} - l_i)),
    R_{i,j} = exp(U_i - U_j).  It cancels catastrophically when mu decays faster than alpha.
    log_alpha, log_mu: the logs as given (default ops.log of alpha, mu).
    """
    L = beta.shape[0]
    if form == "stable":
        eye = ops.eye(L + 1, beta)
        R_row, g_row = eye[0], ops.zeros(L + 1, beta)
        R, gamma = [], []
        for i in range(L):
            R_row = ops.scale(mu[i], R_row) + eye[i + 1]
            g_row = ops.scale(alpha[i], g_row) + ops.scale(beta[i], R_row)
            R.append(R_row), gamma.append(g_row)
        R, gamma = ops.stack(R), ops.stack(gamma)
        return {"abar": ops.cumprod(alpha), "mubar": R[:, 0], "b": gamma[:, 0], "gamma": gamma[:, 1:], "R": R[:, 1:]}
    if form == "log":
        A = ops.cumsum(ops.log(alpha) if log_alpha is None else log_alpha)
        U = ops.cumsum(ops.log(mu) if log_mu is None else log_mu)
        l = ops.logcumsumexp(ops.log(beta) + U - A)
        l_prev = ops.cat([ops.ones(1, l) * ops.neg_inf, l[:-1]])
        gamma = ops.tril(ops.exp(A[:, None] + l[:, None] - U[None, :]) * (1 - ops.exp(l_prev[None, :] - l[:, None])))
        return {"A": A, "U": U, "l": l, "abar": ops.exp(A), "mubar": ops.exp(U), "c": ops.exp(l),
                "b": ops.exp(A + l), "gamma": gamma, "R": ops.tril(ops.exp(U[:, None] - U[None, :]))}
    raise ValueError(f"form must be 'stable' or 'log', not {form!r}")


def shift_rows(ops, gamma):
    """Gamma^-: row i is row i-1 of Gamma, row 0 is zero (v~_i reads S_{i-1})."""
    return ops.cat([ops.zeros((1, gamma.shape[1]), gamma), gamma[:-1]])


def chunk(ops, q, k, v, alpha, beta, eta, p, scale, S0, M0, coef, shift=None) -> dict:
    """One chunk of length L from incoming states (S0, M0), given its coefficient dict.  Returns every
    intermediate:  k^_j = eta_j k_j, P (p_i = alpha_i k_i unless p is given), Gamma, Gamma^- = shift(Gamma),
    system = I + (P K^^T) .* Gamma^-, T = system^-1 (unit lower), U = T V,
    Y = T Diag(abar^-) P, Z = T Diag(b^-) P  (abar^- = (1, abar_1, ...), b^- = (0, b_1, ...)),
    V~ = U - Y S_0 + Z M_0,  O = scale (Diag(abar) Q S_0 - Diag(b) Q M_0 + [(Q K^^T) .* Gamma] V~),
    S = abar_L S_0 - b_L M_0 + sum_j gamma_{L,j} k^_j v~_j^T,  M = mubar_L M_0 - sum_j R_{L,j} k^_j v~_j^T.
    shift: a function G -> Gamma^- other than shift_rows (how a negative control substitutes a wrong one)."""
    mm = ops.mm
    L = k.shape[0]
    k_hat = eta[:, None] * k
    P = alpha[:, None] * k if p is None else p
    Gamma = coef["gamma"]
    Gamma_minus = shift_rows(ops, Gamma) if shift is None else shift(Gamma)
    eye = ops.eye(L, k)
    system = eye + mm(P, k_hat.T) * Gamma_minus
    T = ops.solve_lower(system, eye, unit=True)
    abar_minus = ops.cat([ops.ones(1, k), coef["abar"][:-1]])
    b_minus = ops.cat([ops.zeros(1, k), coef["b"][:-1]])
    U = mm(T, v)
    Y = mm(T, abar_minus[:, None] * P)
    Z = mm(T, b_minus[:, None] * P)
    V_tilde = U - mm(Y, S0) + mm(Z, M0)
    O = ops.scale(scale, mm(coef["abar"][:, None] * q, S0) - mm(coef["b"][:, None] * q, M0)
                  + mm(mm(q, k_hat.T) * Gamma, V_tilde))
    S = ops.scale(coef["abar"][-1], S0) - ops.scale(coef["b"][-1], M0) + mm((Gamma[-1][:, None] * k_hat).T, V_tilde)
    M = ops.scale(coef["mubar"][-1], M0) - mm((coef["R"][-1][:, None] * k_hat).T, V_tilde)
    return {"coefficients": coef, "k_hat": k_hat, "P": P, "Gamma": Gamma, "Gamma_minus": Gamma_minus,
            "system": system, "T": T, "U": U, "Y": Y, "Z": Z, "V_tilde": V_tilde, "O": O,
            "S0": S0, "M0": M0, "S": S, "M": M}
