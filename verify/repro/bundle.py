"""A repro bundle: one example of a kernel check, as a folder that runs with torch and the kernel package (fla)
alone, for a maintainer of fla to run and an issue tracker to take.

    repro.py     calls fla's entry point on the example exactly as the check did (pathmdn_verify.repro.calls),
                 judges every output or gradient against the float64 expected tensor under its budget
                 (pathmdn_verify.repro.standalone), prints the errors, the budgets and what they mean; exit 1
                 while the defect is present, 0 once it is gone, 2 when this fla cannot make the call, 77 when
                 the finding needs a GPU and there is none
    tensors.pt   the inputs as the kernel takes them, the backward's upstream gradients, the expected tensors in
                 float64 (the toolkit's oracle on the same rounded inputs, when the bundle was written)
    bundle.json  the check, the example, each tensor's budget, the paragraph that explains them, what was
                 measured when the bundle was written, and the GPU a GPU-only finding needs
    ISSUE.md     the report in the shape an upstream tracker asks for (title, environment, steps, expected,
                 observed, cause)

The expected tensors and budgets are engine.expectations' (pathmdn_verify.core.budget's rule, c times the
error of a same-dtype implementation of the same algorithm), computed on the CPU, so a bundle written here is
valid on a GPU too.
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from pathmdn_verify.core import engine
from pathmdn_verify.core.budget import judged
from pathmdn_verify.core.errors import (UsageError, VariantUnsupported, innermost_error, is_interpreter_gap,
                                         kernel_frame)
from pathmdn_verify.core.inputs import as_oracle
from pathmdn_verify.core.precision import Precision
from pathmdn_verify.core.records import OpRecord, as_tuple, scale_of
from pathmdn_verify.repro import standalone
from pathmdn_verify.repro.calls import CALLS

FORMAT = 1
FILES = ("repro.py", "tensors.pt", "bundle.json", "ISSUE.md")


@dataclass(frozen=True)
class Example:
    """What a bundle reproduces: a check's op, pass and dtype on inputs x (the kernel's dtypes, CPU tensors)."""
    check: str
    op: OpRecord
    pass_: str
    dtype: str
    label: str          # the case label (pathmdn_verify.core.inputs.case_label), or the file it came from
    x: dict
    seed: int           # the backward's upstream gradients come from it
    fp32_dot: str

    @property
    def prec(self) -> Precision:
        return Precision.of_op(self.op, self.dtype, self.fp32_dot)


def tensors_of(ex: Example, expected: list[engine.Expected]) -> dict:
    """tensors.pt: the inputs, the expected tensors (float64) and, for the backward, the upstream gradients."""
    out = {"inputs": {n: t.detach().cpu() for n, t in ex.x.items() if t is not None},
           "expected": {e.name: e.oracle.detach().cpu() for e in expected}}
    if ex.pass_ == "bwd":
        with torch.no_grad():
            outs = as_tuple(ex.op.oracle(**as_oracle(ex.x), scale=scale_of(ex.x)))
        out["upstream"] = [u.cpu() for u in engine.upstream(ex.op, outs, ex.prec, ex.seed)]
    return out


def measure_here(ex: Example, expected: list[engine.Expected], device: str) -> dict:
    """The kernel on this device, judged by the toolkit against the same expected tensors: per tensor its
    verdict, or the exception the kernel raised (with its fla source line), or why it cannot run here."""
    x = {n: None if t is None else t.to(device) for n, t in ex.x.items()}
    try:
        outs = engine.kernel_outputs(ex.op, ex.pass_, x, ex.prec, ex.seed)
    except (UsageError, VariantUnsupported):
        raise
    except Exception as exc:
        if is_interpreter_gap(exc):
            return {"device": device, "not_run": f"the CPU interpreter cannot run it: {innermost_error(exc)}"}
        return {"device": device, "exception": innermost_error(exc), "where": kernel_frame(exc)}
    verdicts = [judged(e.name, o.detach().cpu(), e.oracle, e.budget) for e, o in zip(expected, outs)]
    worst = max(verdicts, key=lambda v: v.ratio)
    return {"device": device, "tensors": [v.as_json() for v in verdicts],
            "ratio": worst.ratio if worst.ratio != float("inf") else None, "kind": worst.kind if worst.ratio > 1 else None}


def fails(measured: dict) -> bool:
    """Whether the example failed where it was measured (an exception, non-finite or over budget)."""
    return "exception" in measured or (measured.get("tensors") is not None and measured["kind"] is not None)


def budget_text(ex: Example) -> str:
    """What the budgets mean, in one paragraph, with this bundle's numbers."""
    c = ex.op.budget_factor[ex.pass_]
    dot = {"bf16": "bf16 operands and fp32 accumulation",
           "fp32": "TF32 dots (what Triton's tl.dot does in fp32 on an NVIDIA GPU; on a CPU Triton's interpreter "
                   "computes them in IEEE fp32, more accurately) and fp32 accumulation"
           if ex.prec.dot == "tf32" else "IEEE fp32 dots and accumulation"}[ex.dtype]
    what = "outputs" if ex.pass_ == "fwd" else "gradients"
    return (f"The expected {what} are the float64 result of the same function on the same rounded inputs, "
            f"computed by pathmdn-verify's literal oracle when this bundle was written (tensors.pt). A tensor passes "
            f"when both its normwise relative error and its max abs error are within its budget. Each budget is "
            f"c = {c:g} times the error of a same-dtype implementation of the same algorithm on the same inputs "
            f"(plain PyTorch in {ex.dtype}, {dot}), and never less than c times the rounding of the float64 answer "
            f"to {ex.dtype}: an implementation in this precision that computes the right function stays within it, "
            f"while a wrong formula, index or overflow gives errors of order one or non-finite values. (pathmdn-verify "
            f"docs/design.md, section 7.)")


def document(ex: Example, expected: list[engine.Expected], measured: dict, title: str, needs_gpu: str | None,
             provenance: dict) -> dict:
    """bundle.json."""
    call = CALLS[ex.op.name]
    doc = {"format": FORMAT, "title": title, "check": ex.check, "op": ex.op.name, "pass": ex.pass_,
           "dtype": ex.dtype, "example": ex.label, "seed": ex.seed, "fp32_dot": Precision.of_op(ex.op, "fp32", ex.fp32_dot).dot,
           "entry": f"{call.module}.{call.function}", "budget_factor": ex.op.budget_factor[ex.pass_],
           "tensors": [{"name": e.name, "rel": e.budget.rel, "abs": e.budget.abs,
                        "same_dtype_rel": e.budget.same_dtype_rel, "same_dtype_abs": e.budget.same_dtype_abs}
                       for e in expected],
           "budget_text": budget_text(ex), "needs_gpu": needs_gpu, "measured": measured, **provenance}
    if ex.pass_ == "bwd":
        doc["grads_of"] = engine.grad_leaves(ex.op, ex.x)
    return doc


def script(ex: Example, title: str) -> str:
    """repro.py: a docstring, the common part (pathmdn_verify.repro.standalone) and the op's call."""
    call = CALLS[ex.op.name]
    common = inspect.getsource(standalone).split('"""', 2)[2].lstrip("\n")
    judged = "output" if ex.pass_ == "fwd" else "gradient"
    doc = [title, "", f"pathmdn-verify check {ex.check}, example [{ex.label}].", "", "    python repro.py", "",
           f"calls {call.module}.{call.function} on the inputs in tensors.pt as the check did and judges",
           f"every {judged} against its float64 expected tensor (tensors.pt) under its budget (bundle.json).",
           "Exit status: 1 the defect is present, 0 it is gone, 2 this fla cannot make the call (or this",
           "machine cannot run it), 77 the finding needs an NVIDIA GPU and there is none.",
           "Needs torch, triton and fla (fla-core; it imports packaging).  Without a GPU, fla's Triton kernels",
           "run in Triton's interpreter, which needs numpy < 2.4 with Triton 3.6."]
    return (f'"""{chr(10).join(doc)}\n"""\n{common}\n\n# the call, as the check made it\n'
            f"MODULE, FUNCTION = {call.module!r}, {call.function!r}\nKEYWORDS = {call.keywords!r}\n\n\n"
            f"{call.source}\n\nif __name__ == \"__main__\":\n"
            "    sys.exit(main(kernel, MODULE, FUNCTION, KEYWORDS))\n")


def write(out: Path, ex: Example, device: str, title: str | None, needs_gpu: str | None, provenance: dict,
          issue) -> dict:
    """Write the bundle of ex into out (created); returns bundle.json's document.  issue(doc, call) -> ISSUE.md."""
    expected = engine.expectations(ex.op, ex.pass_, ex.x, ex.prec, ex.seed, "cpu")
    measured = measure_here(ex, expected, device)
    title = title or default_title(ex, measured)
    doc = document(ex, expected, measured, title, needs_gpu, provenance)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(tensors_of(ex, expected), out / "tensors.pt")
    (out / "bundle.json").write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    (out / "repro.py").write_text(script(ex, title))
    (out / "ISSUE.md").write_text(issue(doc, CALLS[ex.op.name]))
    return doc


def default_title(ex: Example, measured: dict) -> str:
    call = CALLS[ex.op.name]
    what = "backward" if ex.pass_ == "bwd" else "forward"
    if "exception" in measured:
        found = f"raises {measured['exception'].split(':', 1)[0]}"
    elif measured.get("kind"):
        worst = max(measured["tensors"], key=lambda t: t["ratio"] if t["ratio"] is not None else float("inf"))
        found = (f"{worst['name']} non-finite" if measured["kind"] == "non_finite" else
                 f"{worst['name']} {worst['ratio']:.3g}x over its error budget")
    else:
        found = "fails its float64 check"
    return f"{call.function} {what} in {ex.dtype}: {found}"


def read(folder: Path) -> dict:
    """bundle.json of a bundle folder; ValueError naming what is missing."""
    missing = [f for f in FILES[:3] if not (folder / f).is_file()]
    if missing:
        raise ValueError(f"{folder}: not a repro bundle (no {', '.join(missing)})")
    doc = json.loads((folder / "bundle.json").read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{folder}/bundle.json: format {doc.get('format')!r}, this toolkit writes {FORMAT}")
    return doc
