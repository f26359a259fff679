"""oracle.spectra.*: frozen-step spectra of MDN and GDN, and MDN's second-order (M-eliminated) rule.

The block transition matrix is first checked against one step of the recurrence (that fixes its signs),
then its closed-form spectrum against numerical eigenvalues, the complex pair's modulus, the mu > 1/8
sufficient condition for positive real parts (and a sampled counterexample below 1/8), GDN's spectral
radius, and the second-order rule against the two-state recurrence.  Negative controls end in .negative.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from pathmdn_verify.references import mdn_oracle as mdn
from pathmdn_verify.references.spectra import (
    closed_form_spectrum,
    gdn_transition_matrix,
    key_eigenvalues,
    second_order_step,
    transition_matrix,
)
from pathmdn_verify.core.metrics import rel_err
from pathmdn_verify.core.registry import Context, Result, check, rejects, within

EXACT = 1e-12          # a frozen step or the second-order rule vs the recurrence
EIG = 1e-10            # closed-form vs numerical eigenvalues (absolute; every |lambda| <= 1 here)
WRONG = 1e-6


def _unit(gen, d, device):
    return F.normalize(torch.randn(d, generator=gen, dtype=torch.float64), dim=0).to(device)


def _gate_samples(gen, n, mu_lo=0.0, mu_hi=1.0):
    """n random (alpha, beta, mu, eta) in the constraint region: beta <= 1 - alpha, 0 < eta < 2."""
    for _ in range(n):
        alpha = 0.01 + 0.98 * float(torch.rand((), generator=gen))
        beta = (1 - alpha) * float(torch.rand((), generator=gen))
        mu = mu_lo + (mu_hi - mu_lo) * float(torch.rand((), generator=gen))
        eta = 2 * float(torch.rand((), generator=gen))
        yield alpha, beta, mu, eta


def _one_step(alpha, beta, mu, eta, k, v, S, M):
    """(S_t, M_t) from the recurrence, one token with p = alpha k."""
    t = lambda x: torch.tensor([x], dtype=torch.float64, device=k.device)   # noqa: E731
    _, S1, M1 = mdn.recurrence_head(k[None], k[None], v[None], t(math.log(alpha)), t(math.log(mu)), t(beta),
                                    t(eta), S0=S, M0=M)
    return S1, M1


def _transition_vs_step(matrix_fn, ctx: Context) -> float:
    gen = torch.Generator().manual_seed(ctx.seed)
    worst = 0.0
    for (alpha, beta, mu, eta), d in zip(_gate_samples(gen, 20), itertools.cycle((1, 2, 5))):
        k = _unit(gen, d, ctx.device)
        v = torch.randn(3, generator=gen, dtype=torch.float64).to(ctx.device)
        S, M = (torch.randn(d, 3, generator=gen, dtype=torch.float64).to(ctx.device) for _ in range(2))
        S1, M1 = _one_step(alpha, beta, mu, eta, k, v, S, M)
        forcing = torch.cat([beta * eta * torch.outer(k, v), -eta * torch.outer(k, v)])
        pred = matrix_fn(alpha, beta, mu, eta, k) @ torch.cat([S, M]) + forcing
        worst = max(worst, rel_err(pred, torch.cat([S1, M1])))
    return worst


@check("oracle.spectra.transition.matches_step",
       "the block matrix [[aI - abe kk^T, -b mu I], [a e kk^T, mu I]] plus forcing equals one recurrence step")
def _transition(ctx: Context):
    return within(_transition_vs_step(transition_matrix, ctx), EXACT, "A (S; M) + forcing vs one token, 20 gates")


@check("oracle.spectra.transition.negative.momentum_sign",
       "rejects the block matrix with +beta mu I (wrong sign of the momentum coupling)")
def _transition_sign(ctx: Context):
    def wrong(alpha, beta, mu, eta, k):
        A = transition_matrix(alpha, beta, mu, eta, k).clone()
        d = k.shape[0]
        A[:d, d:] *= -1
        return A
    return rejects(_transition_vs_step(wrong, ctx), WRONG, "+beta mu I in the top-right block")


def _match(closed: torch.Tensor, numeric: torch.Tensor) -> float:
    """max distance after greedily pairing each closed-form eigenvalue with its nearest unused numerical one."""
    left, worst = list(numeric.tolist()), 0.0
    for lam in closed.tolist():
        j = min(range(len(left)), key=lambda i: abs(left[i] - lam))
        worst = max(worst, abs(left.pop(j) - lam))
    return worst


def _separated(alpha, mu, lp, lm, gap=0.02):
    """The closed-form groups {alpha}, {mu}, {lambda_+}, {lambda_-} are pairwise >= gap apart (eigenvalues
    that nearly coincide are ill-conditioned in a non-normal matrix: errors ~ sqrt(u), not u)."""
    pts = [complex(alpha), complex(mu), complex(lp), complex(lm)]
    return all(abs(a - b) >= gap for a, b in itertools.combinations(pts, 2))


def _spectra_samples(ctx: Context):
    """(alpha, beta, mu, eta, d_k, closed form, numerical) for well-separated samples.  The transition matrix
    is built on the run's device; its numerical eigenvalues, the reference here, come from LAPACK on the CPU
    (these checks took 96 s each at full on an H200 shared by 8 workers, against 0.5 s on a 2-core CPU:
    2000 eigendecompositions of 4 x 4 to 16 x 16 matrices, each a launch-and-synchronize on the GPU)."""
    gen = torch.Generator().manual_seed(ctx.seed)
    out = []
    for (alpha, beta, mu, eta), d in zip(_gate_samples(gen, ctx.pick(100, 400, 2000)), itertools.cycle((2, 3, 4, 8))):
        lp, lm = key_eigenvalues(alpha, beta, mu, eta)
        if _separated(alpha, mu, lp, lm):
            A = transition_matrix(alpha, beta, mu, eta, _unit(gen, d, ctx.device))
            out.append((alpha, beta, mu, eta, d, closed_form_spectrum(alpha, beta, mu, eta, d),
                        torch.linalg.eigvals(A.cpu())))
    return out


@check("oracle.spectra.closed_form.vs_eigvals",
       "closed-form spectrum {alpha, mu (d_k - 1 times each), lambda_pm} equals numerical eigenvalues")
def _closed_form(ctx: Context):
    samples = _spectra_samples(ctx)
    n_complex = sum(1 for s in samples if abs(s[5][-1].imag) > 0)
    err = max(_match(s[5], s[6]) for s in samples)
    r = within(err, EIG, f"{len(samples)} separated samples ({n_complex} with a complex pair), d_k 2-8")
    return r if n_complex else Result("fail", err, EIG, "no complex pair sampled")


@check("oracle.spectra.closed_form.complex_modulus",
       "the complex pair's numerical eigenvalues have modulus sqrt(alpha mu)")
def _modulus(ctx: Context):
    err, n = 0.0, 0
    for alpha, _, mu, _, _, closed, numeric in _spectra_samples(ctx):
        if abs(closed[-1].imag) > 0:
            n += 1
            pair = sorted(numeric.tolist(), key=lambda z: abs(z.imag))[-2:]
            err = max(err, *(abs(abs(z) - math.sqrt(alpha * mu)) for z in pair))
    return within(err, EIG, f"| |lambda| - sqrt(alpha mu) | over {n} complex pairs") if n else \
        Result("fail", None, EIG, "no complex pair sampled")


def _dense_grid(n, mu_lo, mu_hi):
    """alpha, beta, mu, eta on an n^4 grid over the constraint region, edges included:
    alpha in (0, 1), beta = (1 - alpha) x (0, 1], eta in (0, 2), mu in [mu_lo, mu_hi]."""
    a = torch.linspace(1e-4, 1 - 1e-4, n, dtype=torch.float64)
    f = torch.linspace(1e-4, 1, n, dtype=torch.float64)
    e = torch.linspace(1e-4, 2 - 1e-9, n, dtype=torch.float64)
    m = torch.linspace(mu_lo, mu_hi, n, dtype=torch.float64)
    alpha, frac, eta, mu = torch.meshgrid(a, f, e, m, indexing="ij")
    return alpha, (1 - alpha) * frac, mu, eta


@check("oracle.spectra.real_parts.mu_above_eighth",
       "mu > 1/8 with alpha + beta <= 1, 0 < eta < 2 gives lambda_pm positive real parts (dense grid)")
def _above_eighth(ctx: Context):
    n = ctx.pick(20, 40, 64)
    alpha, beta, mu, eta = _dense_grid(n, 0.125 + 1e-9, 1.0)
    lp, lm = key_eigenvalues(alpha, beta, mu, eta)
    re = torch.minimum(lp.real, lm.real)
    i = int(re.argmin())
    worst = [float(t.flatten()[i]) for t in (alpha, beta, mu, eta)]
    numeric = torch.linalg.eigvals(transition_matrix(*worst, F.normalize(torch.ones(4, dtype=torch.float64), dim=0)))
    smallest = min(float(re.min()), float(numeric.real.min()))
    return Result("pass" if smallest > 0 else "fail", smallest, 0.0,
                  f"min real part {smallest:.3e} over {n ** 4} grid points (closed form; numerical eigvals "
                  f"at the minimiser alpha, beta, mu, eta = {', '.join(f'{w:.4g}' for w in worst)}); must be > 0")


@check("oracle.spectra.real_parts.mu_below_eighth",
       "just below mu = 1/8 a sampled gate setting has a non-positive real part (the 1/8 bound is tight)")
def _below_eighth(ctx: Context):
    alpha, beta, mu, eta = _dense_grid(ctx.pick(20, 40, 64), 0.01, 0.125 - 1e-3)
    lp, lm = key_eigenvalues(alpha, beta, mu, eta)
    bad = (torch.minimum(lp.real, lm.real) <= 0).flatten()
    if not bad.any():
        return Result("fail", None, 0.0, "no sampled setting below 1/8 has a non-positive real part")
    i = int(torch.where(bad, mu.flatten(), -1.0).argmax())       # the largest mu that still fails
    case = [float(t.flatten()[i]) for t in (alpha, beta, mu, eta)]
    numeric = torch.linalg.eigvals(transition_matrix(*case, F.normalize(torch.ones(4, dtype=torch.float64), dim=0)))
    low = float(numeric.real.min())
    return Result("pass" if low <= 0 else "fail", low, 0.0,
                  f"numerical min real part {low:.3e} at alpha, beta, mu, eta = "
                  f"{', '.join(f'{c:.4g}' for c in case)} (largest sampled mu with Re <= 0); must be <= 0")


@check("oracle.spectra.real_parts.gates_floor_-2",
       "gates with the reported floor log mu >= -2 (mu >= 0.135 > 1/8) give positive real parts everywhere")
def _gates_floor(ctx: Context):
    gen = torch.Generator().manual_seed(ctx.seed)
    n = ctx.pick(10_000, 100_000, 1_000_000)
    raw = [scale * torch.randn(n, generator=gen, dtype=torch.float64) for scale in (18 * mdn.TAU, 10, 10, 10)]
    worst = float("inf")
    for s in (0.1, 1.0, mdn.S_FACTOR, 4.0, 20.0):
        log_alpha, beta, log_mu, eta = mdn.gates(*raw, s=s)
        lp, lm = key_eigenvalues(log_alpha.exp(), beta, log_mu.exp(), eta)
        worst = min(worst, float(torch.minimum(lp.real, lm.real).min()))
    return Result("pass" if worst > 0 else "fail", worst, 0.0,
                  f"min real part of lambda_pm {worst:.3e} over {n} raw projections x s in 0.1-20; must be > 0")


@check("oracle.spectra.gdn.radius",
       "GDN's spectral radius is alpha for d_k > 1 (alpha(1 - beta) is only the key-aligned eigenvalue)")
def _gdn(ctx: Context):
    gen = torch.Generator().manual_seed(ctx.seed)
    err = 0.0
    for (alpha, beta, _, _), d in zip(_gate_samples(gen, 50), itertools.cycle((2, 3, 8))):
        radius = float(torch.linalg.eigvals(gdn_transition_matrix(alpha, beta, _unit(gen, d, ctx.device))).abs().max())
        err = max(err, abs(radius - alpha))
    return within(err, EXACT, "|spectral radius - alpha| over 50 gates, d_k 2-8")


@check("oracle.spectra.gdn.negative.radius_alpha_1_minus_beta",
       "rejects the claim that GDN's spectral radius is alpha(1 - beta)")
def _gdn_wrong(ctx: Context):
    gen = torch.Generator().manual_seed(ctx.seed)
    err = 0.0
    for (alpha, beta, _, _), d in zip(_gate_samples(gen, 50), itertools.cycle((2, 3, 8))):
        radius = float(torch.linalg.eigvals(gdn_transition_matrix(alpha, beta, _unit(gen, d, ctx.device))).abs().max())
        err = max(err, abs(radius - alpha * (1 - beta)))
    return rejects(err, WRONG, "max |spectral radius - alpha(1 - beta)|")


# ---------------------------------------------------------------------------------------------------
# second-order rule

def _second_order_error(step_fn, ctx: Context) -> float:
    """Walk the two-state recurrence token by token and predict each S_t from S_{t-1}, S_{t-2}."""
    gen = torch.Generator().manual_seed(ctx.seed)
    d, T = 4, 30
    gates = list(_gate_samples(gen, T))
    gates = [(a, max(b, 0.05 * (1 - a)), m, e) for a, b, m, e in gates]     # beta_{t-1} bounded away from 0
    S_prev2, S = (torch.randn(d, 3, generator=gen, dtype=torch.float64).to(ctx.device) for _ in range(2))
    # a state pair consistent with a previous token: M_0 = (alpha_0 S_{-1} - S_0) / beta_0
    a0, b0 = 0.7, 0.2
    M = (a0 * S_prev2 - S) / b0
    prev, worst = (a0, b0), 0.0
    for alpha, beta, mu, eta in gates:
        k, v = _unit(gen, d, ctx.device), torch.randn(3, generator=gen, dtype=torch.float64).to(ctx.device)
        S_next, M = _one_step(alpha, beta, mu, eta, k, v, S, M)
        pred = step_fn(S, S_prev2, k, v, alpha, beta, mu, eta, *prev)
        worst = max(worst, rel_err(pred, S_next))
        S_prev2, S, prev = S, S_next, (alpha, beta)
    return worst


@check("oracle.spectra.second_order.matches_recurrence",
       "the M-eliminated second-order rule reproduces S_t of the two-state recurrence (beta_{t-1} != 0)")
def _second_order(ctx: Context):
    return within(_second_order_error(second_order_step, ctx), EXACT, "second-order S_t vs recurrence, 30 tokens")


@check("oracle.spectra.second_order.negative.table1_without_alpha",
       "rejects Table 1's second-order form, which drops alpha_t from the key-dependent term")
def _table1(ctx: Context):
    def table1(S1, S2, k, v, alpha, beta, mu, eta, alpha_prev, beta_prev):
        return second_order_step(S1, S2, k, v, alpha, beta, mu, eta, alpha_prev, beta_prev) \
            - (1 - alpha) * beta * eta * torch.outer(k, k @ S1)
    return rejects(_second_order_error(table1, ctx), WRONG, "beta eta k k^T in place of alpha beta eta k k^T")
