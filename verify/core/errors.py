"""Errors and their classification: UsageError (the CLI prints its message and exits 2), what an implementation
raises when it cannot be used (KernelUnavailable) or lacks a variant (VariantUnsupported), the tests that sort a
kernel's exception into a fatal device error, an interpreter gap or a missing optional dependency, and the one
mapping from an exception to a verdict built on them (`verdict_of`)."""

import functools
import os
import re
import traceback


class UsageError(Exception):
    """Bad input or an unusable environment, reported as one line with exit status 2."""


class KernelUnavailable(RuntimeError):
    """The kernel package or entry point cannot be used here (the CLI reports it with exit status 2)."""


class Incompatible(RuntimeError):
    """The kernel package's code was written for another Triton than the installed one (it uses an API that this
    Triton removed or has not yet): the check is skipped with kind "incompatible" and the reason, never failed."""


def triton_incompatibility(exc: BaseException) -> str | None:
    """The reason, when exc (or an exception it was raised from) is a name the installed Triton does not have:
    an AttributeError of a triton module, or an ImportError of a name from one; None otherwise."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if isinstance(exc, AttributeError) and re.match(r"module 'triton[.\w]*' has no attribute", text):
            break
        if isinstance(exc, ImportError) and (exc.name or "").startswith("triton") or \
                isinstance(exc, ImportError) and re.search(r"cannot import name '\w+' from 'triton", text):
            break
        exc = exc.__cause__ or exc.__context__
    else:
        return None
    if exc is None:
        return None
    try:
        import importlib.metadata as md
        have = md.version("triton")
    except Exception:
        have = "?"
    return f"written for another Triton than the installed {have}: {type(exc).__name__}: {exc}".splitlines()[0]


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


def verdict_of(exc: BaseException) -> tuple[str, str, str]:
    """The one mapping from an exception that a check, or one example of a search, raised to its verdict:
    (status, kind, message), the first row that holds:

        a fatal device error (is_device_fatal)          fail   cuda_fatal       the CUDA context is lost
        VariantUnsupported                              skip   unsupported      the variant is not offered
        Incompatible, or a name the installed Triton    skip   incompatible     the package was written for
        lacks (triton_incompatibility)                                          another Triton
        the interpreter's own gap (is_interpreter_gap)  skip   interpreter_gap  the same check runs on a GPU
        anything else                                   error  check_error      (in a search: the kernel raised on
                                                                                valid input, a failing example)

    UsageError is no verdict: callers let it through (the CLI's exit status 2)."""
    message = f"{type(exc).__name__}: {exc}"
    if is_device_fatal(exc):
        return "fail", "cuda_fatal", f"fatal CUDA error: {message}"
    if isinstance(exc, VariantUnsupported):
        return "skip", "unsupported", str(exc)
    if why := (str(exc) if isinstance(exc, Incompatible) else triton_incompatibility(exc)):
        return "skip", "incompatible", why
    if is_interpreter_gap(exc):
        return "skip", "interpreter_gap", f"not verifiable on the CPU interpreter: {innermost_error(exc)}"
    return "error", "check_error", message


@functools.lru_cache(maxsize=None)
def _optional_imports(filename: str) -> dict[str, str]:
    """name -> package of every import a module makes inside `try: ... except ImportError` (or
    ModuleNotFoundError, Exception): the names it binds to None, or never binds, when the package is missing."""
    import ast
    try:
        tree = ast.parse(open(filename, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return {}
    caught = ("ImportError", "ModuleNotFoundError", "Exception")
    found = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Try) and any(getattr(h.type, "id", None) in caught for h in node.handlers)):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
                found.update({a.asname or a.name: stmt.module for a in stmt.names})
            elif isinstance(stmt, ast.Import):
                found.update({a.asname or a.name.split(".")[0]: a.name for a in stmt.names})
    return found


def missing_dependency(exc: BaseException) -> str | None:
    """The optional package that exc comes from not having, in words, or None: the innermost frame of exc (or of an
    exception it was raised from) is in a module that imports a name from the package optionally (try / except
    ImportError), the package is not installed, and the frame's line names that name (a call of the name bound to
    None, or a raise saying it is unavailable).  A call that never reaches the package cannot raise this."""
    import importlib.util
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
        if frames:
            last = frames[-1]
            for name, package in _optional_imports(last.filename).items():
                if re.search(rf"\b{re.escape(name)}\b", last.line or "") and \
                        importlib.util.find_spec(package.split(".")[0]) is None:
                    return (f"{package} (an optional dependency, not installed: {os.path.basename(last.filename)}:"
                            f"{last.lineno} reaches {name})")
        exc = exc.__cause__ or exc.__context__
    return None


def innermost(exc: BaseException) -> BaseException:
    """The exception that exc was raised from, innermost (the interpreter re-raises a kernel's error as
    InterpreterError from it)."""
    seen = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return exc


def innermost_error(exc: BaseException) -> str:
    """ "Type: first line of its message" of the exception that exc was raised from, innermost (the
    interpreter re-raises a kernel's error as InterpreterError(repr(original)) from it: named once)."""
    seen = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _outside(filename: str) -> bool:
    """A frame of the kernel under test: not Python's library, torch, triton, numpy, hypothesis or this toolkit."""
    import sysconfig
    path = filename.replace(os.sep, "/")
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).replace(os.sep, "/")
    skipped = ("/torch/", "/triton/", "/numpy/", "/hypothesis/", "<")
    return not (path.startswith(sysconfig.get_paths()["stdlib"].replace(os.sep, "/") + "/") or path.startswith(ours)
                or any(s in path for s in skipped)
                or path.startswith(os.path.dirname(ours) + "/kernels/") or path.startswith(os.path.dirname(ours) + "/references/"))


def _package_path(filename: str) -> str:
    """A file's path from the top of the package that holds it (fla/ops/path_attn/parallel.py), else its name."""
    parts, folder = [os.path.basename(filename)], os.path.dirname(filename)
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return "/".join(parts)


def kernel_frame(exc: BaseException) -> str | None:
    """Where a kernel's exception came from, "<file from its top package>:<line>": the innermost frame of the kernel
    under test in the exception's chain of causes (a Triton kernel's line under the interpreter, a launcher's, a
    function's of a user's own implementation); an out-of-bounds access names its fault's line; None when no such
    frame is found."""
    seen, chain = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    for e in reversed(chain):          # the innermost cause first
        fault = getattr(e, "fault", None)
        if isinstance(fault, dict) and fault.get("file"):
            return f"{_package_path(fault['file'])}:{fault['line']}"
        frames = [f for f in traceback.extract_tb(e.__traceback__) if _outside(f.filename)] if e.__traceback__ else []
        if frames:
            return f"{_package_path(frames[-1].filename)}:{frames[-1].lineno}"
    return None
