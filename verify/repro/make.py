"""`verify repro`'s library: find the example of a kernel check to reproduce (the minimal failing example its
seeded search reports, a case given by its label, or a saved file of tensors) and write its bundle
(pathmdn_verify.repro.bundle) with its ISSUE.md (pathmdn_verify.repro.issue)."""
from __future__ import annotations

from pathlib import Path

from pathmdn_verify.core import examples
from pathmdn_verify.core.errors import UsageError, VariantUnsupported
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import REGISTRY, Context
from pathmdn_verify.repro import bundle, issue
from pathmdn_verify.repro.calls import CALLS

# Triton's CPU interpreter hands bf16 operands to numpy as their bit patterns (triton-lang/triton#11584): with fla
# alone, a bf16 Triton kernel on a CPU computes garbage, so such a bundle is judged on a GPU only
BF16_ON_CPU = ("a bf16 Triton kernel: Triton's CPU interpreter computes bf16 on the values' bit patterns "
               "(triton-lang/triton#11584), so only a GPU judges it")


def validate(check: str, out: str) -> CheckId:
    """The check id, parsed; UsageError for what cannot be a bundle (nothing is written)."""
    from pathmdn_verify.run import load_checks
    cid = CheckId.parse(check)
    if cid.impl != "fla" or not cid.searched or cid.pass_ not in ("fwd", "bwd"):
        raise UsageError(f"{check}: a bundle reproduces a forward or backward check of fla's kernels "
                         "(kernel.fla.<op>.<fwd|bwd>.<dtype>.<regime>)")
    load_checks()
    if check not in REGISTRY:
        raise UsageError(f"{check}: no such check; see `verify list -k kernel.fla`")
    if cid.op not in CALLS:
        raise UsageError(f"{check}: no bundle call is written for op {cid.op} (pathmdn_verify.repro.calls)")
    if Path(out).exists() and (not Path(out).is_dir() or any(Path(out).iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty folder")
    return cid


def example(cid: CheckId, ctx: Context, case: str | None, inputs: str | None) -> tuple[str, dict]:
    """(label, inputs as the check builds them, on the CPU): --case's label, --inputs' file, or the example the
    check's seeded search reports (its minimal failing example when it fails)."""
    from pathmdn_verify import ops
    from pathmdn_verify.core.engine import case_inputs
    from pathmdn_verify.core.precision import TORCH_DTYPES
    op = ops.record(cid)
    if inputs:
        return inputs, examples.load(inputs, op, cid.dtype, "cpu")
    if case is None:
        result = REGISTRY[str(cid)].run(ctx)
        case = examples.reported(result)
        if case is None:
            raise UsageError(f"{cid} at seed {ctx.seed} reported no example ({result.status}: {result.message})")
    parsed = examples.case_from_label(type(op.sample_case), case)
    try:
        return case, case_inputs(op, parsed, TORCH_DTYPES[cid.dtype], "cpu")
    except (ValueError, TypeError, VariantUnsupported) as exc:
        raise UsageError(f"--case {case}: {exc}".splitlines()[0]) from exc


def provenance(device: str) -> dict:
    from pathmdn_verify.platform import environment
    return {"toolkit": environment.toolkit(), "kernel_package": environment.kernel_package(),
            "environment": {**environment.versions(), **environment.describe(device)}}


def entries(check: str, measured: dict) -> list:
    """The expected-failure entries that list the check and describe what was measured: of the failure's kind
    (and exception type) where the example failed, else those scoped to a GPU (a GPU-only finding)."""
    from pathmdn_verify.run import xfail_list
    listed = [e for e in xfail_list.load() if check in e.ids]
    if "exception" in measured:
        kind = measured["exception"].split(":", 1)[0]
        return [e for e in listed if "exception" in e.kinds and e.exception == kind]
    if measured.get("kind"):
        return [e for e in listed if measured["kind"] in e.kinds]
    return [e for e in listed if any(d.startswith("cuda") for d in e.devices or ())]


def make(check: str, out: str, ctx: Context, case: str | None = None, inputs: str | None = None,
         title: str | None = None, needs_gpu: str | None = None) -> dict:
    """Write the bundle of the check's example into out; bundle.json's document.  An example that does not fail
    here is refused (nothing to reproduce), unless the finding needs a GPU (needs_gpu: which, and why)."""
    from pathmdn_verify import ops
    cid = validate(check, out)
    label, x = example(cid, ctx, case, inputs)
    ex = bundle.Example(check, ops.record(cid), cid.pass_, cid.dtype, label, x, ctx.seed, ctx.fp32_dot)
    shapes = ", ".join(f"{n} {list(t.shape)} {str(t.dtype).removeprefix('torch.')}" for n, t in x.items() if t is not None)
    render = lambda doc, call: issue.render(doc, call, entries(check, doc["measured"]), shapes)
    created = not Path(out).exists()
    probe = Path(out) / ".unwritten"          # written into a temporary name first: a refused example leaves nothing
    gpu = needs_gpu or (BF16_ON_CPU if ex.dtype == "bf16" and CALLS[cid.op].triton else None)
    try:
        doc = bundle.write(probe, ex, ctx.device, title, gpu, provenance(ctx.device), render)
    except BaseException:
        _remove(probe, Path(out) if created else None)
        raise
    if not needs_gpu and doc["measured"].get("exception", "").startswith("OutOfBoundsAccess"):
        _remove(probe, Path(out) if created else None)
        raise UsageError(f"{check}: example [{label}] fails by an out-of-bounds access that only the toolkit's bounds "
                         "check sees (`verify localize --sanitize` names it); with fla alone the access reads or "
                         "writes past the tensor unchecked, so repro.py could not judge it: --case LABEL picks an "
                         "example whose values come out wrong")
    if not needs_gpu and not bundle.fails(doc["measured"]):
        _remove(probe, Path(out) if created else None)
        raise UsageError(f"{check}: example [{label}] passes on {ctx.device} ({_summary(doc['measured'])}): nothing to "
                         "reproduce; --case LABEL picks another example, --needs-gpu WHY writes a GPU finding's bundle")
    for f in probe.iterdir():
        f.rename(Path(out) / f.name)
    probe.rmdir()
    return doc


def _remove(probe: Path, created: Path | None) -> None:
    if probe.exists():
        for f in probe.iterdir():
            f.unlink()
        probe.rmdir()
    if created is not None:
        created.rmdir()


def _summary(measured: dict) -> str:
    if "not_run" in measured:
        return measured["not_run"]
    return f"worst ratio {measured['ratio']:.3g} of its budget"
