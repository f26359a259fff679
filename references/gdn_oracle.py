"""Float64 Gated DeltaNet with per-key and per-value decays (torch): the token walk of fla's fused recurrent kernel's
rule, written literally, for the gates the MDN form (references/mdn_oracle.py, which the GDN checks reduce to) does
not express.  Per value head, with S_0 given (zero by default):

    S <- exp(g_t) diag(exp(gk_t)) S diag(exp(gv_t))        (each gate left out: no decay)
    v~_t = beta_t (v_t - S^T k_t),   S_t = S + k_t v~_t^T,   o_t = scale S_t^T q_t

q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; gk [B, T, HV, K]; gv [B, T, HV, V]; S0 [N, HV, K, V]; value
head j reads key head j // (HV / H); sequences of cu_seqlens restart the state.  Computes in the inputs' dtype.
"""
from __future__ import annotations

import torch


def recurrence(q, k, v, g=None, gk=None, gv=None, beta=None, S0=None, cu_seqlens=None, scale=None):
    """(o [B, T, HV, V], S_T [N, HV, K, V]) of the rule above, token by token."""
    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    q, k = (t.repeat_interleave(HV // H, dim=2) for t in (q, k))
    scale = K ** -0.5 if scale is None else scale
    bounds = [(0, T)] if cu_seqlens is None else list(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()))
    o, finals = torch.zeros_like(v), []
    for b in range(B):
        for n, (s, e) in enumerate(bounds):
            i = b if cu_seqlens is None else n
            S = q.new_zeros(HV, K, V) if S0 is None else S0[i].clone()
            for t in range(s, e):
                if g is not None:
                    S = S * torch.exp(g[b, t])[:, None, None]
                if gk is not None:
                    S = S * torch.exp(gk[b, t])[:, :, None]
                if gv is not None:
                    S = S * torch.exp(gv[b, t])[:, None, :]
                read = torch.einsum("hkv,hk->hv", S, k[b, t])
                step = (v[b, t] - read) * (1.0 if beta is None else beta[b, t][:, None])
                S = S + k[b, t][:, :, None] * step[:, None, :]
                o[b, t] = scale * torch.einsum("hkv,hk->hv", S, q[b, t])
            finals.append(S)
    return o, torch.stack(finals)
