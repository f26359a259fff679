"""Literal Momentum DeltaNet and Gated DeltaNet layers (fla.layers.MomentumDeltaNet, GatedDeltaNet) built from a
layer's parameters (state_dict names), from the papers' formulas; the recurrences are references/mdn_oracle.py's token
recurrence and gates (GDN is MDN without momentum: log mu = -inf, eta = 1, as verify/ops/gdn_ops.py runs it).

Per token x_t of a [B, T, hidden] input, per head h:

    q, k, v  = SiLU(ShortConv(W_q x)), ...  (width-W causal depthwise convolution; without it SiLU(W_q x))
    MDN gates: eta = 1 + tanh(W_eta x / tau), tau = sqrt(hidden / tau_factor); theta = arctan(s eta);
               alpha_max = cos^2 theta, beta_max = sin^2 theta; log alpha = f_a(W_a x) + log alpha_max;
               beta = sigmoid(W_b x) beta_max; log mu = max(f_mu(W_mu x), floor); f(z) = -exp(A_log) softplus(z + b)
    GDN gates: log alpha = -exp(A_log) softplus(W_a x + dt_bias); beta = sigmoid(W_b x)
    q, k <- q / sqrt(|q|^2 + 1e-6), k / ...        (the L2 norm, with fla's epsilon)
    o    = recurrence(q, k, v, gates) (references/mdn_oracle.py), then RMSNorm(o) w [* SiLU(W_g x)], then W_o.

fla's departures from the papers are keyword arguments whose defaults are fla's choices (declared conventions):
  MDN  correction   q <- q - exp(D_log) k before the L2 norm (False: the paper's q)
       learned_s    s = exp(log_factor), learned per head (False: one constant s)
       scale        o_t = scale S_t^T q_t with scale = Dk^-1/2 (1.0: the paper's S_t^T q_t)
       neg_eigval   beta doubled (the variant allow_neg_eigval; alpha + beta <= 1 then no longer holds)
  GDN  scale        Dk^-1/2 (1.0: the paper's)

Written once against an `Arith`: TRUTH is float64 throughout; `Arith(torch.bfloat16, mm)` is the same-dtype
implementation (fp32 arithmetic, tensors rounded to the storage dtype where the layer stores them, matrix
products by mm).  Everything is differentiable (the backward comparisons take float64 autograd of it).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from pathmdn_verify.references import mdn_oracle as MDN

L2_EPS = 1e-6       # fla's l2norm (fla/modules/norm/l2norm.py, and the GDN kernels' in-kernel norm)


class Arith:
    """How the literal computes: storage None is float64 throughout; a storage dtype means fp32 arithmetic with
    every stage's tensor rounded to it (`store`), products by `mm`."""

    def __init__(self, storage: torch.dtype | None = None, mm=torch.matmul):
        self.storage, self.mm = storage, mm
        self.dtype = torch.float64 if storage is None else torch.float32

    def store(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.storage is None else x.to(self.storage).to(torch.float32)


TRUTH = Arith()


def linear(A: Arith, x, W):
    """x W^T (nn.Linear without bias), stored."""
    return A.store(A.mm(x, W.T))


def short_conv(A: Arith, x, w, bias=None, silu=True):
    """SiLU(y) (y itself when silu is False), y_t = sum_j w[:, j] x_{t-W+1+j} (+ bias), x_s = 0 for s < 0: the
    causal depthwise convolution of width W (w [D, 1, W] as nn.Conv1d holds it) over x [B, T, D]."""
    w = w[:, 0]
    W, T = w.shape[-1], x.shape[1]
    xp = F.pad(x, (0, 0, W - 1, 0))
    y = sum(w[:, j] * xp[:, j:j + T] for j in range(W))
    y = y if bias is None else y + bias
    return A.store(F.silu(y) if silu else y)


def l2norm(A: Arith, x, eps=L2_EPS):
    """x / sqrt(|x|^2 + eps) over the last axis, stored."""
    return A.store(x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps))


def rmsnorm(A: Arith, o, weight, eps, gate=None, gate_activation="swish"):
    """o / sqrt(mean(o^2) + eps) * weight [* act(gate), act SiLU (swish) or sigmoid] over the last axis, stored."""
    y = o / torch.sqrt((o * o).mean(-1, keepdim=True) + eps) * weight
    if gate is None:
        return A.store(y)
    return A.store(y * (torch.sigmoid(gate) if gate_activation == "sigmoid" else F.silu(gate)))


def _qkv(A: Arith, p, x, H, Dk, Dv, use_short_conv, HV=None, qk_activation="silu", conv_bias=False):
    """q, k [B, T, H, Dk], v [B, T, HV, Dv] (HV = H unless given): projections, then the short convolutions (with
    their biases p["<n>_conv1d.bias"] when conv_bias: a KeyError where the parameters hold none) or none, then the
    activation: SiLU for v; for q and k qk_activation (silu, or relu, elu + 1 or identity after a convolution
    without activation)."""
    out = []
    for n, heads, D in (("q", H, Dk), ("k", H, Dk), ("v", HV or H, Dv)):
        act = "silu" if n == "v" else qk_activation
        y = linear(A, x, p[f"{n}_proj.weight"])
        if use_short_conv:
            y = short_conv(A, y, p[f"{n}_conv1d.weight"], p[f"{n}_conv1d.bias"] if conv_bias else None, silu=act == "silu")
        elif act == "silu":
            y = A.store(F.silu(y))
        if act in ("relu", "elu"):
            y = A.store(F.relu(y) if act == "relu" else torch.where(y >= 0, y + 1, torch.exp(torch.clamp(y, max=0))))
        out.append(y.reshape(*y.shape[:2], heads, D))
    return out


def sum_norm(A: Arith, x, eps=L2_EPS):
    """x / max(sum |x|, eps) over the last axis (the L1 normalisation), stored."""
    return A.store(x / torch.clamp(x.abs().sum(-1, keepdim=True), min=eps))


def _output(A: Arith, p, x, core, eps, use_gate, gate_activation="swish"):
    """W_o (RMSNorm(core) w [* act(W_g x)]) over [B, T, H, Dv] heads."""
    B, T, H, Dv = core.shape
    g = linear(A, x, p["g_proj.weight"]).reshape(B, T, H, Dv) if use_gate else None
    o = rmsnorm(A, core, p["o_norm.weight"], eps, g, gate_activation)
    return linear(A, o.reshape(B, T, H * Dv), p["o_proj.weight"])


def mdn_layer(A: Arith, p: dict, x, *, num_heads, head_k_dim, head_v_dim, num_v_heads=None, use_gate=True,
              use_short_conv=True, floor=-2.0, tau_factor=1, norm_eps=1e-5, correction=True, learned_s=True,
              s=MDN.S_FACTOR, scale=None, neg_eigval=False, use_beta=True, qk_activation="silu", qk_norm="l2",
              p_times_alpha=True, conv_bias=False, S0=None, M0=None) -> dict:
    """MomentumDeltaNet on x [B, T, hidden] from its parameters p (cast to A's dtype by the caller): a dict of
    o (the layer's output), the op's inputs q (after the correction, before the L2 norm), k, v, log_alpha,
    log_mu, beta, eta, the op's output core [B, T, HV, Dv] and the final states S, M [B, HV, Dk, Dv].  The
    options: num_v_heads HV = G H (value head j reads key head j // G; the per-head parameters A_log, Mu_log,
    log_factor, D_log shared by a group), use_beta False (beta = beta_max), qk_activation (silu, relu, elu,
    identity), qk_norm (l2, or sum: q / sum|q| before the op, which then normalises nothing), p_times_alpha
    False (the residual reads S with p = k instead of alpha k), floor None (log mu unclamped)."""
    H, Dk, Dv = num_heads, head_k_dim, head_v_dim
    HV = num_v_heads or H
    G = HV // H
    hidden = x.shape[-1]
    q, k, v = _qkv(A, p, x, H, Dk, Dv, use_short_conv, HV, qk_activation, conv_bias)
    q, k = (t.repeat_interleave(G, dim=2) for t in (q, k))
    per_head = {n: p[n].repeat_interleave(G) for n in ("A_log", "Mu_log", "log_factor", "D_log") if n in p}
    raw = {n: linear(A, x, p[f"{n}_proj.weight"]) for n in "abme"}
    factor = torch.exp(per_head["log_factor"]) if learned_s else s
    log_alpha, beta, log_mu, eta = MDN.gates(raw["e"], raw["a"], raw["b"], raw["m"], tau=math.sqrt(hidden / tau_factor),
                                             s=factor, a=torch.exp(per_head["A_log"]), b=p["dt_bias"], floor=floor,
                                             a_mu=torch.exp(per_head["Mu_log"]), b_mu=p["mu_bias"], use_beta=use_beta)
    if neg_eigval:
        beta = 2 * beta
    if qk_norm == "sum":
        q, k = sum_norm(A, q), sum_norm(A, k)
    if correction:
        q = A.store(q - torch.exp(per_head["D_log"])[:, None] * k)
    qn, kn = (l2norm(A, q), l2norm(A, k)) if qk_norm == "l2" else (q, k)
    # eta k and p = alpha k as the op holds them (in TRUTH exactly the recurrence's own eta_t k_t and alpha_t k_t)
    k_hat = A.store(eta[..., None] * kn)
    p_res = A.store(torch.exp(log_alpha)[..., None] * kn) if p_times_alpha else kn
    core, S, M = MDN.recurrence(qn, k_hat, v, log_alpha, log_mu, beta, torch.ones_like(eta), p=p_res,
                                scale=scale, S0=S0, M0=M0)
    core = A.store(core)
    return {"o": _output(A, p, x, core, norm_eps, use_gate), "q": q, "k": k, "v": v, "log_alpha": log_alpha,
            "log_mu": log_mu, "beta": beta, "eta": eta, "core": core, "S": S, "M": M}


def gdn_layer(A: Arith, p: dict, x, *, num_heads, head_k_dim, head_v_dim, num_v_heads=None, use_gate=True,
              use_short_conv=True, norm_eps=1e-5, neg_eigval=False, beta_stored=False, gate_activation="swish",
              conv_bias=False, scale=None, S0=None) -> dict:
    """GatedDeltaNet on x [B, T, hidden]: a dict of o, the op's inputs q, k, v (before the L2 norm), the raw
    gate projections g_raw = W_a x and beta_raw = W_b x, the gates log_alpha, beta, the op's output core and
    the final state S [B, HV, Dk, Dv].  With num_v_heads HV = G H (grouped value attention) v and the gates have
    HV heads and value head j reads key head j // G (the op's convention, kernel.fla.gdn_*.convention.value_groups_consecutive).
    beta_stored: the layer activates beta itself, in its own dtype (fla until 2026-05-25), so beta is stored
    before the doubling.  gate_activation: the output gate's, swish (SiLU) or sigmoid."""
    H, Dk, Dv, HV = num_heads, head_k_dim, head_v_dim, num_v_heads or num_heads
    q, k, v = _qkv(A, p, x, H, Dk, Dv, use_short_conv, HV, conv_bias=conv_bias)
    g_raw, beta_raw = linear(A, x, p["a_proj.weight"]), linear(A, x, p["b_proj.weight"])
    log_alpha = -torch.exp(p["A_log"]) * F.softplus(g_raw + p["dt_bias"])
    beta = torch.sigmoid(beta_raw)
    beta = (A.store(beta) if beta_stored else beta) * (2 if neg_eigval else 1)
    qn, kn = (t.repeat_interleave(HV // H, dim=2) for t in (l2norm(A, q), l2norm(A, k)))
    core, S, _ = MDN.recurrence(qn, kn, v, log_alpha, torch.full_like(log_alpha, -math.inf), beta,
                                torch.ones_like(beta), scale=scale, S0=S0,
                                M0=None if S0 is None else torch.zeros_like(S0))
    core = A.store(core)
    return {"o": _output(A, p, x, core, norm_eps, use_gate, gate_activation), "q": q, "k": k, "v": v, "g_raw": g_raw,
            "beta_raw": beta_raw, "log_alpha": log_alpha, "beta": beta, "core": core, "S": S}
