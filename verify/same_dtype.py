"""Plain PyTorch implementations in a working precision: the "same-dtype implementation" of the budget rule
(the float64 oracles in references/ are the reference; these only set how much error the dtype forces).

What a competent engineer writes in that dtype (docs/design.md section 7): the blockwise / chunkwise
matrix form, matmul operands rounded to the precision's dot format with fp32 accumulation
(`Precision.mm`), stored results rounded to the storage dtype, softmax and solves in fp32 (there is
no bf16 triangular solve).  Never a token-by-token walk in bf16.  Inputs are fp32 tensors holding the
kernel's (already rounded) input values; everything is differentiable, for gradient budgets.
Every fp32 sum runs in a fixed order (pathmdn_verify.core.precision: `Precision.mm`, `fixed_order`, `matmul`), never a
BLAS's, so a budget is the same on every machine.
"""
from __future__ import annotations

import torch

from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.references import module_oracle as MOD
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify.core.precision import Precision, fixed_order, matmul


def path_attn(q, k, v, w, beta, g, cu_seqlens, prec: Precision, scale, gate_scaled, block=64):
    """PaTH / PaTH-FoX: the logits by blocks of 64 (the kernels' block: UT transforms, right-to-left scan)
    in prec, then softmax attention with the FlashAttention backward (_AttendStoredOutput)."""
    with fixed_order():     # the UT transform's triangular solve
        return P.per_head(lambda q_, k_, v_, w_, b_, g_: _attend(
            P.blockwise_logits(q_, k_, w_, b_, block, prec.mm)[2], v_, g_, prec, scale, gate_scaled),
            q, k, v, w, beta, g, cu_seqlens)


def fox_attn(q, k, v, g, cu_seqlens, prec: Precision, scale, gate_scaled, window=None):
    """FoX as standard attention (logits, fp32 softmax, P rounded to the dot format before P V), with
    the FlashAttention backward (_AttendStoredOutput); window: a sliding window (P.plain_logits)."""
    return P.per_head(lambda q_, k_, v_, w_, b_, g_: _attend(
        P.plain_logits(q_, k_, prec.mm, window), v_, g_, prec, scale, gate_scaled), q, k, v, None, None, g,
        cu_seqlens)


def _attend(logits, v, g, prec: Precision, scale, gate_scaled):
    """store(softmax(scores) V) of one head, scores as in pathmdn_verify.references.path_oracle.scores, with the
    FlashAttention backward."""
    gate = None if g is None else P.gate_matrix(g)
    return _AttendStoredOutput.apply(P.scores(logits, gate, scale, gate_scaled), v, prec)[0]


class _AttendStoredOutput(torch.autograd.Function):
    """O = store(softmax(S) V).  Backward as FlashAttention-style kernels compute it:
    dV = P^T dO, dP = dO V^T, delta = rowsum(dO * O) from the *stored* O, dS = P (dP - delta).
    Measured: without the stored O in delta, fla's FoX bf16 backward (which does round O there) exceeded
    its budget at 1.6x on saturated logits (dg 5.0e-2 against a same-dtype error below u_bf16), and fla's
    PaTH fp32 backward at T = 1 returned dk = 1.7e-2 where plain autograd of this implementation cancels exactly to 0
    (dP a TF32 dot, delta from the stored O: their difference is one rounding, not zero)."""
    generate_vmap_rule = True     # pathmdn_verify.references.path_oracle.per_head runs the heads under torch.vmap

    @staticmethod
    def forward(s, v, prec):
        """(O, P): P is an output so that setup_context can save it for the backward (not differentiable)."""
        p = _softmax(s)
        return prec.store(prec.mm(p, v)), p

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[1], inputs[1], output[0])
        ctx.prec = inputs[2]
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, do, _):
        p, v, o = ctx.saved_tensors
        mm = ctx.prec.mm
        delta = matmul((do * o)[..., None, :], torch.ones_like(o)[..., :, None])[..., 0]
        return p * (mm(do, v.T) - delta), mm(p.T, do), None


def _softmax(s):
    """fp32 softmax with a fixed-order row sum: e = fl32(exp(s - max s)) (exp in float64), p = e / sum e."""
    e = torch.exp((s - s.amax(-1, keepdim=True)).double()).float()
    return e / matmul(e, torch.ones_like(e[..., :1]))


def decode_keys(k, w, beta, prec: Precision, cu_seqlens=None, block=64):
    """The decode cache by blocks of each sequence of cu_seqlens, as a kernel builds it: row j of block c is
    Kbar_j^T F_{c+1} ... F_last (H_T ... H_{j+1} k_j), products in prec, stored in the kernel dtype."""
    out = torch.empty_like(k)
    with fixed_order():     # the UT transform's triangular solve
        for b in range(k.shape[0]):
            for h in range(k.shape[2]):
                for first, end in P.segments(k.shape[1], cu_seqlens):
                    kk, ww, bb = k[b, first:end, h], w[b, first:end, h], beta[b, first:end, h]
                    seq_out = out[b, first:end, h]      # a view
                    later = torch.eye(k.shape[-1], dtype=k.dtype, device=k.device)    # F_{c+1} ... F_last
                    for s in reversed(range(0, end - first, block)):
                        blk = P.block_transform(kk[s:s + block], kk[s:s + block], ww[s:s + block], bb[s:s + block],
                                                prec.mm)
                        seq_out[s:s + block] = prec.mm(blk["Kbar"], later)
                        later = prec.mm(blk["F"], later)
    return prec.store(out)


def mdn(q, k, v, log_alpha, log_mu, beta, eta, S0, M0, prec: Precision, scale=None, chunk=64, p=None):
    """The stable chunkwise MDN form in fp32 (products in prec's dot format, solves in fixed order), with the
    dot operands k^ = eta k and p = alpha k (unless p is given) rounded to the storage dtype as a bf16
    implementation holds them.  Returns (o, S_T, M_T)."""
    k_hat = prec.store(eta[..., None] * k)
    p = prec.store(torch.exp(log_alpha)[..., None] * k) if p is None else p
    with fixed_order():
        o, S, M = MDN.chunk_forward(q, k_hat, v, log_alpha, log_mu, beta, torch.ones_like(eta), p=p, scale=scale,
                                    S0=S0, M0=M0, chunk=chunk, form="stable", mm=prec.mm)
    return prec.store(o), S, M


# ------------------------------------------------------------------------------------------ fla's modules
# The modules' equations (pathmdn_verify.references.module_oracle) in fp32, each last-dim sum in a fixed order
# (`_total`), the convolution's W taps accumulated in tap order as its kernels do, and every tensor a kernel writes
# (the output, the carried state, r = x + residual) rounded to the dtype it is stored in.

def _total(t):
    """sum over the last dim in fp32, in a fixed order (pathmdn_verify.core.precision.matmul with a ones vector)."""
    return matmul(t[..., None, :], torch.ones_like(t)[..., :, None])[..., 0, 0]


def short_conv(prec: Precision, **x):
    """(store(y), the carried state, copies of stored tokens) of the short convolution in fp32."""
    y, state = MOD.short_conv(**x)
    return prec.store(y), None if state is None else prec.store(state)


def short_conv_update(prec: Precision, **x):
    y, cache = MOD.short_conv_update(**x)
    return prec.store(y), prec.store(cache)


def _stored_r(prec: Precision, r, residual_fp32: bool):
    """r = x + residual as the prenorm output stores it: fp32 with residual_in_fp32 (or an fp32 residual), else in
    the storage dtype."""
    return None if r is None else (r if residual_fp32 else prec.store(r))


def rms_norm_gated(prec: Precision, residual_in_fp32=False, **x):
    y, r = MOD.rms_norm_gated(**x, total=_total)
    return prec.store(y), _stored_r(prec, r, residual_in_fp32)


def rms_norm_gate_linear(prec: Precision, x, g, norm_weight, linear_weight, norm_bias=None, linear_bias=None,
                         residual=None, prenorm=False, eps=1e-6, residual_in_fp32=False):
    """The gated norm stored in the dtype (as fla's kernel writes it), then the linear layer with its operands in the
    dot format and fp32 accumulation, stored."""
    y, r = MOD.rms_norm_gated(x, g, norm_weight, norm_bias, "swish", residual, prenorm, eps, total=_total)
    out = prec.mm(prec.store(y), linear_weight.T)
    return prec.store(out if linear_bias is None else out + linear_bias), _stored_r(prec, r, residual_in_fp32)


def l2norm(prec: Precision, x, eps=1e-6, output_dtype=None):
    y = MOD.l2norm(x, eps, total=_total)
    return y if output_dtype == "fp32" else prec.store(y)


def group_norm(prec: Precision, residual_in_fp32=False, **x):
    y, r = MOD.group_norm(**x, total=_total)
    return prec.store(y), _stored_r(prec, r, residual_in_fp32)
