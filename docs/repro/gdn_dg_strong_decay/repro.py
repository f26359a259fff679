"""Gated DeltaNet chunk backward: dg far from its float64 value at strong decay (gates near 0)

pathmdn-verify check kernel.fla.gdn_chunk.bwd.fp32.gate_near0, example [T=80 gate=near0 seed=0].

    python repro.py

calls fla.ops.gated_delta_rule.chunk_gated_delta_rule on the inputs in tensors.pt as the check did and judges
every gradient against its float64 expected tensor (tensors.pt) under its budget (bundle.json).
Exit status: 1 the defect is present, 0 it is gone, 2 this fla cannot make the call (or this
machine cannot run it), 77 the finding needs an NVIDIA GPU and there is none.
Needs torch, triton and fla (fla-core; it imports packaging).  Without a GPU, fla's Triton kernels
run in Triton's interpreter, which needs numpy < 2.4 with Triton 3.6.
"""
import importlib
import inspect
import json
import os
import sys
import traceback
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
GONE, DEFECT, CANNOT_RUN, NEEDS_GPU = 0, 1, 2, 77     # exit statuses


def pick_device(needs_gpu):
    """cuda when a GPU is present; else the CPU, where fla's Triton kernels run under Triton's interpreter
    (TRITON_INTERPRET=1, set before triton is imported); None when the finding needs a GPU and there is none."""
    if torch.cuda.is_available():
        return "cuda"
    if needs_gpu:
        return None
    os.environ["TRITON_INTERPRET"] = "1"
    return "cpu"


def without_timer():
    """On a machine without a GPU, Triton's autotuner has no timer to compare tile configs with (it asks the GPU
    driver, and raises): every config is given the same zero timing, so the first one runs.  This picks a tile
    config; it changes no arithmetic."""
    from triton.runtime import autotuner
    autotuner.Autotuner._bench = lambda self, *args, config, **meta: [0.0, 0.0, 0.0]


def entry_point(module, function, keywords):
    """(fla's entry point, None), or (None, why this fla cannot make the call: its module does not import, or
    the function is missing or takes other keywords)."""
    try:
        fn = getattr(importlib.import_module(module), function)
    except Exception as exc:
        return None, f"{module}.{function}: {type(exc).__name__}: {exc}".splitlines()[0]
    named = inspect.signature(fn).parameters
    missing = [k for k in keywords if k not in named]
    return (None, f"{module}.{function} takes no {', '.join(missing)}") if missing else (fn, None)


def rel_err(out, expected):
    """||out - expected||_F / ||expected||_F in float64; inf where out is non-finite and expected finite."""
    out, expected = out.detach().double().cpu(), expected.double()
    if not torch.isfinite(out[torch.isfinite(expected)]).all():
        return float("inf")
    return float(torch.linalg.vector_norm(out - expected) / torch.linalg.vector_norm(expected))


def max_abs(out, expected):
    """max |out - expected| in float64; inf where out is non-finite and expected finite."""
    out, expected = out.detach().double().cpu(), expected.double()
    if not torch.isfinite(out[torch.isfinite(expected)]).all():
        return float("inf")
    return float((out - expected).abs().max()) if out.numel() else 0.0


def judge(name, out, expected, budget):
    """(within budget?, the tensor's line: its errors against its budgets and the worst ratio)."""
    err_abs = max_abs(out, expected)
    ratios = [err_abs / budget["abs"]]
    text = f"max-abs {err_abs:.3g} (budget {budget['abs']:.3g})"
    if budget["rel"] is not None:
        err_rel = rel_err(out, expected)
        ratios.append(err_rel / budget["rel"])
        text = f"rel {err_rel:.3g} (budget {budget['rel']:.3g}), " + text
    worst = max(ratios)
    ok = worst <= 1
    how = f"{worst:.3g}x the budget" if worst != float("inf") else "NON-FINITE where the expected values are finite"
    return ok, f"  {'within ' if ok else 'EXCEEDS'} {name}: {text}: {how}"


def run(kernel, entry, bundle, tensors, device):
    """The outputs (fwd) or the gradients of sum_i <out_i, u_i> with the saved upstream u_i (bwd), in the order of
    bundle["tensors"]."""
    x = {n: t.to(device) for n, t in tensors["inputs"].items()}
    if bundle["pass"] == "fwd":
        with torch.no_grad():
            return list(kernel(entry, **x))
    leaves = {n: x[n].detach().clone().requires_grad_() for n in bundle["grads_of"]}
    outs = kernel(entry, **{**x, **leaves})
    torch.autograd.backward(list(outs), [u.to(device, o.dtype) for o, u in zip(outs, tensors["upstream"])])
    return [torch.zeros_like(t) if t.grad is None else t.grad for t in leaves.values()]


def in_fla(exc):
    """' (fla/<file>:<line>, in <function>)' of the innermost frame of fla in exc's traceback, or ''."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f"{os.sep}fla{os.sep}" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" (fla{f.filename.rsplit(os.sep + 'fla', 1)[1]}:{f.lineno}, in {f.name})"


def interpreter_crash(exc):
    """Why exc is Triton's CPU interpreter failing, not the kernel, else None: with numpy >= 2.4 it cannot index
    (triton-lang/triton#9171, fixed after Triton 3.6); its loop indices are Python ints, which have no .to()."""
    import numpy
    text = str(exc)
    if "only 0-dimensional arrays can be converted to Python scalars" in text and \
            tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (2, 4):
        return (f"Triton's CPU interpreter cannot run with numpy {numpy.__version__} (triton-lang/triton#9171, fixed "
                "after Triton 3.6): install numpy<2.4 to run this on a CPU")
    if "'int' object has no attribute" in text and "InterpreterError" in type(exc).__name__:
        return (f"Triton's CPU interpreter runs a loop index as a Python int, which this kernel cannot use ({text}); "
                "run this on an NVIDIA GPU")
    return None


def versions(device):
    import fla
    import triton
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU, Triton's interpreter (TRITON_INTERPRET=1)"
    return (f"fla {getattr(fla, '__version__', '?')} ({Path(fla.__file__).parent}), torch {torch.__version__}, "
            f"triton {triton.__version__}, python {sys.version.split()[0]}; device: {name}")


def main(kernel, module, function, keywords):
    """Exit status: 1 the defect is present (a tensor over its budget, non-finite, or the call raised), 0 it is
    gone, 2 this fla cannot make the call (or this machine cannot run it), 77 it needs a GPU and there is none."""
    bundle = json.loads((HERE / "bundle.json").read_text())
    print(f"{bundle['title']}\n(pathmdn-verify check {bundle['check']}, example [{bundle['example']}])")
    device = pick_device(bundle["needs_gpu"])
    if device is None:
        print(f"needs an NVIDIA GPU ({bundle['needs_gpu']}); there is none here: nothing was run")
        return NEEDS_GPU
    if not os.environ.get("REPRO_WARNINGS"):
        warnings.simplefilter("ignore")      # fla's and numpy's warnings; REPRO_WARNINGS=1 shows them
    entry, why = entry_point(module, function, keywords)
    if entry is None:
        print(f"cannot run: {why}")
        return CANNOT_RUN
    if device == "cpu":
        without_timer()
    print(versions(device))
    tensors = torch.load(HERE / "tensors.pt", weights_only=True)
    try:
        outs = run(kernel, entry, bundle, tensors, device)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        crash = interpreter_crash(exc)
        print(f"cannot run: {crash}" if crash else f"FAIL: {function} raised {type(exc).__name__}: "
              f"{str(exc).splitlines()[0] if str(exc) else ''}{in_fla(exc)}")
        print(bundle["budget_text"])
        return CANNOT_RUN if crash else DEFECT
    verdicts = [judge(t["name"], out, tensors["expected"][t["name"]], t) for t, out in zip(bundle["tensors"], outs)]
    print("\n".join(line for _, line in verdicts))
    print(bundle["budget_text"])
    ok = all(ok for ok, _ in verdicts)
    print("PASS: every tensor within its budget (the defect is gone)" if ok else "FAIL: the defect is present")
    return GONE if ok else DEFECT


# the call, as the check made it
MODULE, FUNCTION = 'fla.ops.gated_delta_rule', 'chunk_gated_delta_rule'
KEYWORDS = ('q', 'k', 'v', 'g', 'beta', 'scale', 'initial_state', 'output_final_state', 'use_qk_l2norm_in_kernel', 'cu_seqlens')


def kernel(entry, q, k, v, g=None, beta=None, S0=None, output_final_state=None, cu_seqlens=None):
    """Gated DeltaNet: (o, S_T, or None when output_final_state is False); g = log alpha, beta and q, k as given
    (the fused recurrent kernel takes g and beta left out: no decay, beta 1)."""
    return entry(q=q, k=k, v=v, g=g, beta=beta, scale=q.shape[-1] ** -0.5, initial_state=S0,
                 output_final_state=output_final_state is not False, use_qk_l2norm_in_kernel=False,
                 cu_seqlens=None if cu_seqlens is None else cu_seqlens.long())


if __name__ == "__main__":
    sys.exit(main(kernel, MODULE, FUNCTION, KEYWORDS))
