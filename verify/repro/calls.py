"""How a repro bundle's repro.py calls each op's fla entry point: the call of the op's adapter in
pathmdn_verify.kernels.fla_ops, written out as source that needs torch and fla alone (a bundle runs without this
toolkit).  Each `kernel(entry, **inputs)` returns the op's outputs in its record's order (`OpRecord.outputs`);
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

_GDN = '''def kernel(entry, q, k, v, g=None, beta=None, S0=None, output_final_state=None, cu_seqlens=None):
    """Gated DeltaNet: (o, S_T, or None when output_final_state is False); g = log alpha, beta and q, k as given
    (the fused recurrent kernel takes g and beta left out: no decay, beta 1)."""
    return entry(q=q, k=k, v=v, g=g, beta=beta, scale=q.shape[-1] ** -0.5, initial_state=S0,
                 output_final_state=output_final_state is not False, use_qk_l2norm_in_kernel=False,
                 cu_seqlens=None if cu_seqlens is None else cu_seqlens.long())
'''

_GIVEN = '''def _given(**options):
    """The options a call gives (left out: the entry point's own default)."""
    return {k: v for k, v in options.items() if v is not None}
'''

_SHORT_CONV = _GIVEN + '''

def kernel(entry, x, weight, bias=None, residual=None, S0=None, output_final_state=None, activation=None,
           cu_seqlens=None):
    """The short convolution: (y [B, T, D], S_T [N, D, W] or None)."""
    return entry(x=x, weight=weight, bias=bias, residual=residual, initial_state=S0,
                 cu_seqlens=None if cu_seqlens is None else cu_seqlens.long(),
                 **_given(output_final_state=output_final_state, activation=activation))
'''

_SHORT_CONV_UPDATE = _GIVEN + '''

def kernel(entry, x, cache, weight, bias=None, residual=None, activation=None, layout=None):
    """One token of each of N sequences: x [N, 1, D] given in `layout` ([N, 1, D], packed [1, N, D] or [N, D]) and its
    cache [N, D, W] -> (y [N, 1, D], the cache after the step); fla updates the cache in place: a copy is given."""
    N, _, D = x.shape
    shaped = {None: lambda t: t, "N1D": lambda t: t, "1ND": lambda t: t.reshape(1, N, D),
              "ND": lambda t: t.reshape(N, D)}[layout]
    y, after = entry(x=shaped(x), cache=cache.clone(), weight=weight, bias=bias,
                     residual=None if residual is None else shaped(residual), **_given(activation=activation))
    return y.reshape(N, 1, D), after
'''

_NORM = _GIVEN + '''

def kernel(entry, @params@):
    """@what@: (the output, r = x + residual when prenorm, else None)."""
    out = entry(@arguments@, **_given(@options@))
    return tuple(out) if prenorm else (out, None)
'''

_L2NORM = _GIVEN + '''

def kernel(entry, x, eps=None, output_dtype=None):
    """l2norm: y = x / sqrt(sum(x^2) + eps), in output_dtype ("fp32" or "bf16") when given."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}.get(output_dtype)
    return (entry(x=x, **_given(eps=eps, output_dtype=dtype)),)
'''


def _norm(what: str, tensors: dict, options: tuple[str, ...]) -> str:
    """A norm's call: `tensors` {name: default or None for a required input} passed as they are, `options` given
    where set."""
    params = ", ".join(n if d is None else f"{n}=None" for n, d in tensors.items())
    params += "".join(f", {o}=None" for o in options)
    return (_NORM.replace("@params@", params).replace("@what@", what)
            .replace("@arguments@", ", ".join(f"{n}={n}" for n in tensors))
            .replace("@options@", ", ".join(f"{o}={o}" for o in options)))


_NORM_OPTIONS = ("prenorm", "residual_in_fp32", "eps")

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
    "short_conv": Call("fla.modules.convolution", "causal_conv1d",
                       ("x", "weight", "bias", "residual", "initial_state", "cu_seqlens"), _SHORT_CONV),
    "short_conv_update": Call("fla.modules.convolution", "causal_conv1d_update",
                              ("x", "cache", "weight", "bias", "residual"), _SHORT_CONV_UPDATE),
    "rms_norm_gated": Call("fla.modules.fused_norm_gate", "rms_norm_gated",
                           ("x", "g", "weight", "bias", "residual"),
                           _norm("the gated RMS norm", {"x": None, "g": None, "weight": 0, "bias": 0, "residual": 0},
                                 ("activation", *_NORM_OPTIONS))),
    "rms_norm_gate_linear": Call("fla.modules.fused_norm_gate", "rms_norm_swish_gate_linear",
                                 ("x", "g", "norm_weight", "norm_bias", "linear_weight", "linear_bias", "residual"),
                                 _norm("the gated RMS norm and its linear", {
                                     "x": None, "g": None, "linear_weight": None, "norm_weight": 0, "norm_bias": 0,
                                     "linear_bias": 0, "residual": 0}, _NORM_OPTIONS)),
    "l2norm": Call("fla.modules.l2norm", "l2norm", ("x",), _L2NORM),
    "group_norm": Call("fla.modules.layernorm", "group_norm", ("x", "weight", "bias", "residual"),
                       _norm("the group norm", {"x": None, "weight": 0, "bias": 0, "residual": 0},
                             (*_NORM_OPTIONS, "is_rms_norm", "num_groups"))),
}
