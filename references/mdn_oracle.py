"""Float64 Momentum DeltaNet (torch; CPU or CUDA): the token recurrence (the oracle, written literally and
separately), the gates, and the chunkwise algorithm of references/mdn_forms.py in torch, every intermediate
exposed by name.

Conventions (docs/design.md sections 3 and 5): q, k, p [B, T, H, Dk], v [B, T, H, Dv], gates [B, T, H],
states S, M [B, H, Dk, Dv].  Per head, with S_0 and M_0 given (zero by default):

    v~_t = v_t - S_{t-1}^T p_t          p_t = alpha_t k_t (the paper), or a given p_t (fla's p_eff)
    M_t  = mu_t M_{t-1} - eta_t k_t v~_t^T
    S_t  = alpha_t S_{t-1} - beta_t M_t
    o_t  = scale S_t^T q_t

Gates arrive as log alpha, log mu (<= 0), beta and eta.  Every function computes in the dtype of its
inputs, so the float32 variants used for the failure map are the same code.  Per-head functions take
[T, d] tensors; the batched functions loop over batch and heads.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from pathmdn_verify.references import mdn_forms as forms
from pathmdn_verify.references.ops import TORCH, TorchOps

# ----------------------------------------------------------------------------------------------------
# The token recurrence


def recurrence_head(q, k, v, log_alpha, log_mu, beta, eta, p=None, scale=1.0, S0=None, M0=None,
                    with_terms=False):
    """One head, token by token, literally as above: q, k, p [T, Dk], v [T, Dv], gates [T], states [Dk, Dv]
    (or any leading dims before T, the heads walked at once).  Returns (o [T, Dv], S_T, M_T), and with
    with_terms also scale |S_t|^T |q_t| [T, Dv] (the magnitude of the terms summed into o_t) from the same walk."""
    heads, Dk, Dv = k.shape[:-2], k.shape[-1], v.shape[-1]
    S = k.new_zeros(*heads, Dk, Dv) if S0 is None else S0
    M = k.new_zeros(*heads, Dk, Dv) if M0 is None else M0
    col = lambda x: x[..., :, None]            # a vector [..., d] as a column [..., d, 1]
    gate = lambda g: g[..., None, None]        # a gate [...] against a state [..., Dk, Dv]
    out, terms = [], []
    # tokens by unbind, not k[t]: autograd then gathers each input's gradient once, where indexing would form a
    # zero [T, d] tensor per token (O(T^2 d): 25x the forward's time at T = 1000)
    t = -2      # the token dim of q, k, v, p (gates: -1)
    steps = zip(q.unbind(t), k.unbind(t), v.unbind(t), log_alpha.unbind(-1), log_mu.unbind(-1), beta.unbind(-1),
                eta.unbind(-1), k.unbind(t) if p is None else p.unbind(t))
    for q_t, k_t, v_t, log_alpha_t, log_mu_t, beta_t, eta_t, given_p_t in steps:
        alpha, mu = torch.exp(log_alpha_t), torch.exp(log_mu_t)
        p_t = alpha[..., None] * k_t if p is None else given_p_t
        v_res = v_t - (S.mT @ col(p_t))[..., 0]
        M = gate(mu) * M - gate(eta_t) * (col(k_t) * v_res[..., None, :])        # k_t v~_t^T
        S = gate(alpha) * S - gate(beta_t) * M
        out.append(scale * (S.mT @ col(q_t))[..., 0])
        if with_terms:
            terms.append(scale * (S.abs().mT @ col(q_t.abs()))[..., 0])
    tokens = lambda xs: torch.stack(xs, dim=-2) if xs else v.new_zeros(*heads, 0, Dv)
    return (tokens(out), S, M, tokens(terms)) if with_terms else (tokens(out), S, M)


def recurrence(q, k, v, log_alpha, log_mu, beta, eta, p=None, scale=None, S0=None, M0=None, with_terms=False):
    """Batched token recurrence, every head of [B, T, H, .] walked at once; scale None means Dk^-1/2 (fla's
    default).  Returns (o, S_T, M_T), and with with_terms the terms' magnitude [B, T, H, Dv] (recurrence_head)."""
    _check_shapes(q, k, v, log_alpha, log_mu, beta, eta, p)
    heads_first = lambda x: None if x is None else x.movedim(1, -1 if x.dim() == 3 else 2)   # [B, H, T, .], [B, H, T]
    o, S, M, *terms = recurrence_head(*map(heads_first, (q, k, v, log_alpha, log_mu, beta, eta, p)),
                                      scale=k.shape[-1] ** -0.5 if scale is None else scale, S0=S0, M0=M0,
                                      with_terms=with_terms)
    return (o.movedim(2, 1), S, M, *(t.movedim(2, 1) for t in terms))


def _check_shapes(q, k, v, log_alpha, log_mu, beta, eta, p):
    B, T, H, Dk = k.shape
    if q.shape != k.shape or v.shape[:3] != (B, T, H) or (p is not None and p.shape != k.shape):
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match")
    for name, g in (("log_alpha", log_alpha), ("log_mu", log_mu), ("beta", beta), ("eta", eta)):
        if g.shape != (B, T, H):
            raise ValueError(f"{name} {tuple(g.shape)} must be [B, T, H] = {(B, T, H)}")


def _per_head(head_fn, q, k, v, log_alpha, log_mu, beta, eta, p, scale, S0, M0, **kw):
    """head_fn on each of the B x H heads, all heads at once (torch.vmap: one launch per operation whatever
    B x H is; every value as the head-by-head loop gives it).  Returns (o [B, T, H, Dv], S_T, M_T)."""
    _check_shapes(q, k, v, log_alpha, log_mu, beta, eta, p)
    B, T, H, Dk = k.shape
    scale = Dk ** -0.5 if scale is None else scale
    tokens = {"q": q, "k": k, "v": v, "log_alpha": log_alpha, "log_mu": log_mu, "beta": beta, "eta": eta, "p": p}
    states = {"S0": S0, "M0": M0}
    x = {**{n: t.movedim(2, 1).flatten(0, 1) for n, t in tokens.items() if t is not None},    # [B H, T, .]
         **{n: t.flatten(0, 1) for n, t in states.items() if t is not None}}                 # [B H, Dk, Dv]

    def head(x):
        return head_fn(x["q"], x["k"], x["v"], x["log_alpha"], x["log_mu"], x["beta"], x["eta"], x.get("p"), scale,
                       x.get("S0"), x.get("M0"), **kw)[:3]

    o, S, M = torch.vmap(head)(x)
    return (o.unflatten(0, (B, H)).movedim(1, 2), S.unflatten(0, (B, H)), M.unflatten(0, (B, H)))


# ----------------------------------------------------------------------------------------------------
# Gates (paper Sec. 3.3)

# The paper gives no values for tau, s, a, b.  The defaults are the centres of the initialisation in the
# authors' layer (HuuYuLong/MomentumDeltaNet, fla/layers/momentum_deltanet.py): tau = sqrt(hidden_size)
# = 32 for the 400M/1.3B configs (hidden_size 1024, tau_factor 1); s = exp(log_factor), log_factor =
# log U(0, 4) -> 2; a = exp(A_log), A = U(0, 16) -> 8; b = dt_bias = softplus^-1(dt), dt log-uniform on
# [1e-3, 1e-1] -> softplus^-1(0.01).  The authors initialise mu's (a, b) (Mu_log, mu_bias) the same way,
# so a_mu, b_mu default to a, b.  floor = -2 is the reported experiments' min_log_mu (Tables 4 and 6).
TAU, S_FACTOR, A_SCALE, B_SHIFT = 32.0, 2.0, 8.0, math.log(math.expm1(0.01))


def gates(x_eta, x_a, x_b, x_mu, tau=TAU, s=S_FACTOR, a=A_SCALE, b=B_SHIFT, floor=-2.0, a_mu=None, b_mu=None,
          use_beta=True):
    """Raw projections (W x) -> (log alpha, beta, log mu, eta):

    eta = 1 + tanh(x_eta / tau) in (0, 2);  theta = arctan(s eta);
    alpha_max = cos^2 theta, beta_max = sin^2 theta (so alpha + beta <= 1);
    log alpha = f(x_a) + log alpha_max;  beta = sigmoid(x_b) beta_max;  log mu = max(f_mu(x_mu), floor);
    f(z) = -a softplus(z + b).  floor=None leaves log mu unclamped; use_beta False: beta = beta_max (no
    sigmoid gate).  (In floating point eta reaches 0 or 2 exactly once |x_eta / tau| > ~19.)
    """
    a_mu = a if a_mu is None else a_mu
    b_mu = b if b_mu is None else b_mu
    eta = 1 + torch.tanh(x_eta / tau)
    theta = torch.atan(s * eta)
    alpha_max, beta_max = torch.cos(theta) ** 2, torch.sin(theta) ** 2
    log_alpha = -a * F.softplus(x_a + b) + torch.log(alpha_max)
    beta = torch.sigmoid(x_b) * beta_max if use_beta else beta_max
    log_mu = -a_mu * F.softplus(x_mu + b_mu)
    if floor is not None:
        log_mu = torch.clamp(log_mu, min=floor)
    return log_alpha, beta, log_mu, eta


# ----------------------------------------------------------------------------------------------------
# The chunk forms (references/mdn_forms.py) in torch.  chunk_step looks chunk_coefficients and gamma_shifted
# up in this module at call time, so a monkeypatched one reaches it (the planted-bug tests rely on that).


def chunk_coefficients(log_alpha, log_mu, beta, form="stable") -> dict:
    """mdn_forms.coefficients from log gates; the stable form also gets c = b / abar."""
    coef = forms.coefficients(TORCH, torch.exp(log_alpha), torch.exp(log_mu), beta, log_alpha, log_mu, form)
    return {**coef, "c": coef["b"] / coef["abar"]} if form == "stable" else coef


def gamma_shifted(gamma: torch.Tensor) -> torch.Tensor:
    """Gamma^-: row i is row i-1 of Gamma, row 0 is zero (v~_i reads S_{i-1})."""
    return forms.shift_rows(TORCH, gamma)


def chunk_step(q, k, v, log_alpha, log_mu, beta, eta, p, scale, S0, M0, form="stable", shift=None,
               mm=torch.matmul):
    """One chunk (mdn_forms.chunk): a dict of every intermediate.  form: "stable", "log", or a function
    (log_alpha, log_mu, beta) -> coefficient dict; shift: a row shift other than gamma_shifted (negative
    controls substitute wrong variants through these two); mm: the matrix product (a same-dtype
    implementation passes one that rounds its operands)."""
    coef = form(log_alpha, log_mu, beta) if callable(form) else chunk_coefficients(log_alpha, log_mu, beta, form)
    return forms.chunk(TorchOps(mm), q, k, v, torch.exp(log_alpha), beta, eta, p, scale, S0, M0, coef,
                       gamma_shifted if shift is None else shift)


def chunk_forward_head(q, k, v, log_alpha, log_mu, beta, eta, p=None, scale=1.0, S0=None, M0=None, chunk=64,
                       form="stable", shift=None, mm=torch.matmul):
    """One head by chunks of `chunk` tokens (the last one may be shorter).  Returns
    (o [T, Dv], S_T, M_T, intermediates): one chunk_step dict per chunk, in order."""
    Dk, Dv = k.shape[-1], v.shape[-1]
    S = k.new_zeros(Dk, Dv) if S0 is None else S0
    M = k.new_zeros(Dk, Dv) if M0 is None else M0
    steps = []
    for s in range(0, k.shape[0], chunk):
        e = s + chunk
        st = chunk_step(q[s:e], k[s:e], v[s:e], log_alpha[s:e], log_mu[s:e], beta[s:e], eta[s:e],
                        None if p is None else p[s:e], scale, S, M, form, shift, mm)
        steps.append(st)
        S, M = st["S"], st["M"]
    o = torch.cat([st["O"] for st in steps]) if steps else v.new_zeros(0, Dv)
    return o, S, M, steps


def chunk_forward(q, k, v, log_alpha, log_mu, beta, eta, p=None, scale=None, S0=None, M0=None, chunk=64,
                  form="stable", mm=torch.matmul):
    """Batched chunkwise algorithm; returns (o, S_T, M_T) (chunk_forward_head gives the intermediates)."""
    return _per_head(chunk_forward_head, q, k, v, log_alpha, log_mu, beta, eta, p, scale, S0, M0,
                     chunk=chunk, form=form, mm=mm)
