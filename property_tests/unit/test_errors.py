"""The one mapping from an exception to a verdict (pathmdn_verify.core.errors.verdict_of), row by row, and the
Result a check that raised gets from it (Result.raised): each row is planted as the exception it names."""
import pytest

from pathmdn_verify.core.errors import Incompatible, UsageError, VariantUnsupported, verdict_of
from pathmdn_verify.core.registry import DEVICE_LOST, Result


class InterpreterBuilder:       # the name is_interpreter_gap knows the interpreter's builder by
    pass


def _builder_gap() -> AttributeError:
    try:
        InterpreterBuilder().get_bf16
    except AttributeError as exc:
        return exc


def _raised_from(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as exc:
        return exc


@pytest.mark.parametrize("exc, status, kind", [
    (RuntimeError("CUDA error: an illegal memory access was encountered"), "fail", "cuda_fatal"),
    (_raised_from(ValueError("in the oracle"), RuntimeError("Triton Error [CUDA]: misaligned address")),
     "fail", "cuda_fatal"),
    (VariantUnsupported("fla has no chunk size 8"), "skip", "unsupported"),
    (Incompatible("written for Triton 3.2"), "skip", "incompatible"),
    (AttributeError("module 'triton.language' has no attribute 'gather'"), "skip", "incompatible"),
    (_builder_gap(), "skip", "interpreter_gap"),
    (ValueError("the kernel's own error"), "error", "check_error"),
    (NotImplementedError("a kernel's NotImplementedError is no interpreter gap"), "error", "check_error"),
])
def test_each_exception_gets_its_rows_verdict(exc, status, kind):
    got = verdict_of(exc)
    assert got[:2] == (status, kind)
    assert got[2]


def test_a_checks_exception_is_a_result_with_its_traceback():
    try:
        raise RuntimeError("CUDA error: device-side assert triggered")
    except RuntimeError as exc:
        lost = Result.raised(exc)
    assert (lost.status, lost.kind, lost.details[DEVICE_LOST]) == ("fail", "cuda_fatal", True)
    assert "device-side assert" in lost.message and "Traceback" in lost.details["traceback"]
    err = Result.raised(_raised_from(KeyError("x"), ValueError("y")))
    assert (err.status, err.kind, err.message) == ("error", "check_error", "KeyError: 'x'")
    assert DEVICE_LOST not in err.details


def test_a_usage_error_is_no_verdict_callers_let_it_through():
    """UsageError is not in the mapping's rows: it would be a check's error, which is why callers raise it first."""
    assert verdict_of(UsageError("bad --op"))[:2] == ("error", "check_error")
