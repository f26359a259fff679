"""One concrete input of a kernel check: parsed from the check id, rebuilt from the case label a check
reports (verify.search), or loaded from a saved file of named tensors (the format of `verify compare`).

A kernel check id reads kernel.fla.<op>.<pass>.<dtype>.<regime>; its Result names the example it judged
worst (details "minimal_example" when it failed, "failing_example" when the kernel faulted,
"worst_example" when it passed) by the case label of verify.inputs.case_label, which lists every field
that differs from the defaults: enough to rebuild the tensors exactly.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, fields

import torch

from verify.errors import UsageError
from verify.precision import TORCH_DTYPES

ID = re.compile(r"^kernel\.fla\.(?P<op>path_attn|forgetting_attn|mdn_chunk(?P<chunk>16|32|64)|mdn_recurrent)"
                r"\.(?P<pass_>fwd|bwd)\.(?P<dtype>bf16|fp32)\.(?P<regime>\w+)$")
EXAMPLE_KEYS = ("minimal_example", "failing_example", "worst_example")


@dataclass(frozen=True)
class KernelCheck:
    id: str
    op: str                # path_attn, forgetting_attn, mdn_chunk, mdn_recurrent (verify compare's --op)
    chunk: int | None
    pass_: str
    dtype: str

    @classmethod
    def parse(cls, check_id: str) -> "KernelCheck":
        m = ID.match(check_id)
        if not m:
            raise UsageError(f"--id {check_id}: not a kernel check of the form kernel.fla.<op>.<fwd|bwd>.<dtype>.<regime> "
                             "(op path_attn, forgetting_attn, mdn_chunk16/32/64 or mdn_recurrent); see `verify list -k kernel.fla`")
        op = m["op"]
        return cls(check_id, "mdn_chunk" if m["chunk"] else op, int(m["chunk"]) if m["chunk"] else None,
                   m["pass_"], m["dtype"])

    @property
    def kernel_op(self):
        """The op's record in verify.ops.OPS."""
        from verify.ops import OPS
        return OPS[f"mdn_chunk{self.chunk}" if self.chunk else self.op]

    @property
    def case_type(self):
        return type(self.kernel_op.sample_case)


def case_from_label(case_type, label: str):
    """The case whose label (verify.inputs.case_label) is `label`: 'T=100 D=32 cu_seqlens=(0, 19, 100) seed=2'."""
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


def build(check: KernelCheck, case, device: str) -> dict:
    """The check's kernel inputs for case, as the check builds them (verify.checks.kernels)."""
    return check.kernel_op.inputs(case, TORCH_DTYPES[check.dtype], device)


def from_check(check: KernelCheck, ctx) -> tuple[str, dict, bool]:
    """Run the check at ctx (its hypothesis search, seeded) and rebuild the example it reports, on the CPU.
    Returns (label, inputs, lost): lost when the kernel faulted and this process's CUDA context is gone."""
    from verify.registry import DEVICE_LOST, REGISTRY
    result = REGISTRY[check.id].run(ctx)
    label = next((result.details[k] for k in EXAMPLE_KEYS if k in result.details), None)
    if label is None:
        raise UsageError(f"{check.id} at seed {ctx.seed} reported no example ({result.status}: {result.message})")
    return label, build(check, case_from_label(check.case_type, label), "cpu"), bool(result.details.get(DEVICE_LOST))


def load(path: str, check: KernelCheck, device: str) -> dict:
    """A saved example (verify compare's format), validated; q, k, v in the check's dtype, other floats fp32."""
    from verify import compare
    x = compare.load(path, check.kernel_op)
    dtype = TORCH_DTYPES[check.dtype]
    return {n: None if t is None else (t.to(dtype) if n in ("q", "k", "v") else
                                       t.int() if n == "cu_seqlens" else t.float()).to(device)
            for n, t in x.items()}


def save(x: dict, path) -> None:
    """Write an example so that `verify compare`, `verify localize --inputs` and the sanitizer can replay it."""
    torch.save({n: t.detach().cpu() for n, t in x.items() if t is not None}, path)


def save_label(check_id: str, label: str, path) -> None:
    """Rebuild the example a check reported by its label (e.g. details["failing_example"]) and save it, on the CPU."""
    check = KernelCheck.parse(check_id)
    save(build(check, case_from_label(check.case_type, label), "cpu"), path)


def shape(x: dict) -> str:
    """'B=1 T=64 HQ=2 H=2 D=32 Dv=32' (+ the sequence split) of an example."""
    B, T, HQ, D = x["q"].shape
    text = f"B={B} T={T} HQ={HQ} H={x['k'].shape[2]} D={D} Dv={x['v'].shape[-1]}"
    cu = x.get("cu_seqlens")
    return text if cu is None else f"{text} cu_seqlens={tuple(int(c) for c in cu)}"
