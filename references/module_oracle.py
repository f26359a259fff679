"""Float64 oracles of fla's modules (torch; CPU or CUDA): the short causal convolution and its single-token update,
the gated RMS norm and its fused linear, l2norm and the group norm, each the equation written directly.

Every function computes in the dtype of its inputs, so the same-dtype implementations (pathmdn_verify.same_dtype)
run the same equations in fp32; `total` is the sum over the last dim (float64: torch's; the same-dtype one passes a
fixed-order fp32 sum), the only reduction.  Layout: x [B, T, D] (a norm: rows of any leading shape); the
convolution's weight [D, W] and states [N, D, W] (N sequences of cu_seqlens, or B).
"""
from __future__ import annotations

import torch


def _sum(t):
    return t.sum(-1)


def activation_of(name, z):
    """silu / swish: z sigmoid(z); None: z."""
    if name is None:
        return z
    if name in ("silu", "swish"):
        return z * torch.sigmoid(z)
    raise ValueError(f"unknown activation {name!r}")


def segments(T: int, cu_seqlens) -> list[tuple[int, int]]:
    """(start, end) of each sequence: cu_seqlens' consecutive pairs, or the whole axis."""
    if cu_seqlens is None:
        return [(0, T)]
    c = [int(v) for v in cu_seqlens]
    return list(zip(c[:-1], c[1:]))


def short_conv(x, weight, bias=None, residual=None, S0=None, output_final_state=None, activation=None,
               cu_seqlens=None):
    """Per sequence, with X its tokens after the W tokens of its initial state (S0[n, :, j] is token j - W; zeros
    without S0):

        y_t = act(sum_{i<W} weight[:, i] X_{t-W+1+i} + bias) + residual_t,    S_T[n, :, j] = X_{T-W+j}

    -> (y [B, T, D], S_T [N, D, W], or None unless output_final_state)."""
    B, T, D = x.shape
    W = weight.shape[1]
    ys, states = [], []
    for b in range(B):
        for n, (s, e) in enumerate(segments(T, cu_seqlens)):
            i = b if cu_seqlens is None else n
            before = x.new_zeros(D, W) if S0 is None else S0[i]
            X = torch.cat([before.T, x[b, s:e]], dim=0)                  # [W + L, D]: token t at row W + t
            z = sum(weight[:, j] * X[j + 1:j + 1 + e - s] for j in range(W))
            z = z if bias is None else z + bias
            y = activation_of(activation, z)
            ys.append(y if residual is None else y + residual[b, s:e])
            states.append(X[e - s:e - s + W].T)                             # rows T - W .. T - 1 of the sequence
    y = torch.cat(ys).reshape(B, T, D)
    return y, torch.stack(states) if output_final_state else None


def short_conv_update(x, cache, weight, bias=None, residual=None, activation=None, layout=None):
    """One token x_n [N, 1, D] of each sequence: the cache shifted by one slot with x_n in the last,
    C'[n] = (C[n, :, 1:], x_n); y_n = act(sum_i weight[:, i] C'[n, :, i] + bias) + residual_n.
    -> (y [N, 1, D], C' [N, D, W]).  (`layout` is how the kernel is given x: the same values.)"""
    after = torch.cat([cache[:, :, 1:], x[:, 0, :, None]], dim=2)
    z = sum(weight[:, i] * after[:, :, i] for i in range(weight.shape[1]))
    z = z if bias is None else z + bias
    y = activation_of(activation, z)[:, None, :]
    return (y if residual is None else y + residual), after


def _normed(r, eps, is_rms_norm, total):
    """r / sqrt(mean(r^2) + eps), or (r - mean r) / sqrt(mean((r - mean r)^2) + eps), over the last dim."""
    D = r.shape[-1]
    if not is_rms_norm:
        r = r - (total(r) / D)[..., None]
    return r / torch.sqrt(total(r * r) / D + eps)[..., None]


def _affine(y, weight, bias):
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def rms_norm_gated(x, g, weight=None, bias=None, activation="swish", residual=None, prenorm=False, eps=1e-6,
                   total=_sum):
    """r = x + residual; y = (r / sqrt(mean(r^2) + eps) * weight + bias) * gate(g), gate swish (silu): g sigmoid(g),
    sigmoid: sigmoid(g) -> (y, r if prenorm else None)."""
    r = x if residual is None else x + residual
    y = _affine(_normed(r, eps, True, total), weight, bias)
    gate = torch.sigmoid(g) if activation == "sigmoid" else activation_of(activation, g)
    return y * gate, (r if prenorm else None)


def rms_norm_gate_linear(x, g, norm_weight, linear_weight, norm_bias=None, linear_bias=None, residual=None,
                         prenorm=False, eps=1e-6, total=_sum):
    """out = rms_norm_gated(x, g, swish) linear_weight^T + linear_bias -> (out, r if prenorm else None)."""
    y, r = rms_norm_gated(x, g, norm_weight, norm_bias, "swish", residual, prenorm, eps, total)
    out = y @ linear_weight.T
    return (out if linear_bias is None else out + linear_bias), r


def l2norm(x, eps=1e-6, total=_sum):
    """y = x / sqrt(sum(x^2) + eps) over the last dim."""
    return x / torch.sqrt(total(x * x) + eps)[..., None]


def group_norm(x, weight=None, bias=None, residual=None, eps=1e-5, prenorm=False, is_rms_norm=False, num_groups=1,
               total=_sum):
    """The last dim as num_groups groups of D consecutive channels, each normalised alone (layer norm, or rms norm
    with is_rms_norm), then * weight + bias over all channels -> (y, r = x + residual if prenorm else None)."""
    r = x if residual is None else x + residual
    grouped = r.reshape(*r.shape[:-1], num_groups, r.shape[-1] // num_groups)
    y = _normed(grouped, eps, is_rms_norm, total).reshape(r.shape)
    return _affine(y, weight, bias), (r if prenorm else None)
