"""Errors and their classification: UsageError (the CLI prints its message and exits 2), what an implementation
raises when it cannot be used (KernelUnavailable) or lacks a variant (VariantUnsupported), and the tests that
sort a kernel's exception into a fatal device error or an interpreter gap."""

import os
import traceback


class UsageError(Exception):
    """Bad input or an unusable environment, reported as one line with exit status 2."""


class KernelUnavailable(RuntimeError):
    """The kernel package or entry point cannot be used here (the CLI reports it with exit status 2)."""


class VariantUnsupported(RuntimeError):
    """The implementation does not offer this variant (a chunk size, a backward, an argument): the check is
    skipped with kind "unsupported" and the reason, never failed."""


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


class OutOfBoundsAccess(RuntimeError):
    """Raised (inside the interpreter) by pathmdn_verify.platform.fidelity's part bounds: a kernel loaded, stored or
    atomically updated an address outside every tensor argument of its launch.  A kernel bug, not an
    interpreter gap: on a GPU it is an illegal memory access or a silent write into a neighbouring
    allocation; unchecked, the interpreter writes into the CPU heap and the process may die later.
    `fault` names it as pathmdn_verify.run.sanitize names a compute-sanitizer report (kernel, file, line, block,
    address, access, size, distance)."""

    def __init__(self, fault: dict):
        super().__init__(f"{fault['kernel']} ({fault['file']}:{fault['line']}, block {fault['block']}): "
                         f"{fault['what']} at {fault['address']} {fault['problem']}, {fault['distance']}; on a GPU "
                         "an illegal memory access or a silent write into a neighbouring allocation")
        self.fault = fault


class Bf16ArithmeticNotEmulated(NotImplementedError):
    """Raised (inside the interpreter, so it arrives wrapped in InterpreterError) by pathmdn_verify.platform.fidelity's bf16_guard."""


def is_interpreter_gap(exc: BaseException) -> bool:
    """Whether exc (or an exception it was raised from: the interpreter re-raises everything as
    InterpreterError from the original) is the interpreter's own missing support, not the kernel's
    error: the fidelity layer's refusal (Bf16ArithmeticNotEmulated), an InterpreterBuilder method the
    interpreter does not have (AttributeError on the builder object, e.g. get_bf16 without part
    bf16_scalar), or a NotImplementedError raised by triton/runtime/interpreter.py itself
    (inline_asm, extern_elementwise).  Messages are not matched: a kernel error that mentions the
    interpreter is still the kernel's."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, Bf16ArithmeticNotEmulated):
            return True
        if isinstance(exc, AttributeError) and type(getattr(exc, "obj", None)).__name__ == "InterpreterBuilder":
            return True
        if isinstance(exc, NotImplementedError) and exc.__traceback__ is not None:
            innermost = traceback.extract_tb(exc.__traceback__)[-1].filename.replace(os.sep, "/")
            if innermost.endswith("triton/runtime/interpreter.py"):
                return True
        exc = exc.__cause__ or exc.__context__
    return False


def innermost_error(exc: BaseException) -> str:
    """ "Type: first line of its message" of the exception that exc was raised from, innermost (the
    interpreter re-raises a kernel's error as InterpreterError(repr(original)) from it: named once)."""
    seen = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
