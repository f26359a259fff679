"""The one exception type for usage and environment errors: the CLI prints its message and exits 2."""


class UsageError(Exception):
    """Bad input or an unusable environment, reported as one line with exit status 2."""


def is_device_fatal(exc: BaseException) -> bool:
    """A CUDA runtime error (illegal memory access, device-side assert, ...): it poisons the CUDA context,
    so every later CUDA call of the process fails too: torch's "CUDA error: ...", or Triton's launch-time
    "Triton Error [CUDA]: ...".  Looked for through the exception's causes and, for an exception group
    (hypothesis' FlakyFailure), its members: a kernel's fault often surfaces at the next CUDA call, inside
    the oracle, wrapped.  Compile-time errors (OutOfResources) are not fatal."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if type(e).__name__ == "AcceleratorError" or any(s in str(e) for s in ("CUDA error", "Triton Error [CUDA]")):
            return True
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    return False


def is_interpreter_gap(exc: BaseException) -> bool:
    """An error raised by the Triton interpreter itself (an operation it does not implement), not by the
    kernel: reported as skip with kind interpreter_gap, never as a kernel failure.  verify.fidelity owns
    the list of known gaps."""
    from verify import fidelity
    return fidelity.is_interpreter_gap(exc)
