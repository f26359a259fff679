"""One concrete input of a kernel check: rebuilt from the case label a check reports (pathmdn_verify.core.search),
or loaded from a saved file of named tensors (the format `verify compare` takes and `--save-failing` writes).

A searched kernel check's Result names the example it judged worst (details "minimal_example" when it
failed, "failing_example" when the kernel faulted, "worst_example" when it passed) by the case label of
pathmdn_verify.core.inputs.case_label, which lists every field that differs from the defaults: enough to rebuild
the tensors exactly.  Every function takes the op's record (pathmdn_verify.ops.record(check_id) resolves it).
"""
from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import torch

from pathmdn_verify.core import validate
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.precision import TORCH_DTYPES

EXAMPLE_KEYS = ("minimal_example", "failing_example", "worst_example")
KERNEL_DTYPE_INPUTS = ("q", "k", "v")      # in the check's dtype; cu_seqlens int32; every other float fp32


def case_from_label(case_type, label: str):
    """The case whose label (pathmdn_verify.core.inputs.case_label) is `label`: 'T=100 D=32 cu_seqlens=(0, 19, 100) seed=2'."""
    known = {f.name for f in fields(case_type)}
    values = {}
    for item in re.split(r"\s(?=\w+=)", label.strip()):
        name, _, text = item.partition("=")
        if name not in known:
            raise UsageError(f"example [{label}]: {name!r} is not a field of {case_type.__name__}")
        try:
            values[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            values[name] = text           # regime names: beta=near2_4, gate=mixed
    return case_type(**values)


def build(op, dtype: str, case, device: str) -> dict:
    """The kernel inputs of op for case in dtype, as its checks build them (pathmdn_verify.core.engine)."""
    return op.inputs(case, TORCH_DTYPES[dtype], device)


def from_label(op, dtype: str, label: str, device: str = "cpu") -> dict:
    return build(op, dtype, case_from_label(type(op.sample_case), label), device)


def reported(result) -> str | None:
    """The label of the example a searched check's result names."""
    return next((result.details[k] for k in EXAMPLE_KEYS if k in result.details), None)


def load_file(path: str, op) -> dict:
    """The tensors of FILE.pt as saved, validated for op (a OpRecord): its names, shapes and domains."""
    if not Path(path).is_file():
        raise UsageError(f"--inputs {path}: no such file")
    try:
        x = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UsageError(f"--inputs {path}: not a torch.save file ({type(exc).__name__}: {exc})".splitlines()[0])
    if not isinstance(x, dict):
        raise UsageError(f"--inputs {path}: holds a {type(x).__name__}, expected a dict of named tensors")
    validate.keys(x, op.required, op.optional, op.name)
    x = {n: x.get(n) for n in op.required + op.optional}
    op.error_inputs(x)
    return x


def in_dtypes(x: dict, dtype: str, device: str, dtype_inputs: tuple[str, ...] = KERNEL_DTYPE_INPUTS) -> dict:
    """x with the op's dtype inputs (q, k, v unless its record says otherwise: OpRecord.dtype_inputs) in dtype,
    cu_seqlens int32 and every other tensor fp32, on device; a value that is no tensor (an option) as it is."""
    return {n: t if not isinstance(t, torch.Tensor) else (t.to(TORCH_DTYPES[dtype]) if n in dtype_inputs else
                                                          t.int() if n == "cu_seqlens" else t.float()).to(device)
            for n, t in x.items()}


def load(path: str, op, dtype: str, device: str) -> dict:
    """A saved example, validated, in the check's dtypes (in_dtypes)."""
    return in_dtypes(load_file(path, op), dtype, device, op.dtype_inputs)


def save(x: dict, path) -> None:
    """Write an example so that `verify compare`, `verify localize --inputs` and the sanitizer can replay it."""
    torch.save({n: t.detach().cpu() for n, t in x.items() if t is not None}, path)


def shape(x: dict) -> str:
    """'B=1 T=64 HQ=2 H=2 D=32 Dv=32' (+ the sequence split) of an example."""
    B, T, HQ, D = x["q"].shape
    text = f"B={B} T={T} HQ={HQ} H={x['k'].shape[2]} D={D} Dv={x['v'].shape[-1]}"
    cu = x.get("cu_seqlens")
    return text if cu is None else f"{text} cu_seqlens={tuple(int(c) for c in cu)}"
