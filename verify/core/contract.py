"""The return contract of an op's canonical call, checked before anything is judged: an implementation returns the
op's outputs (op.outputs: the tensor itself for one output, else a tuple of that many tensors), each of the shape
the float64 oracle gives it, in the dtype checked (float32 for op.float32_outputs: fla's final states, and what an
option asks for, a norm's residual kept in fp32), on the inputs' device.  A mismatch is the implementation's call being wrong, not its numbers: a
UsageError naming what the op returns and what came back, never a pass, never a kernel failure, and never an
output left uncompared."""
from __future__ import annotations

import torch

from pathmdn_verify.core.errors import UsageError


def _tensor(t: torch.Tensor) -> str:
    return f"Tensor {list(t.shape)} {str(t.dtype).removeprefix('torch.')} on {t.device.type}"


def _returned(raw) -> str:
    """What came back, in words: `a Tensor [..] dtype on device`, or `a tuple of 2 (Tensor [...] ..., None)`."""
    if torch.is_tensor(raw):
        return f"a {_tensor(raw)}"
    if isinstance(raw, (tuple, list)):
        inner = ", ".join(_tensor(t) if torch.is_tensor(t) else type(t).__name__ if t is not None else "None"
                          for t in raw)
        return f"a {type(raw).__name__} of {len(raw)} ({inner})"
    return f"a {type(raw).__name__}"


def _wanted(op, names, dtype: torch.dtype, device: str, shapes=None, x=None) -> str:
    """What the op returns, in words: `o [1, 8, 2, 16] bfloat16 on cpu`, several as a tuple."""
    parts = []
    for i, n in enumerate(names):
        want = torch.float32 if n in op.float32_outputs(x) else dtype
        shape = f" {list(shapes[i])}" if shapes is not None and shapes[i] is not None else ""
        parts.append(f"{n}{shape} {str(want).removeprefix('torch.')} on {device}")
    return parts[0] if len(parts) == 1 else f"a tuple ({', '.join(parts)})"


def _refuse(op, names, dtype, device, raw, shapes=None, x=None):
    raise UsageError(f"{op.name} returns {_wanted(op, names, dtype, device, shapes, x)}; {op.impl} returned "
                     f"{_returned(raw)} (the op's canonical call: pathmdn_verify.op_specs()[{op.name!r}])")


def outputs(op, raw, dtype: torch.dtype, device: str, names: tuple[str, ...] | None = None, x: dict | None = None) \
        -> tuple:
    """raw, the implementation's return value for inputs x, as the tuple of the op's outputs (`names`, default
    op.outputs), each a tensor in its dtype (float32 for op.float32_outputs(x)) on `device`, or None at a place beside
    others (an output an option turns off: whether it should be is the kernel's to get right, judged as a failure);
    a UsageError otherwise."""
    names = names or op.outputs
    got = (raw,) if len(names) == 1 and torch.is_tensor(raw) else raw
    if not isinstance(got, (tuple, list)) or len(got) != len(names) or not torch.is_tensor(got[0]) or \
            not all(t is None or torch.is_tensor(t) for t in got):
        _refuse(op, names, dtype, device, raw, x=x)
    fp32 = op.float32_outputs(x)
    for n, t in zip(names, got):
        if t is not None and (t.dtype != (torch.float32 if n in fp32 else dtype) or t.device.type != device):
            _refuse(op, names, dtype, device, raw, x=x)
    return tuple(got)


def shapes(op, got, expected, dtype: torch.dtype, device: str, names: tuple[str, ...] | None = None,
           x: dict | None = None) -> None:
    """Each output's shape is the float64 oracle's (`expected`: its outputs' shapes, None for one an option turns
    off); a UsageError otherwise."""
    names = names or op.outputs
    if any(t is not None and e is not None and tuple(t.shape) != tuple(e) for t, e in zip(got, expected)):
        _refuse(op, names, dtype, device, tuple(got) if len(got) > 1 else got[0], expected, x)
