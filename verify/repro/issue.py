"""A bundle's ISSUE.md: the report in the shape fla's tracker (and most) asks for: a title, the environment, the
steps to reproduce, what was expected, what was observed, and the cause where the toolkit's expected-failure
list records one (the kernel source line with it)."""
from __future__ import annotations

from pathmdn_verify.repro.calls import Call


def _environment(doc: dict) -> list[str]:
    env, pkg = doc["environment"], doc["kernel_package"]
    origin = pkg.get("distribution") or (f"checkout {pkg['git_commit'][:12]}" if pkg.get("git_commit") else "a tree")
    where = doc["measured"]["device"]
    how = (f"{env.get('device_name')}" if where == "cuda" else
           f"CPU ({env.get('device_name')}), fla's Triton kernels in Triton's interpreter with pathmdn-verify's "
           f"fidelity layer (H200 tile sizes, {doc['fp32_dot'].upper()} fp32 dots)")
    runs = (f"only on an NVIDIA GPU: {doc['needs_gpu']} (without one it exits 77)" if doc["needs_gpu"] else
            "on an NVIDIA GPU, or on a CPU through Triton's interpreter (TRITON_INTERPRET=1, set by repro.py)")
    return [f"- fla {pkg.get('version')} ({origin}), torch {env.get('torch')}, triton {env.get('triton')}, "
            f"python {env.get('python')}",
            f"- measured with pathmdn-verify {doc['toolkit'].get('version')} on {how}",
            f"- repro.py runs {runs}"]


def _steps(doc: dict, call: Call, inputs: str) -> list[str]:
    judged = ("compares its outputs" if doc["pass"] == "fwd" else
              f"backpropagates the saved upstream gradients and compares the gradients of {', '.join(doc['grads_of'])}")
    return ["```", f"pip install torch triton packaging fla-core=={doc['kernel_package'].get('version')}"
            "    # without a GPU also: pip install 'numpy<2.4'",
            "python repro.py      # in this folder, beside tensors.pt and bundle.json", "```", "",
            f"repro.py calls fla as below on the inputs in tensors.pt (example [{doc['example']}]: {inputs}), "
            f"{judged} with float64 expected tensors, and exits 1 while the defect is present:", "",
            "```python", call.source.rstrip(), "```"]


def _expected(doc: dict) -> list[str]:
    rows = [f"| {t['name']} | {_g(t['rel'], 'none (the expected tensor is 0)')} | {_g(t['abs'])} |" for t in doc["tensors"]]
    return [doc["budget_text"], "", "| tensor | budget: normwise relative | budget: max abs |", "|---|---|---|", *rows]


def _observed(doc: dict, entries: list) -> list[str]:
    m = doc["measured"]
    if "exception" in m:
        lines = [f"Measured by pathmdn-verify on {m['device']}: the call raises `{m['exception']}`"
                 + (f" at `{m['where']}`." if m["where"] else ".")]
    elif "not_run" in m:
        lines = [f"Not run where the bundle was written ({m['device']}): {m['not_run']}."]
    else:
        quiet = " (within budget: the finding does not show there)" if m.get("kind") is None else ""
        lines = [f"Measured by pathmdn-verify on {m['device']}{quiet}:", "", "| tensor | normwise relative error | max abs error | error / budget |",
                 "|---|---|---|---|"]
        lines += [f"| {t['name']} | {_g(t['err_rel'])} | {_g(t['err_abs'])} | {_g(t['ratio'])} |" for t in m["tensors"]]
    for e in entries:
        lines += ["", f"Recorded by pathmdn-verify ({', '.join(e.devices) if e.devices else 'every device'}): "
                      f"{e.regime}; {e.measured}"]
    return lines


def _g(x, none: str = "inf (non-finite)") -> str:
    return none if x is None else f"{x:.3g}"


def render(doc: dict, call: Call, entries: list, inputs: str) -> str:
    """ISSUE.md for bundle.json's doc; entries: the expected-failure entries that list its check."""
    causes = sorted({e.cause for e in entries})
    parts = [f"# {doc['title']}", "",
             f"`{doc['entry']}` in fla {doc['kernel_package'].get('version')}, {'backward' if doc['pass'] == 'bwd' else 'forward'} "
             f"in {doc['dtype']}. Found by pathmdn-verify's check `{doc['check']}`.", "",
             "## Environment", "", *_environment(doc), "", "## Steps to reproduce", "", *_steps(doc, call, inputs), "",
             "## Expected", "", *_expected(doc), "", "## Observed", "", *_observed(doc, entries), "", "## Cause", "",
             *(causes or ["Not established."])]
    if doc["measured"].get("where"):
        parts += ["", f"The exception is raised at `{doc['measured']['where']}`."]
    return "\n".join(parts) + "\n"
