"""Frozen-step spectra of the MDN and GDN state transitions, and MDN's second-order (M-eliminated) rule.

Derivation (one MDN step with p_t = alpha k, per value column; S, M are d_k x d_v):
    M_t = mu M - eta k (v - alpha S^T k)^T            = alpha eta k k^T S + mu M - eta k v^T
    S_t = alpha S - beta M_t                          = (alpha I - alpha beta eta k k^T) S - beta mu M + beta eta k v^T
so (S_t; M_t) = A (S; M) + (beta eta k v^T; -eta k v^T) with the 2 d_k x 2 d_k block matrix
    A = [[alpha I - alpha beta eta k k^T, -beta mu I], [alpha eta k k^T, mu I]]
(docs/design.md section 5, signs included).  For unit k the orthogonal complement of k gives alpha and mu
(d_k - 1 times each, from the block-triangular [[alpha I, -beta mu I], [0, mu I]]); the key direction
gives the 2 x 2 block [[alpha - alpha beta eta, -beta mu], [alpha eta, mu]] with trace
r = alpha + mu - alpha beta eta and determinant alpha mu, so lambda_pm = (r +- sqrt(r^2 - 4 alpha mu)) / 2
and a complex pair has modulus sqrt(alpha mu).  A key of norm n acts like a unit key with eta n^2.
"""
from __future__ import annotations

import torch


def transition_matrix(alpha, beta, mu, eta, k: torch.Tensor) -> torch.Tensor:
    """[[alpha I - alpha beta eta k k^T, -beta mu I], [alpha eta k k^T, mu I]] acting on stacked (S; M)."""
    eye = torch.eye(k.shape[0], dtype=k.dtype, device=k.device)
    kk = torch.outer(k, k)
    return torch.cat([torch.cat([alpha * eye - alpha * beta * eta * kk, -beta * mu * eye], 1),
                      torch.cat([alpha * eta * kk, mu * eye], 1)], 0)


def key_eigenvalues(alpha, beta, mu, eta):
    """lambda_pm = (r +- sqrt(r^2 - 4 alpha mu)) / 2, r = alpha + mu - alpha beta eta (unit key), as complex
    tensors; the arguments may be tensors of any common shape.  Computed without cancellation: the root
    q = (r + sign(r) sqrt(r^2 - 4 alpha mu)) / 2 and its partner alpha mu / q (Vieta)."""
    alpha, beta, mu, eta = (torch.as_tensor(x, dtype=torch.float64) for x in (alpha, beta, mu, eta))
    r = alpha + mu - alpha * beta * eta
    root = torch.sqrt((r * r - 4 * alpha * mu).to(torch.complex128))
    sign = torch.where(r < 0, -1.0, 1.0).to(torch.complex128)
    q = (r + sign * root) / 2
    other = alpha * mu / q
    return torch.where(r < 0, other, q), torch.where(r < 0, q, other)


def closed_form_spectrum(alpha, beta, mu, eta, d_k: int) -> torch.Tensor:
    """All 2 d_k eigenvalues for a unit key: alpha and mu (d_k - 1 times each), lambda_+, lambda_-."""
    lp, lm = key_eigenvalues(alpha, beta, mu, eta)
    rest = [complex(alpha)] * (d_k - 1) + [complex(mu)] * (d_k - 1)
    return torch.tensor(rest + [complex(lp), complex(lm)], dtype=torch.complex128)


def gdn_transition_matrix(alpha, beta, k: torch.Tensor) -> torch.Tensor:
    """Gated DeltaNet, S_t = alpha (I - beta k k^T) S_{t-1} + beta k v^T: the matrix alpha (I - beta k k^T).
    For unit k its eigenvalues are alpha (d_k - 1 times) and alpha (1 - beta): radius alpha when d_k > 1."""
    eye = torch.eye(k.shape[0], dtype=k.dtype, device=k.device)
    return alpha * (eye - beta * torch.outer(k, k))


def second_order_step(S_prev, S_prev2, k, v, alpha, beta, mu, eta, alpha_prev, beta_prev):
    """S_t from S_{t-1}, S_{t-2} with M eliminated through M_{t-1} = (alpha_{t-1} S_{t-2} - S_{t-1}) / beta_{t-1}
    (needs beta_{t-1} != 0; p_t = alpha_t k_t):
    S_t = [(alpha_t + beta_t mu_t / beta_{t-1}) I - alpha_t beta_t eta_t k k^T] S_{t-1}
          - (beta_t mu_t alpha_{t-1} / beta_{t-1}) S_{t-2} + beta_t eta_t k v^T."""
    c = beta * mu / beta_prev
    return ((alpha + c) * S_prev - alpha * beta * eta * torch.outer(k, k @ S_prev)
            - c * alpha_prev * S_prev2 + beta * eta * torch.outer(k, v))
