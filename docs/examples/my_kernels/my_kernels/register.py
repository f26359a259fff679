"""Registers the kernel of path_attention.py as implementation "my_path" of the op path_attn."""
import pathmdn_verify as pv

from my_kernels.path_attention import path_attention

pv.implement("path_attn", path_attention, name="my_path", fp32_dot="ieee", dtypes=("fp32",))
