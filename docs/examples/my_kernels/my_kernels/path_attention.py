"""A PaTH attention kernel in plain PyTorch, as a kernel author might write one (the worked example of
docs/own-kernel.md): the causal logits of each sequence at once from the UT form (logit_ij = k_j^T H_{j+1} ...
H_i q_i), computed in float64 and returned in the input's dtype; the signature of fla's parallel_path_attn,
without varlen."""
import torch


def path_attention(q, k, v, w, beta, g=None, scale=None):
    """q [B, T, HQ, D], k, w [B, T, H, D], v [B, T, H, Dv], beta [B, T, H], g [B, T, HQ] -> o [B, T, HQ, Dv]."""
    B, T, HQ, D = q.shape
    H = k.shape[2]
    scale = D ** -0.5 if scale is None else scale
    dtype = q.dtype
    q, k, v, w, beta = (t.double() for t in (q, k, v, w, beta))
    q, k, v, w, beta = (t.transpose(1, 2) for t in (q, k, v, w, beta))       # heads first: [B, H, T, ...]
    k, v, w, beta = (t.repeat_interleave(HQ // H, dim=1) for t in (k, v, w, beta))   # query head h reads h // G
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    strict = causal.tril(-1)
    eye = torch.eye(T, dtype=torch.float64, device=q.device)
    # U = (I + strictLower(diag(beta) W W^T))^{-1} diag(beta); logits = lower(Q K^T) - lower(Q W^T) U strictLower(W K^T)
    A = eye + (beta.unsqueeze(-1) * (w @ w.transpose(-1, -2))) * strict
    U = torch.linalg.solve_triangular(A, torch.diag_embed(beta), upper=False, unitriangular=True)
    logits = (q @ k.transpose(-1, -2)) * causal - ((q @ w.transpose(-1, -2)) * causal) @ U @ ((w @ k.transpose(-1, -2)) * strict)
    if g is not None:      # fla's convention: softmax(scale * (logit + G_i - G_j))
        G = g.double().transpose(1, 2).cumsum(-1)
        logits = logits + G.unsqueeze(-1) - G.unsqueeze(-2)
    logits = (scale * logits).masked_fill(~causal, float("-inf"))
    o = torch.softmax(logits, dim=-1) @ v
    return o.transpose(1, 2).to(dtype)
