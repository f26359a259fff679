"""Float64 literals of fla's PaTHAttention and ForgettingAttention layers, built from the layers' parameters
(state_dict names): the papers' gates written once, the op oracles of references/path_oracle.py for the attention.

Every function takes an arithmetic `ar` first: EXACT (float64, nothing rounded) gives the truth; the same code
run with a same-dtype arithmetic (verify/layers/path_layers.py) is the implementation that sets the budget.  `ar`
provides mm(a, b) (the attention's products), dense(a, b) (the projections'), store(x) (the rounding of a stored
tensor), path_attn, fox_attn and decode_cache.

PaTH (Yang et al. 2025), per token t, with x_t the hidden state and d the head dim:

    q, k, v = W_q x, W_k x, W_v x             (heads split; q, k optionally RMS-normalised per head)
    beta_t  = 2 sigmoid(W_beta x_t + b_beta)  (one per key head)
    w_t     = normalise(act(conv3(W_w x)_t))   W_w = W_up W_down (low rank) or one matrix; conv3 the causal
                                               depthwise convolution of width 3; normalise(u) = u / sqrt(u.u + eps)
    g_t     = log sigmoid(W_f x_t + b_f)       (the optional forget gate, one per query head)
    o       = W_o path_attn(q, k, v, w, beta, g)

Declared conventions of fla's layer (flags, defaults fla's form): silu=True (act = SiLU, the paper has no
activation), gate_scaled=True (the gate multiplied by the attention scale: softmax(scale (logit + gate))); and
two that changed in fla's history (pathmdn_verify.layers.history): qk_norm_flat (the q / k norm over the flat
projection, not per head) and gates_stored (beta and w rounded to the layer's dtype, not kept in float32).

FoX (Lin et al. 2025): q, k, v as above (qk norm: RMS per head, fla's GroupNorm), f_t = log sigmoid(W_f x_t + b_f)
per query head, o = W_o (sigmoid(W_g x) * fox_attn(q, k, v, f)) (the output gate optional); with a window W the
query t attends to the keys t - W + 1 .. t.

Decoding (PaTH): the cache holds every key transformed by all later Householders, k_j <- k_j - beta_t w_t (w_t^T k_j)
at each new token t (pathmdn_verify.references.path_oracle.decode_cache after the prompt); the new query attends to the cache.
Shapes: x [B, T, hidden]; stages q [B, T, HQ, d], k, v, w [B, T, H, d], beta [B, T, H], g [B, T, HQ].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from pathmdn_verify.references import path_oracle as P

RMS_EPS = 1e-5          # fla's RMSNorm / GroupNorm eps
L2_EPS = 1e-6           # fla's l2_norm eps: u / sqrt(u.u + eps)


class Exact:
    """float64 arithmetic: the truth."""
    mm = dense = staticmethod(torch.matmul)

    @staticmethod
    def store(x):
        return x

    @staticmethod
    def path_attn(q, k, v, w, beta, g, scale, gate_scaled):
        return P.path_attn(q, k, v, w, beta, g, scale=scale, gate_scaled=gate_scaled)

    @staticmethod
    def fox_attn(q, k, v, g, scale, window):
        return P.fox_attn(q, k, v, g, scale=scale) if window is None else windowed_fox(Exact, q, k, v, g, scale, window)

    @staticmethod
    def decode_cache(k, w, beta):
        return P.decode_cache(k, w, beta)


EXACT = Exact()


@dataclass(frozen=True)
class Spec:
    """The layer's shape and options.  PaTH: gate = use_forget_gate, low_rank_w, w_conv (use_w_shortconv) and
    conv_bias as the layer's constructor takes them; FoX: gate = use_output_gate, qkv_bias.  A parameter an option
    calls for is read strictly (a KeyError where the layer holds none)."""
    heads: int
    kv_heads: int
    qk_norm: bool = False
    gate: bool = False
    window: int | None = None
    silu: bool = True            # PaTH convention: SiLU after the w convolution
    gate_scaled: bool = True     # PaTH convention: the forget gate times the attention scale
    qk_norm_flat: bool = False   # PaTH (fla until 2025-10-03): q, k RMS-normalised over the flat projection
    gates_stored: bool = False   # PaTH (fla until 2025-10-03): beta and w computed and stored in the layer's dtype
    low_rank_w: bool = True      # PaTH: w = W_w2 W_w1 x (else W_w x)
    w_conv: bool = True          # PaTH: the short convolution on w
    conv_bias: bool = False      # PaTH: its bias
    qkv_bias: bool = False       # FoX: biases of the q, k, v projections


def linear(ar, x, p, name, bias=None):
    """y = x W^T + b of the parameters name.weight and name.bias, stored: bias True reads name.bias strictly,
    False takes none, None takes the layer's own (a projection whose bias no option decides)."""
    y = ar.dense(x, p[f"{name}.weight"].T)
    b = p.get(f"{name}.bias") if bias is None else p[f"{name}.bias"] if bias else None
    return ar.store(y if b is None else y + b)


def heads(x, n):
    """[B, T, n d] -> [B, T, n, d]."""
    return x.reshape(*x.shape[:2], n, x.shape[-1] // n)


def rms_norm(ar, x, weight):
    """x / sqrt(mean(x^2) + eps) * weight over the last dim (x [..., d]), stored."""
    return ar.store(x * torch.rsqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * weight)


def head_norm(ar, x, weight, flat: bool):
    """RMS normalisation of x [B, T, n, d]: per head (flat False) or over the flat n d vector (flat True), with a
    weight of d or n d entries (a d-entry weight is every head's; an n d one is split per head)."""
    n, d = x.shape[-2:]
    weight = weight.reshape(n, d) if weight.numel() == n * d else weight.expand(n, d)
    if flat:
        return heads(rms_norm(ar, x.flatten(-2), weight.flatten()), n)
    return rms_norm(ar, x, weight)


def short_conv(ar, x, weight, bias=None, silu=True):
    """Causal depthwise convolution: y_t = sum_{i<K} weight[:, 0, i] x_{t-K+1+i} (+ bias), then SiLU when silu.
    x [B, T, C], weight [C, 1, K]."""
    K = weight.shape[-1]
    xp = torch.nn.functional.pad(x, (0, 0, K - 1, 0))
    y = sum(weight[:, 0, i] * xp[:, i:i + x.shape[1]] for i in range(K))
    y = y if bias is None else y + bias
    return ar.store(y * torch.sigmoid(y) if silu else y)


def l2_normalise(u):
    """u / sqrt(u.u + eps) over the last dim."""
    return u * torch.rsqrt((u * u).sum(-1, keepdim=True) + L2_EPS)


def path_stages(ar, p, x, spec: Spec) -> dict:
    """q, k, v, w, beta, g as the op receives them."""
    q, k, v = (heads(linear(ar, x, p, n), h) for n, h in (("q_proj", spec.heads), ("k_proj", spec.kv_heads),
                                                        ("v_proj", spec.kv_heads)))
    if spec.qk_norm:
        q = head_norm(ar, q, p["maybe_q_norm.weight"], spec.qk_norm_flat)
        k = head_norm(ar, k, p["maybe_k_norm.weight"], spec.qk_norm_flat)
    w = linear(ar, linear(ar, x, p, "w_proj.0"), p, "w_proj.1") if spec.low_rank_w else linear(ar, x, p, "w_proj")
    if spec.w_conv:
        w = short_conv(ar, w, p["w_conv1d.weight"], p["w_conv1d.bias"] if spec.conv_bias else None, spec.silu)
    stored = ar.store if spec.gates_stored else (lambda t: t)
    beta = 2 * stored(torch.sigmoid(linear(ar, x, p, "bt_proj")))
    g = torch.nn.functional.logsigmoid(linear(ar, x, p, "g_proj")) if spec.gate else None
    return {"q": q, "k": k, "v": v, "w": stored(l2_normalise(heads(w, spec.kv_heads))), "beta": beta, "g": g}


def path_layer(ar, p, x, spec: Spec):
    """PaTHAttention's output [B, T, hidden] and its stages."""
    s = path_stages(ar, p, x, spec)
    o = ar.path_attn(**s, scale=P.default_scale(s["q"]), gate_scaled=spec.gate_scaled)
    return linear(ar, o.flatten(2), p, "o_proj"), s


def fox_stages(ar, p, x, spec: Spec) -> dict:
    """q, k, v and the log forget gate g as the op receives them."""
    q, k, v = (linear(ar, x, p, n, spec.qkv_bias) for n in ("q_proj", "k_proj", "v_proj"))
    q, k, v = heads(q, spec.heads), heads(k, spec.kv_heads), heads(v, spec.kv_heads)
    if spec.qk_norm:
        q = rms_norm(ar, q, heads(p["q_norm.weight"][None, None], spec.heads))
        k = rms_norm(ar, k, heads(p["k_norm.weight"][None, None], spec.kv_heads))
    return {"q": q, "k": k, "v": v, "g": torch.nn.functional.logsigmoid(linear(ar, x, p, "f_proj"))}


def fox_output(ar, p, x, o, spec: Spec):
    """W_o (sigmoid(W_g x) * o) (the output gate only when spec.gate); o [B, T, HQ, d]."""
    o = o.flatten(2)
    if spec.gate:
        o = ar.store(torch.sigmoid(linear(ar, x, p, "g_proj")) * o)
    return linear(ar, o, p, "o_proj")


def fox_layer(ar, p, x, spec: Spec):
    """ForgettingAttention's output [B, T, hidden] and its stages."""
    s = fox_stages(ar, p, x, spec)
    return fox_output(ar, p, x, ar.fox_attn(**s, scale=P.default_scale(s["q"]), window=spec.window), spec), s


def softmax(ar, s):
    """exp(s - max s) / sum exp(s - max s) along the last dim (the sum a product with ones: ar's order)."""
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return e / ar.mm(e, e.new_ones(e.shape[-1], 1))


def windowed_fox(ar, q, k, v, g, scale, window):
    """FoX with a window W: the logits of keys j <= i - W are -inf (P.plain_logits' window); otherwise
    pathmdn_verify.references.path_oracle's FoX."""
    def head(q_, k_, v_, w_, b_, g_):
        logits = P.plain_logits(q_, k_, ar.mm, window)
        return ar.store(ar.mm(softmax(ar, P.scores(logits, P.gate_matrix(g_), scale)), v_))
    return P.per_head(head, q, k, v, None, None, g, None)


def attend_one(ar, q, K, V, g=None, scale=1.0, gate_scaled=False):
    """One new query per sequence against the cached keys: o = softmax_j(scores(k_j . q, gate_j)) V with
    gate_j = sum_{s=j+1..L-1} g_s.  q [B, HQ, d], K [B, L, H, d], V [B, L, H, dv], g [B, L, HQ] -> [B, HQ, dv]."""
    group = q.shape[1] // K.shape[2]
    per_query_head = lambda X: (X if group == 1 else X.repeat_interleave(group, 2)).transpose(1, 2)   # no copy if 1
    Kq = per_query_head(K)                                          # [B, HQ, L, d]
    logits = ar.mm(Kq, q[..., None])[..., 0]                      # [B, HQ, L]
    gate = None
    if g is not None:
        G = torch.cumsum(g, 1).transpose(1, 2)                      # [B, HQ, L]
        gate = G[..., -1:] - G
    p = softmax(ar, P.scores(logits, gate, scale, gate_scaled))
    return ar.store(ar.mm(p[..., None, :], per_query_head(V))[..., 0, :])


def householder_update(ar, K, w, beta):
    """k_j <- k_j - beta w (w^T k_j) for every cached key (K [B, L, H, d], w [B, H, d], beta [B, H]), stored."""
    return ar.store(K - beta[:, None, :, None] * (K * w[:, None]).sum(-1, keepdim=True) * w[:, None])


def path_generate(ar, p, x, T0: int, spec: Spec):
    """Prefill x[:, :T0], then decode x[:, t] for t = T0 .. T-1 one token at a time.  Returns the outputs
    [B, T, hidden] (the prefill's, then each decoded token's), the key cache after the prefill and after the
    last token ([B, L, H, d])."""
    s = path_stages(ar, p, x, spec)          # causal: stage t depends on x_{<= t} only
    pre = {n: t[:, :T0] if t is not None else None for n, t in s.items()}
    scale = P.default_scale(s["q"])
    outs = [ar.path_attn(**pre, scale=scale, gate_scaled=spec.gate_scaled)]
    K = ar.store(ar.decode_cache(pre["k"], pre["w"], pre["beta"]))
    K0 = K
    for t in range(T0, x.shape[1]):
        K = torch.cat([householder_update(ar, K, s["w"][:, t], s["beta"][:, t]), s["k"][:, t:t + 1]], 1)
        g = None if s["g"] is None else s["g"][:, :t + 1]
        outs.append(attend_one(ar, s["q"][:, t], K, s["v"][:, :t + 1], g, scale, spec.gate_scaled)[:, None])
    return linear(ar, torch.cat(outs, 1).flatten(2), p, "o_proj"), K0, K


def fox_generate(ar, p, x, T0: int, spec: Spec):
    """Prefill x[:, :T0], then decode token by token (the window keeps the last W keys).  Returns the outputs
    [B, T, hidden]."""
    s = fox_stages(ar, p, x, spec)
    scale = P.default_scale(s["q"])
    outs = [ar.fox_attn(**{n: t[:, :T0] for n, t in s.items()}, scale=scale, window=spec.window)]
    for t in range(T0, x.shape[1]):
        lo = 0 if spec.window is None else max(0, t + 1 - spec.window)
        outs.append(attend_one(ar, s["q"][:, t], s["k"][:, lo:t + 1], s["v"][:, lo:t + 1], s["g"][:, lo:t + 1],
                               scale)[:, None])
    return fox_output(ar, p, x, torch.cat(outs, 1), spec)
