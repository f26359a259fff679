"""Memory faults named to the source line: rerun one kernel example alone under a bounds checker.

A kernel check that hits a fatal CUDA error (pathmdn_verify.core.errors.is_device_fatal) has lost its CUDA context, and
the error names neither the kernel nor the access.  `sanitize(check_id, example_file, device)` reruns that
one example (a saved dict of named tensors, the format of `verify compare`) in fresh subprocesses:

* Shrink: while it still faults, try the example dense instead of varlen, with one batch, with the
  fewest heads, with T cut to 1, 2, T/4, T/2; keep the first smaller shape that faults (plain reruns).
* cuda: run the smallest faulting example (the example itself when it did not fault alone: a fault that
  depends on memory layout or timing may still make invalid accesses that memcheck reports; on the H200 a
  PaTH bf16 backward example that faulted inside a check reran clean alone) under NVIDIA's `compute-sanitizer --tool memcheck` and parse its
  report (`parse`): kernel, source file and line, access kind and size, the address against the nearest
  allocation.  Triton 3.6 compiles with ptxas -lineinfo unless TRITON_DISABLE_LINE_INFO is set (unset
  here); that variable is part of Triton's cache key, so the replays read the run's own Triton cache (the
  kernels that faulted, and their autotuning results: nothing is recompiled or re-timed under memcheck)
  and never a kernel compiled without line info; PYTORCH_NO_CUDA_MEMORY_CACHING=1 makes every tensor its
  own allocation, so that an access past a tensor's end is out of bounds rather than inside a pooled block.  Without compute-sanitizer on PATH (it
  ships with the CUDA toolkit and the pip package nvidia-cuda-sanitizer-api-cu12; or set COMPUTE_SANITIZER)
  the result says so and names no access.
* cpu: Triton's interpreter checks no bounds (measured: a masked-on load 4 elements past a tensor returns
  the host bytes that lie there, one 10^8 elements past segfaults), so the fidelity layer's part `bounds`
  (pathmdn_verify.platform.fidelity, on in every CPU run) adds the check: every masked-on lane of every interpreted load,
  store and atomic (plain, block-pointer and tensor-descriptor loads and stores all end in create_masked_load /
  create_masked_store) must lie inside the storage of one tensor argument of that launch.  The first that does
  not raises pathmdn_verify.core.errors.OutOfBoundsAccess, whose `fault` names the kernel, file:line (the
  interpreter executes the kernel's own source lines), access kind and size.  It judges the CPU's tile
  sizes and layouts (fla on the H200's tiles, pathmdn_verify.platform.fidelity), not the GPU's code generation: a fault
  that comes from the compiler (shared memory, a miscompiled layout) stays invisible here.

The runner's hook: on a Result of kind cuda_fatal, `annotate(check_id, result, device)` saves the failing
example (details["failing_example"], rebuilt by pathmdn_verify.core.examples.from_label), calls
sanitize(check_id, file, device), which touches CUDA only in subprocesses (the runner's own context is
lost), appends the verdict's one-line summary to the message and puts the dict in details["sanitizer"].  `verify localize --sanitize` does the same on demand.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from pathmdn_verify import ops
from pathmdn_verify.core.ids import CheckId

FAULT_EXIT = 3          # the replay's exit status when the kernel faulted (CUDA fatal error or OutOfBoundsAccess)
MARK = "OUT_OF_BOUNDS "  # the replay prints the CPU checker's record after this prefix
SHRINK_TRIES = 12
TIMEOUT_S = 300          # one replay; compute-sanitizer slows kernels down 10-100x


# ------------------------------------------------------------------------------------ the report parser

_HEADER = re.compile(r"^=+ (?P<what>Invalid (?P<space>__\w+__) (?P<kind>\S+) of size (?P<size>\d+) bytes?"
                     r"|(?:Warp|Lane|Device|Block)? ?(?:Illegal|Misaligned|Out-of-range|Hardware)\b.*)$")
_AT_NEW = re.compile(r"^=+\s+at (?P<kernel>.+?)\+0x[0-9a-fA-F]+ in (?P<file>[^\s:]+):(?P<line>\d+)\s*$")
_AT_OLD = re.compile(r"^=+\s+at 0x[0-9a-fA-F]+ in (?P<file>[^\s:]+):(?P<line>\d+):(?P<kernel>.+)$")
_AT_BARE = re.compile(r"^=+\s+at (?:0x[0-9a-fA-F]+ in )?(?P<kernel>.+?)(?:\+0x[0-9a-fA-F]+)?\s*$")
_THREAD = re.compile(r"^=+\s+by thread \((?P<thread>[\d,]+)\) in block \((?P<block>[\d,]+)\)")
_ADDRESS = re.compile(r"^=+\s+(?:Address|Access to) (?P<address>0x[0-9a-fA-F]+) (?P<problem>.+)$")
_NEAREST = re.compile(r"^=+\s+and is (?P<distance>.+)$")
_SUMMARY = re.compile(r"ERROR SUMMARY: (?P<n>\d+) errors?")


def parse(text: str) -> dict:
    """compute-sanitizer memcheck output -> {"faults": [...], "errors": n}.  A fault record:

        ========= Invalid __global__ read of size 2 bytes
        =========     at fused_kernel+0x1f0 in /path/kernel.py:97          (or: at 0x1f0 in /path/kernel.py:97:fused_kernel)
        =========     by thread (64,0,0) in block (0,1,0)
        =========     Address 0x7f... is out of bounds                     (or: Access to 0x7f... is out of bounds)
        =========     and is 2 bytes after the nearest allocation at 0x7f... of size 64 bytes

    Hardware exceptions (Warp Illegal Address, Misaligned Address, ...) have no size or address lines."""
    faults, fault, errors = [], None, None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _HEADER.match(line)
        if m:
            fault = {"what": m["what"].strip(), "access": f"{m['space']} {m['kind']}" if m["space"] else None,
                     "size": int(m["size"]) if m["size"] else None, "kernel": None, "file": None, "line": None}
            faults.append(fault)
            continue
        s = _SUMMARY.search(line)
        if s:
            errors = int(s["n"])
            continue
        if fault is None or not line.startswith("="):
            continue
        at = next((m for m in (rx.match(line) for rx in (_AT_NEW, _AT_OLD, _AT_BARE)) if m), None)
        if at:
            if fault["kernel"] is None:         # the first "at" line is the faulting access
                fault.update(at.groupdict())
                fault["line"] = int(fault["line"]) if fault.get("line") else None
            continue
        for rx in (_THREAD, _ADDRESS, _NEAREST):
            got = rx.match(line)
            if got:
                fault.update(got.groupdict())
        if "Saved host backtrace" in line:
            fault = None        # host frames follow: the record is complete
    return {"faults": faults, "errors": len(faults) if errors is None else errors}


def describe(fault: dict) -> str:
    """One line: 'Invalid __global__ read of size 2 bytes in k at f.py:97 (thread ... block ...; address ...)'."""
    where = f" in {fault['kernel']}" if fault.get("kernel") else ""
    if fault.get("file"):
        where += f" at {fault['file']}:{fault['line']}"
    extra = [f"thread ({fault['thread']}) block ({fault['block']})"] if fault.get("thread") else []
    if fault.get("problem"):
        extra.append(f"address {fault['address']} {fault['problem']}"
                     + (f", {fault['distance']}" if fault.get("distance") else ""))
    return fault["what"] + where + (f" ({'; '.join(extra)})" if extra else "")


# -------------------------------------------------------------------------------------------- replay

def replay(check_id: str, example_file: str, device: str) -> NoReturn:
    """Run the check's kernel pass (forward; decode; or forward and backward of sum(o) for a bwd check) once on the
    example and exit the process: FAULT_EXIT when it faults, 4 on another error, else 0.  The body of the
    subprocess `python -m pathmdn_verify.run.sanitize`.  It exits where it stands (os._exit, no teardown): after a CUDA
    fault, releasing any tensor (with PYTORCH_NO_CUDA_MEMORY_CACHING=1 each is its own cudaFree) aborts the
    process in c10's destructor, and returning from here would release the example (measured on the H200)."""
    import torch

    from pathmdn_verify.core import examples as example
    from pathmdn_verify.platform.setup import prepare
    from pathmdn_verify.core.errors import OutOfBoundsAccess, is_device_fatal
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.ops import scale_of

    cid, op = CheckId.parse(check_id), ops.record(check_id)
    x = example.load(example_file, op, cid.dtype, device)
    prepare(Context(device=device))
    if cid.pass_ == "bwd":
        x = {n: t.requires_grad_() if t is not None and t.is_floating_point() else t for n, t in x.items()}
    try:
        outs = (op.decode.kernel if cid.pass_ == "decode" else op.kernel)(**x, scale=scale_of(x))
        if cid.pass_ == "bwd":
            outs = outs if isinstance(outs, tuple) else (outs,)
            torch.autograd.backward([o for o in outs if o.requires_grad],
                                    [torch.ones_like(o) for o in outs if o.requires_grad])
        if device == "cuda":
            torch.cuda.synchronize()
    except OutOfBoundsAccess as exc:
        print(MARK + json.dumps(exc.fault), flush=True)
        _exit(FAULT_EXIT)
    except Exception as exc:
        if isinstance(exc.__cause__, OutOfBoundsAccess):       # the interpreter wraps kernel errors
            print(MARK + json.dumps(exc.__cause__.fault), flush=True)
            _exit(FAULT_EXIT)
        print(f"{type(exc).__name__}: {exc}".splitlines()[0], flush=True)
        # with CUDA_LAUNCH_BLOCKING=1 Triton's launcher reports the fault itself: "Triton Error [CUDA]: an
        # illegal memory access was encountered" (a RuntimeError)
        _exit(FAULT_EXIT if is_device_fatal(exc) or "Error [CUDA]" in str(exc) else 4)
    _exit(0)


def _exit(status: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _environment() -> dict:
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", CUDA_LAUNCH_BLOCKING="1")
    env.pop("TRITON_DISABLE_LINE_INFO", None)
    return env


def _run(check_id: str, path: Path, device: str, env: dict, tool: list[str] = ()) -> subprocess.CompletedProcess:
    """One replay in a fresh interpreter; a replay that outlives TIMEOUT_S counts as exit status 124."""
    cmd = [*tool, sys.executable, "-m", "pathmdn_verify.run.sanitize", check_id, str(path), device]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        out = [x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (exc.stdout, exc.stderr)]
        return subprocess.CompletedProcess(cmd, 124, out[0], out[1] + f"\ntimed out after {TIMEOUT_S} s")


def find_sanitizer() -> str | None:
    """$COMPUTE_SANITIZER, compute-sanitizer on PATH, the CUDA toolkit's copy (newest first), or the pip package
    nvidia-cuda-sanitizer-api-cu12 (nvidia/cuda_sanitizer_api/bin/compute-sanitizer)."""
    try:
        spec = importlib.util.find_spec("nvidia.cuda_sanitizer_api")
    except ModuleNotFoundError:
        spec = None
    wheel = [os.path.join(p, "bin", "compute-sanitizer") for p in (spec.submodule_search_locations or [])] if spec else []
    for candidate in (os.environ.get("COMPUTE_SANITIZER"), shutil.which("compute-sanitizer"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "compute-sanitizer"),
                      *sorted(glob.glob("/usr/local/cuda-*/bin/compute-sanitizer"), reverse=True), *wheel):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


# ------------------------------------------------------------------------------------------- shrinking

def _narrow(x: dict, op, batch=None, time=None, heads=None) -> dict:
    """The example cut to its first `batch` sequences, `time` steps, and heads (H, HQ) of `heads`."""
    out = {}
    for n, t in x.items():
        if t is None or n == "cu_seqlens":
            out[n] = t
            continue
        state = n in ("S0", "M0")
        if batch:
            t = t.narrow(0, 0, batch)
        if time and not state:
            t = t.narrow(1, 0, time)
        if heads:
            query = n in op.query_inputs
            t = t.narrow(1 if state else 2, 0, heads[1] if query else heads[0])
        out[n] = t
    if time and x.get("cu_seqlens") is not None:
        cu = sorted({min(int(c), time) for c in x["cu_seqlens"]})
        out["cu_seqlens"] = x["cu_seqlens"].new_tensor(cu)
    return out


def _candidates(x: dict, op):
    """Smaller examples, most promising first."""
    B, T, H = x["k"].shape[:3]
    HQ = x["q"].shape[2]
    if x.get("cu_seqlens") is not None:
        yield {**x, "cu_seqlens": None}
    if B > 1:
        yield _narrow(x, op, batch=1)
    for h in sorted({(1, 1), (1, HQ // H), (H, H)}):
        if h != (H, HQ) and h[0] <= H and h[1] <= HQ and h[1] % h[0] == 0:
            yield _narrow(x, op, heads=h)
    for t in sorted({1, 2, T // 4, T // 2}):
        if 0 < t < T:
            yield _narrow(x, op, time=t)


def shrink(check_id: str, x: dict, device: str, tmp: Path, env: dict) -> tuple[dict, list]:
    """The smallest example found that still faults (greedy, at most SHRINK_TRIES reruns), and the tries."""
    from pathmdn_verify.core import examples as example
    op = ops.record(check_id)
    tries, path = [], tmp / "candidate.pt"
    progress = True
    while progress and len(tries) < SHRINK_TRIES:
        progress = False
        for cand in _candidates(x, op):
            if len(tries) >= SHRINK_TRIES:
                break
            example.save(cand, path)
            faulted = _run(check_id, path, device, env).returncode == FAULT_EXIT
            tries.append({"shape": example.shape(cand), "faulted": faulted})
            if faulted:
                x, progress = cand, True
                break
    return x, tries


# ------------------------------------------------------------------------------------------ the verdict

def sanitize(check_id: str, example_file: str, device: str = "cuda") -> dict:
    """Rerun the example alone; shrink it while it faults; name the faulting access.  Returns
    {"status": fault | clean | unavailable | error, "tool", "summary" (one line), "faults", "errors",
     "shape", "faulted_alone", "smallest_faulting_shape", "tries", "command", "output_tail"}."""
    from pathmdn_verify.core import examples as example
    x = example.load(example_file, ops.record(check_id), CheckId.parse(check_id).dtype, "cpu")
    doc = {"check": check_id, "device": device, "shape": example.shape(x), "faults": [], "errors": 0, "tries": []}
    sanitizer = find_sanitizer() if device == "cuda" else None
    doc["tool"] = ("interpreter bounds check (pathmdn_verify.platform.fidelity part bounds)" if device == "cpu" else
                   f"{sanitizer} --tool memcheck" if sanitizer else "compute-sanitizer (not found)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = _environment()
        first = _run(check_id, Path(example_file), device, env)
        if first.returncode not in (0, FAULT_EXIT):
            return {**doc, "status": "error", "output_tail": first.stdout[-2000:] + first.stderr[-2000:],
                    "summary": f"the replay failed without a fault: {_last_line(first)}"}
        doc["faulted_alone"] = first.returncode == FAULT_EXIT
        small, path, doc["smallest_faulting_shape"] = x, Path(example_file), None
        if doc["faulted_alone"]:
            small, doc["tries"] = shrink(check_id, x, device, tmp, env)
            doc["smallest_faulting_shape"] = example.shape(small)
            path = tmp / "smallest.pt"
            example.save(small, path)
        if device == "cpu":
            proc = _run(check_id, path, device, env)
            marks = [ln[len(MARK):] for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
            doc["faults"] = [json.loads(m) for m in marks]
        elif sanitizer is None:
            return {**doc, "status": "unavailable",
                    "summary": f"{'faults' if doc['faulted_alone'] else 'no fault'} when rerun alone "
                               f"({example.shape(small)}); compute-sanitizer not found (CUDA toolkit; or set "
                               "COMPUTE_SANITIZER): access not named"}
        else:   # also when the plain rerun was clean: memcheck sees invalid accesses that happen not to fault
            tool = [sanitizer, "--tool", "memcheck", "--print-limit", "20"]
            proc = _run(check_id, path, device, env, tool)
            doc.update(parse(proc.stdout + "\n" + proc.stderr))
            doc["command"] = " ".join([*tool, sys.executable, "-m", "pathmdn_verify.run.sanitize", check_id, "FILE", device])
        doc["errors"] = doc.get("errors") or len(doc["faults"])
        doc["output_tail"] = proc.stdout[-3000:] + proc.stderr[-3000:]
    alone = f"faulted when rerun alone, smallest faulting shape {doc['smallest_faulting_shape']} (of " \
            f"{doc['shape']})" if doc["faulted_alone"] else f"no fault when rerun alone ({doc['shape']})"
    if doc["faults"]:
        return {**doc, "status": "fault", "summary": f"{describe(doc['faults'][0])}; {alone}"}
    if doc["faulted_alone"]:
        return {**doc, "status": "error", "summary": f"{alone}, but {doc['tool']} named no access"}
    return {**doc, "status": "clean", "summary": f"{alone}; {doc['tool']} found no invalid access"}


def annotate(check_id: str, result, device: str = "cuda") -> dict:
    """The runner's hook for a Result of kind cuda_fatal: rebuild the example it names
    (details "failing_example" or "minimal_example"), sanitize it, append the verdict's summary to the
    message and put the verdict in details["sanitizer"].  Returns the verdict."""
    from pathmdn_verify.core import examples as example
    label = result.details.get("failing_example") or result.details.get("minimal_example")
    if label is None:
        verdict = {"status": "error", "summary": "the result names no example to rerun"}
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "example.pt")
            example.save(example.from_label(ops.record(check_id), CheckId.parse(check_id).dtype, label), path)
            verdict = sanitize(check_id, path, device)
    result.message += f" [sanitizer: {verdict['summary']}]"
    result.details["sanitizer"] = verdict
    return verdict


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip() and "warn" not in ln.lower()]
    return lines[-1] if lines else f"exit status {proc.returncode}"


if __name__ == "__main__":
    replay(*sys.argv[1:4])
