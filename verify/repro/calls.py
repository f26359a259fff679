"""How a repro bundle's repro.py calls each op's fla entry point: the call of the op's adapter in
pathmdn_verify.kernels.fla_ops, written out as source that needs torch and fla alone (a bundle runs without this
toolkit).  Each `kernel(entry, **inputs)` returns the op's outputs in its record's order (`KernelOp.outputs`);
the scale is the checks' 1/sqrt(D), D the key head dim.  property_tests/slow/test_repro_slow.py runs every call
against its adapter on the same inputs and expects the same tensors, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Call:
    module: str                 # the fla module that offers the entry point
    function: str               # its name
    keywords: tuple[str, ...]   # every keyword the call passes: an entry point that names one not is another call
    source: str                 # def kernel(entry, <the op's inputs>) -> (<the op's outputs>)
    triton: bool = True         # the entry point runs Triton kernels (False: PyTorch code, fla's MDN chunk path)


_PATH = '''def kernel(entry, q, k, v, w, beta, g=None, cu_seqlens=None):
    """PaTH attention: o [B, T, HQ, Dv]; w and beta in fp32, as fla requires."""
    o, _ = entry(q=q, k=k, v=v, w=w, beta=beta, g=g, scale=q.shape[-1] ** -0.5, cu_seqlens=cu_seqlens,
                 use_cache=False)
    return (o,)
'''

_FOX = '''def kernel(entry, q, k, v, g=None, cu_seqlens=None):
    """Forgetting attention: o [B, T, HQ, Dv]; without g, fla's ungated attention."""
    return (entry(q=q, k=k, v=v, g=g, scale=q.shape[-1] ** -0.5, cu_seqlens=cu_seqlens),)
'''

_MDN = '''def kernel(entry, q, k, v, log_alpha, log_mu, beta, eta, p=None, S0=None, M0=None):
    """Momentum DeltaNet: (o, S_T, M_T); the residual p_t = alpha_t k_t unless p is given, q and k as given."""
    o, state = entry(q=q, k=k, v=v, log_alpha=log_alpha, log_mu=log_mu, p=p, beta=beta, eta=eta,
                     scale=q.shape[-1] ** -0.5, initial_state=None if S0 is None else (S0, M0),
                     output_final_state=True, use_qk_l2norm_in_kernel=False, use_p_times_alpha=p is None{chunk})
    return o, state[0], state[1]
'''

_GDN = '''def kernel(entry, q, k, v, g, beta, S0=None, cu_seqlens=None):
    """Gated DeltaNet: (o, S_T); g = log alpha, beta and q, k as given."""
    return entry(q=q, k=k, v=v, g=g, beta=beta, scale=q.shape[-1] ** -0.5, initial_state=S0,
                 output_final_state=True, use_qk_l2norm_in_kernel=False,
                 cu_seqlens=None if cu_seqlens is None else cu_seqlens.long())
'''

_MDN_KEYWORDS = ("q", "k", "v", "log_alpha", "log_mu", "p", "beta", "eta", "scale", "initial_state",
                 "output_final_state", "use_qk_l2norm_in_kernel", "use_p_times_alpha")
_GDN_KEYWORDS = ("q", "k", "v", "g", "beta", "scale", "initial_state", "output_final_state",
                 "use_qk_l2norm_in_kernel", "cu_seqlens")

CALLS = {
    "path_attn": Call("fla.ops.path_attn", "parallel_path_attn",
                      ("q", "k", "v", "w", "beta", "g", "scale", "cu_seqlens", "use_cache"), _PATH),
    "forgetting_attn": Call("fla.ops.forgetting_attn", "parallel_forgetting_attn",
                            ("q", "k", "v", "g", "scale", "cu_seqlens"), _FOX),
    **{f"mdn_chunk{n}": Call("fla.ops.momentum_delta_rule", "chunk_momentum_delta_rule",
                             _MDN_KEYWORDS + ("chunk_size",), _MDN.replace("{chunk}", f",\n                     chunk_size={n}"), triton=False)
       for n in (16, 32, 64)},
    "mdn_recurrent": Call("fla.ops.momentum_delta_rule", "fused_recurrent_momentum_delta_rule", _MDN_KEYWORDS,
                          _MDN.replace("{chunk}", "")),
    "gdn_chunk": Call("fla.ops.gated_delta_rule", "chunk_gated_delta_rule", _GDN_KEYWORDS, _GDN),
    "gdn_recurrent": Call("fla.ops.gated_delta_rule", "fused_recurrent_gated_delta_rule", _GDN_KEYWORDS, _GDN),
}
