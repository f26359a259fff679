"""Working precisions: storage dtype, how dot operands are rounded, and the unit roundoff; and the fixed-order
fp32 arithmetic that the same-dtype implementations (pathmdn_verify.same_dtype) run on.

A kernel "in bf16" stores bf16 and multiplies bf16 operands with fp32 accumulation; a kernel "in fp32"
on an NVIDIA GPU multiplies TF32 operands (fp32 truncated to 10 explicit mantissa bits, as measured on
the H200; docs/design.md section 8) unless told input_precision="ieee".  The same-dtype implementations run in
float32 and call `Precision.mm`, so they make the rounding errors the dtype forces and no others.

Machine independence: a BLAS's fp32 accumulation order differs between CPUs, libraries and thread counts
(on another x86-64 CPU the same-dtype MDN error on one case was 3.5e-7, several times this machine's), and
a budget built on it made verdicts machine-dependent.  So the same-dtype products never leave an order to a
BLAS: `fixed_order_matmul` forms each product of two fp32 values exactly in float64 (24 + 24 significant bits
fit in 53), sums each block of BLOCK_K consecutive products pairwise in float64, and rounds the fp32
accumulator once per block, blocks in index order.  Every step is an elementwise IEEE operation or (the
tree's first level) a float64 product of inner extent 2, whose two exact products any library sums with one
rounding; no reduction's order is a library's choice, so the result is the same bits on every CPU and GPU.
`fixed_order()` routes fp32 matmul / @ and linalg.solve_triangular of reference code run inside it (the
MDN chunkwise form) to these emulations.  Elementwise transcendental functions (exp, log) are not
emulated: libraries agree on them to an ulp, which moves an error by a small factor at most.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from pathmdn_verify.core.bits import round_bf16, truncate_tf32

UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11, "tf32": 2.0 ** -11, "fp32": 2.0 ** -24, "fp64": 2.0 ** -53}
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}
BLOCK_K = 16             # products per fp32 accumulation step (a power of 2): a bf16 MMA's k-extent
# float64 products formed at once (at least one row's block): 8 MiB, 3x faster than 2 ** 24 (128 MiB) at T = 1000
MAX_BLOCK_ELEMENTS = 2 ** 20


def fixed_order_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 a @ b ([..., M, K] @ [..., K, N], batch dims broadcast) in a fixed order:
    acc_0 = 0,  acc_{s+1} = fl32(acc_s + sum_{k in block s} a_k b_k),  blocks of BLOCK_K in index order,
    each product exact in float64 and each block summed as a pairwise tree in float64 (K padded with zeros,
    which add exactly).  The tree's first level, fl64(a_2j b_2j + a_2j+1 b_2j+1), is a float64 product with
    inner extent 2: both products are exact, so any order, FMA or not, rounds their exact sum once.
    Not differentiable (`matmul` is)."""
    K, N = a.shape[-1], b.shape[-1]
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    rows = max(1, MAX_BLOCK_ELEMENTS // (BLOCK_K * N * batch.numel()))     # rows whose products fit at once
    if a.shape[-2] > rows:      # rows apart: each output element is the same sequence of operations
        return torch.cat([fixed_order_matmul(a[..., r:r + rows, :], b) for r in range(0, a.shape[-2], rows)], dim=-2)
    pad = -K % BLOCK_K
    M = a.shape[-2]
    a64 = a.new_zeros((*a.shape[:-1], K + pad), dtype=torch.float64)    # K padded with zeros, in one copy
    a64[..., :K] = a.detach()
    b64 = b.new_zeros((*b.shape[:-2], K + pad, N), dtype=torch.float64)
    b64[..., :K, :] = b.detach()
    pairs_a = a64.expand(*batch, M, K + pad).unflatten(-1, (-1, 2)).movedim(-2, -3)    # [..., K/2, M, 2]
    pairs_b = b64.expand(*batch, K + pad, N).unflatten(-2, (-1, 2))                    # [..., K/2, 2, N]
    acc = torch.zeros((*batch, M, N), dtype=torch.float32, device=a.device)
    step = BLOCK_K // 2 * max(1, MAX_BLOCK_ELEMENTS // max(1, acc.numel() * BLOCK_K))   # pairs formed at once
    for s in range(0, (K + pad) // 2, step):
        part = pairs_a[..., s:s + step, :, :] @ pairs_b[..., s:s + step, :, :]     # [..., step, M, N]
        for _ in range(BLOCK_K.bit_length() - 2):       # pairwise within each aligned block of BLOCK_K
            part = part[..., 0::2, :, :] + part[..., 1::2, :, :]
        for block in part.unbind(-3):
            acc.add_(block)     # fl32(acc + block): fp32 plus float64 is summed in float64, rounded once
    return acc


class _Matmul(torch.autograd.Function):
    """a @ b with operands rounded by `rnd` and fixed-order fp32 accumulation; the backward's two products
    round their operands the same way (as a kernel's backward dots do)."""
    @staticmethod
    def forward(a, b, rnd):
        return fixed_order_matmul(rnd(a), rnd(b))

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b, rnd = inputs
        ctx.save_for_backward(a, b)
        ctx.rnd = rnd

    @staticmethod
    def vmap(info, in_dims, a, b, rnd):
        """Under torch.vmap: the same product of the whole batch, the vmapped dim first (fixed_order_matmul
        broadcasts batch dims; every output element is the same sequence of operations), so that rnd sees plain
        tensors (a bit-level rounding such as truncate_tf32 has no batching rule)."""
        rank = max(x.dim() - (d is not None) for x, d in zip((a, b), in_dims[:2]))     # logical ranks

        def lift(x, d):         # [N or 1, 1 ..., logical shape]: the vmapped dim first, batch dims aligned
            x = x.unsqueeze(0) if d is None else x.movedim(d, 0)
            return x.reshape(x.shape[0], *[1] * (rank + 1 - x.dim()), *x.shape[1:])
        return _Matmul.apply(lift(a, in_dims[0]), lift(b, in_dims[1]), rnd), 0

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        r = ctx.rnd
        ga = fixed_order_matmul(r(grad), r(b).mT).sum_to_size(a.shape)
        gb = fixed_order_matmul(r(a).mT, r(grad)).sum_to_size(b.shape)
        return ga, gb, None


def matmul(a: torch.Tensor, b: torch.Tensor, rnd=torch.Tensor.float) -> torch.Tensor:
    """Differentiable fixed-order fp32 a @ b (1-D operands as torch.matmul treats them)."""
    vec_a, vec_b = a.dim() == 1, b.dim() == 1
    out = _Matmul.apply(a.unsqueeze(0) if vec_a else a, b.unsqueeze(-1) if vec_b else b, rnd)
    return out.squeeze(-1) if vec_b else out.squeeze(-2) if vec_a else out


def solve_lower(A: torch.Tensor, B: torch.Tensor, unitriangular: bool = False) -> torch.Tensor:
    """X with A X = B, A lower triangular [L, L], by forward substitution column by column in fp32:
    X_i = (B_i - sum_{j<i} A_ij X_j) / A_ii, the sum accumulated in j order with one fp32 rounding per
    step (each product and update formed in float64).  Differentiable."""
    A64, X = A.double(), B.float()      # A's fp32 values in float64 once; fp32 with float64 computes in float64
    for j in range(X.shape[-2]):
        xj = X[..., j:j + 1, :]
        if not unitriangular:
            xj = (xj / A64[..., j:j + 1, j:j + 1]).float()
        below = (X[..., j + 1:, :] - A64[..., j + 1:, j:j + 1] * xj).float()      # the product exact in float64
        X = torch.cat([X[..., :j, :], xj, below], dim=-2)
    return X


class fixed_order(TorchFunctionMode):
    """Inside `with fixed_order():`, fp32 matmul / @ and lower-triangular solves are the fixed-order
    emulations above, so reference code written with plain torch runs machine-independently."""
    MATMULS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        fp32 = all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in args[:2])
        if fp32 and func in self.MATMULS and not kwargs:
            return matmul(args[0], args[1])
        if fp32 and func is torch.linalg.solve_triangular:
            if kwargs.get("upper", True) or not kwargs.get("left", True):
                raise NotImplementedError("fixed_order: only lower-triangular left solves are emulated")
            return solve_lower(args[0], args[1], kwargs.get("unitriangular", False))
        return func(*args, **kwargs)


@dataclass(frozen=True)
class Precision:
    """storage: 'bf16' | 'fp32';  dot: 'bf16' | 'tf32' | 'ieee' (how matmul operands are rounded)."""
    storage: str
    dot: str

    @classmethod
    def of(cls, dtype: str, fp32_dot: str = "tf32") -> "Precision":
        if dtype == "bf16":
            return cls("bf16", "bf16")
        if dtype == "fp32":
            return cls("fp32", fp32_dot)
        raise ValueError(f"unknown dtype {dtype!r}")

    @classmethod
    def of_op(cls, op, dtype: str, fp32_dot: str) -> "Precision":
        """The precision that op's budgets assume in dtype: fp32 products in the format its implementation
        declares (op.dot: a OpRecord's), else in the run's (--fp32-dot)."""
        return cls.of(dtype, op.dot or fp32_dot)

    @property
    def torch_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.storage]

    @property
    def u(self) -> float:
        """Unit roundoff of the dot operands (the a-priori bound's u)."""
        return UNIT_ROUNDOFF["fp32" if self.dot == "ieee" else self.dot]

    @property
    def unit_roundoff_storage(self) -> float:
        return UNIT_ROUNDOFF[self.storage]

    def operand(self, x: torch.Tensor) -> torch.Tensor:
        """x rounded to the dot format, as fp32 (not differentiable: mm handles gradients)."""
        x = x.float()
        if self.dot == "bf16":
            return round_bf16(x)
        if self.dot == "tf32":
            return truncate_tf32(x)
        return x

    def mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a @ b with operands rounded to the dot format and fixed-order fp32 accumulation; its backward
        rounds the operands of the two gradient products the same way."""
        return matmul(a, b, self.operand)

    def store(self, x: torch.Tensor) -> torch.Tensor:
        """Round to the storage dtype (what writing a tensor of this dtype does), back as fp32."""
        return x.to(self.torch_dtype).float()
