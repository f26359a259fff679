"""A-priori error bounds, each with its formula and source, evaluated on a point's float64 inputs.

Sources: N. J. Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., SIAM 2002 (Lemma 3.1: gamma_n;
Lemma 19.3: products of Householder transformations; Theorem 8.5: triangular solves), and N. J. Higham and
T. Mary, A new approach to probabilistic rounding error analysis, SIAM J. Sci. Comput. 41(5), 2019
(Theorem 2.4 / 3.1: lambda sqrt(n) u).

The kernels multiply operands rounded to a dot format (bf16, or TF32 for fp32 Triton dots) and accumulate
in fp32, so one dot product of length n carries  dot_n = (1 + gamma_2(u_dot))(1 + gamma_n(u_acc)) - 1  relative
to |x|^T |y|.  The bound of a point is a first-order model of the whole kernel built from these pieces; its
formula is in BOUNDS and in the report.  Gradients are shown against the forward model of the same input
(no separate gradient bound is claimed).
"""
from __future__ import annotations

import math

import torch

from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify.core.precision import UNIT_ROUNDOFF
from pathmdn_verify.core.records import scale_of

U_ACC = UNIT_ROUNDOFF["fp32"]     # every kernel here accumulates in fp32
LAMBDA = 4.0                      # the probabilistic bounds' lambda
UT_BLOCK = 64                     # PaTH's UT transform block (pathmdn_verify.same_dtype.path_attn)

BOUNDS = {   # name -> (formula, source)
    "unit roundoff": ("u = 2^-8 (bf16), 2^-11 (fp16, tf32), 2^-24 (fp32)", "IEEE 754; TF32: NVIDIA Ampere whitepaper"),
    "gamma_n": ("gamma_n = n u / (1 - n u), defined for n u < 1 (vacuous beyond)",
                "Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Lemma 3.1"),
    "dot product": ("dot_n = (1 + gamma_2(u_dot))(1 + gamma_n(u_acc)) - 1 relative to |x|^T|y| (operands rounded "
                    "to the dot format, fp32 accumulation)", "Higham Lemma 3.1 and eq. (3.4)"),
    "Householder product": ("r generalised Householder factors H = I - beta w w^T (||H||_2 <= 1 for beta in [0, 2]) "
                            "applied to a vector of length m: ||dx|| <= r gamma_{m+2} ||x|| <= gamma_{r(m+2)} ||x||; "
                            "PaTH's blockwise scan applies r = ceil(T / 64) block factors F_c (each the product of 64 "
                            "factors, I - W^T U^T W) to a query, m = D", "Higham Lemma 19.3 (c m taken as m + 2)"),
    "triangular solve": ("cond(L) (gamma_n(u_acc) + e_L) / (1 - cond(L) (gamma_n(u_acc) + e_L)), cond(L) = "
                         "|| |L^-1| |L| ||_inf (Skeel): substitution in fp32 (fla's solve_tril is IEEE fp32) on "
                         "entries carrying e_L = dot_D (formed by dots in the dot format); PaTH: the UT system "
                         "I + strictLower(diag(beta) W W^T) of each 64-block, once per block factor; MDN: "
                         "I + (P K^T) .* Gamma^- of each chunk",
                         "Higham Theorem 8.5 (cond(L, x) <= cond(L)) and Theorem 7.4 (perturbed entries)"),
    "probabilistic": (f"every gamma_n replaced by min(gamma_n, lambda sqrt(n) u), lambda = {LAMBDA:g}: holds with "
                      "probability at least 1 - 2 n exp(-lambda^2 (1 - u)^2 / 2) for independent mean-zero rounding "
                      "errors",
                      "Higham & Mary, SIAM J. Sci. Comput. 41(5) 2019, Theorems 2.4 and 3.1"),
    "attention output": ("softmax attention o_i = sum_j p_ij v_j with logits s_ij perturbed by |ds_ij| <= e_i: "
                         "||do|| / ||o|| <= (2 max e + dot_T + u_store) || |P| |V| || / ||P V||; e = scale max ||q|| "
                         "max ||k|| (dot_D [+ Householder product + UT solve for PaTH])",
                         "first order: p_ij (1 + eta_ij), |eta_ij| <= 2 max_j |ds_ij|"),
    "MDN recurrence": ("T steps, each rounding its operands (2 u_dot) and a dot of length Dk into the state, errors "
                       "adding (the frozen-step transition taken as a contraction): ||do|| / ||o|| <= (gamma_2T(u_dot) "
                       "+ gamma_T(Dk+2)(u_acc) + dot_Dk [+ chunk solve] + u_store) "
                       "|| scale |S_t|^T |q_t| || / ||o||", "first order; the transition's spectrum: docs/design.md section 5"),
}


def gamma(n: float, u: float) -> float:
    """gamma_n = n u / (1 - n u) (Higham Lemma 3.1); inf where n u >= 1 (no bound)."""
    return n * u / (1 - n * u) if n * u < 1 else math.inf


def gamma_prob(n: float, u: float) -> float:
    """Higham & Mary 2019, Theorem 2.4: exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1 ~ lambda sqrt(n) u, or gamma_n
    where that is smaller (n < lambda^2): both hold, the deterministic one always."""
    return min(gamma(n, u), math.expm1(LAMBDA * math.sqrt(n) * u + n * u * u / (1 - u)))


def dot(n: float, u_dot: float, g=gamma) -> float:
    """One dot product of length n: operands rounded to the dot format, fp32 accumulation."""
    return (1 + g(2, u_dot)) * (1 + g(n, U_ACC)) - 1


def triangular_solve(cond: float, n: float, entries: float, g=gamma) -> float:
    """Higham Theorems 8.5 and 7.4: cond (gamma_n(u_acc) + entries) / (1 - the same), inf when that reaches 1."""
    c = cond * (g(n, U_ACC) + entries)
    return c / (1 - c) if c < 1 else math.inf


def skeel_cond(L: torch.Tensor) -> float:
    """cond(L) = || |L^-1| |L| ||_inf for a unit lower triangular L (float64)."""
    inv = torch.linalg.solve_triangular(L, torch.eye(L.shape[0], dtype=L.dtype, device=L.device), upper=False)
    return float((inv.abs() @ L.abs()).sum(1).max())


def ut_condition(w: torch.Tensor, beta: torch.Tensor) -> float:
    """The largest cond of PaTH's UT systems I + strictLower(diag(beta) W W^T) over heads and 64-blocks."""
    w, beta = w.double(), beta.double()
    conds = [1.0]
    for b in range(w.shape[0]):
        for h in range(w.shape[2]):
            for s in range(0, w.shape[1], UT_BLOCK):
                W, bt = w[b, s:s + UT_BLOCK, h], beta[b, s:s + UT_BLOCK, h]
                conds.append(skeel_cond(torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
                                        + torch.tril(bt[:, None] * (W @ W.T), -1)))
    return max(conds)


def alignment(w: torch.Tensor) -> float:
    """mean |w_t . w_{t+1}| over consecutive tokens (1: parallel)."""
    w = w.double()
    return float((w[:, 1:] * w[:, :-1]).sum(-1).abs().mean()) if w.shape[1] > 1 else 0.0


def mdn_condition(x64: dict, chunk: int) -> float:
    """The largest cond of the chunk systems I + (P K^T) .* Gamma^- (references/mdn_oracle.py chunk_step)."""
    conds = [1.0]
    for b in range(x64["k"].shape[0]):
        for h in range(x64["k"].shape[2]):
            head = {n: None if t is None else (t[b, :, h] if t.dim() > 2 and n not in ("S0", "M0") else t[b, h])
                    for n, t in x64.items() if n in ("q", "k", "v", "log_alpha", "log_mu", "beta", "eta", "S0", "M0")}
            steps = MDN.chunk_forward_head(**head, chunk=chunk)[3]
            conds += [skeel_cond(st["system"]) for st in steps]
    return max(conds)


def _attention_terms(x64: dict, scale: float, gate_scaled: bool, path: bool) -> tuple[float, float]:
    """(|| |P| |V| ||_F / ||P V||_F, scale max ||q_i|| max ||k_j||) of the float64 attention."""
    v2 = torch.cat([x64["v"], x64["v"].abs()], dim=-1)

    def head(q, k, v, w, beta, g):
        logits = P.path_logits(q, k, w, beta) if path else P.plain_logits(q, k)
        gate = None if g is None else P.gate_matrix(g)
        p = torch.softmax(P.scores(logits, gate, scale, gate_scaled), dim=-1)
        Dv = v.shape[-1] // 2
        return torch.cat([p @ v[:, :Dv], p @ v[:, Dv:]], dim=-1)

    out = P.per_head(head, x64["q"], x64["k"], v2, x64.get("w") if path else None,
                     x64.get("beta") if path else None, x64.get("g"), x64.get("cu_seqlens"))
    Dv = x64["v"].shape[-1]
    o, mag = out[..., :Dv], out[..., Dv:]
    s_max = scale * float(x64["q"].norm(dim=-1).max() * x64["k"].norm(dim=-1).max())
    return float(mag.norm() / o.norm()) if o.norm() > 0 else math.inf, s_max


def magnitudes(family: str, x64: dict, chunk: int | None, gate_scaled: bool | None) -> dict:
    """The input-dependent factors of the model bounds, measured once in float64: kappa (|| |terms| || / ||o||),
    the logit scale, the UT / chunk system's condition number."""
    if family in ("path", "fox"):
        kappa, s_max = _attention_terms(x64, scale_of(x64), gate_scaled, family == "path")
        out = {"kappa": kappa, "logit_scale": s_max}
        if family == "path":
            out["condition"] = ut_condition(x64["w"], x64["beta"])
        return out
    o, _, _, terms = MDN.recurrence(**x64, with_terms=True)
    out = {"kappa": float(terms.norm() / o.norm()) if o.norm() > 0 else math.inf}
    if chunk is not None:
        out["condition"] = mdn_condition(x64, chunk)
    return out


def model_bound(family: str, shape: tuple[int, int, int], chunk: int | None, m: dict, prec, g=gamma) -> float:
    """The 'attention output' or 'MDN recurrence' bound of BOUNDS, with g = gamma or gamma_prob.
    shape: (T, D or Dk, the solve's block)."""
    T, D, block = shape
    u = prec.u
    d = dot(D, u, g)
    if family in ("path", "fox"):
        e = d
        if family == "path":
            r = math.ceil(T / block)
            e += g(r * (D + 2), u) + r * triangular_solve(m["condition"], block, d, g)
        return (2 * m["logit_scale"] * e + dot(T, u, g) + prec.unit_roundoff_storage) * m["kappa"]
    steps = g(2 * T, u) + g(T * (D + 2), U_ACC)
    e = steps + d + (triangular_solve(m["condition"], block, d, g) if chunk is not None else 0.0)
    return (e + prec.unit_roundoff_storage) * m["kappa"]


def point_bounds(family: str, x64: dict, prec, chunk, gate_scaled: bool | None) -> dict:
    """{deterministic, probabilistic, vacuous, magnitudes}: the model bound with gamma_n and with lambda sqrt(n) u.
    vacuous: some n u >= 1 (gamma_n undefined) or the relative bound exceeds 1."""
    m = magnitudes(family, x64, chunk, gate_scaled)
    T = x64["k"].shape[1]
    shape = (T, x64["k"].shape[-1], chunk if family in ("mdn", "form") else min(T, UT_BLOCK))
    det = model_bound(family, shape, chunk, m, prec)
    return {"deterministic": det, "probabilistic": model_bound(family, shape, chunk, m, prec, gamma_prob),
            "vacuous": not det <= 1, "magnitudes": m}
