"""my_path_attn.py with a planted bug: beta is 1% too small from the 65th token on."""
import pathmdn_verify as pv
from my_path_attn import path_attention


def buggy(q, k, v, w, beta, g=None, scale=None):
    t = torch.arange(beta.shape[1], device=beta.device).view(1, -1, 1)
    return path_attention(q, k, v, w, beta * torch.where(t >= 64, 0.99, 1.0), g, scale)


import torch  # noqa: E402

pv.implement("path_attn", buggy, name="my_path_planted", fp32_dot="ieee", dtypes=("fp32",))
