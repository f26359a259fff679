"""Working precisions: storage dtype, how dot operands are rounded, and the unit roundoff.

A kernel "in bf16" stores bf16 and multiplies bf16 operands with fp32 accumulation; a kernel "in fp32"
on an NVIDIA GPU multiplies TF32 operands (fp32 truncated to 10 explicit mantissa bits, as measured on
the H200; DESIGN.md section 6) unless told input_precision="ieee".  The same-dtype PyTorch references
run in float32 and call `Precision.mm`, so they make the rounding errors the dtype forces and no others.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11, "tf32": 2.0 ** -11, "fp32": 2.0 ** -24, "fp64": 2.0 ** -53}
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}


def truncate_tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> TF32 by truncation: clear the 13 low mantissa bits (round toward zero).

    >>> truncate_tf32(torch.tensor([1 + 2**-10 + 2**-11])).item() == 1 + 2**-10
    True
    """
    bits = x.float().contiguous().view(torch.int32)
    return (bits & ~0x1FFF).view(torch.float32)


def round_bf16(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 -> fp32, round to nearest even (torch's cast)."""
    return x.to(torch.bfloat16).float()


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
        """a @ b with operands rounded to the dot format and fp32 accumulation; its backward rounds the
        operands of the two gradient products the same way (as a kernel's backward dots do)."""
        return _RoundedMatmul.apply(a, b, self)

    def store(self, x: torch.Tensor) -> torch.Tensor:
        """Round to the storage dtype (what writing a tensor of this dtype does), back as fp32."""
        return x.to(self.torch_dtype).float()


class _RoundedMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, prec):
        ctx.save_for_backward(a, b)
        ctx.prec = prec
        return prec.operand(a) @ prec.operand(b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        r = ctx.prec.operand
        return r(grad) @ r(b).T, r(a).T @ r(grad), None
