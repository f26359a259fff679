"""The same kernel with a planted bug, as implementation "my_path_planted": beta 1% too small from token 65 on."""
import pathmdn_verify as pv
import torch

from my_kernels.path_attention import path_attention


def planted(q, k, v, w, beta, g=None, scale=None):
    late = torch.arange(beta.shape[1], device=beta.device).view(1, -1, 1) >= 64
    return path_attention(q, k, v, w, beta * torch.where(late, 0.99, 1.0), g, scale)


pv.implement("path_attn", planted, name="my_path_planted", fp32_dot="ieee", dtypes=("fp32",))
