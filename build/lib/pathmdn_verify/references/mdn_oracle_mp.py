"""mpmath oracles for Momentum DeltaNet at tiny sizes, for certifying the float64 oracles.

One head; inputs are sequences of rows (anything mp.mpf accepts: floats are taken exactly).  The token
recurrence, written literally at `dps` decimal digits:

    v~_t = v_t - S_{t-1}^T p_t   (p_t = alpha_t k_t unless p is given)
    M_t = mu_t M_{t-1} - eta_t k_t v~_t^T;  S_t = alpha_t S_{t-1} - beta_t M_t;  o_t = scale S_t^T q_t
"""
from __future__ import annotations

import mpmath as mp


def _mat(rows):
    return mp.matrix([[mp.mpf(x) for x in r] for r in rows])


def recurrence_head_mp(q, k, v, log_alpha, log_mu, beta, eta, p=None, scale=1.0, S0=None, M0=None, dps=40):
    """Returns (o [T][Dv], S_T [Dk][Dv], M_T [Dk][Dv]) as lists of mpf."""
    with mp.workdps(dps):
        Q, K, V = _mat(q), _mat(k), _mat(v)
        S = mp.zeros(K.cols, V.cols) if S0 is None else _mat(S0)
        M = mp.zeros(K.cols, V.cols) if M0 is None else _mat(M0)
        out = []
        for t in range(K.rows):
            alpha, mu = mp.exp(mp.mpf(log_alpha[t])), mp.exp(mp.mpf(log_mu[t]))
            k_t, q_t = K[t, :].T, Q[t, :].T
            p_t = alpha * k_t if p is None else _mat([p[t]]).T
            v_res = V[t, :].T - S.T * p_t
            M = mu * M - mp.mpf(eta[t]) * (k_t * v_res.T)
            S = alpha * S - mp.mpf(beta[t]) * M
            o_t = mp.mpf(scale) * (S.T * q_t)
            out.append([o_t[c] for c in range(V.cols)])
        return out, S.tolist(), M.tolist()


def chunk_coefficients_mp(log_alpha, log_mu, beta, dps=150):
    """gamma [L][L] (zero above the diagonal) and b [L] from the product form
    gamma_{i,j} = (abar_i / mubar_j)(c_i - c_{j-1}), b_i = abar_i c_i, c_i = sum_{r<=i} beta_r mubar_r / abar_r,
    at enough digits to absorb its cancellation (c_i - c_{j-1} loses up to |U_j - A_j| / ln 10 digits)."""
    with mp.workdps(dps):
        L = len(beta)
        A, U, c = [], [], []
        a = u = s = mp.mpf(0)
        for r in range(L):
            a, u = a + mp.mpf(log_alpha[r]), u + mp.mpf(log_mu[r])
            s += mp.mpf(beta[r]) * mp.exp(u - a)
            A.append(a), U.append(u), c.append(s)
        gamma = [[mp.exp(A[i] - U[j]) * (c[i] - (c[j - 1] if j else 0)) if j <= i else mp.mpf(0)
                  for j in range(L)] for i in range(L)]
        return gamma, [mp.exp(A[i]) * c[i] for i in range(L)]
