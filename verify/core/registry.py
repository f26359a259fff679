"""The check registry: every check has a stable dotted id, a one-line description and a function.

A check function takes a :class:`Context` and returns a :class:`Result`.  Families register checks at
import time with :func:`check` (a decorator) or :func:`register` (for generated ids).  Importing a
family module must stay cheap: no Triton kernel module may be imported at registration time, because
the interpreter fidelity layer has to be installed before any kernel module is imported.
"""
from __future__ import annotations

import fnmatch
import math
import re
import traceback
from dataclasses import dataclass, field
from typing import Callable

from pathmdn_verify.core.errors import UsageError, verdict_of
from pathmdn_verify.core.ids import CheckId

STATUSES = ("pass", "fail", "xfail", "skip", "error")
# Result.kind: why a check did not pass (or was not measured).  Failures: over_budget, non_finite, exception,
# cuda_fatal, crashed, timeout.  Skips: unsupported (the kernel package does not offer the variant),
# interpreter_gap (the Triton interpreter cannot run the kernel faithfully; the same check runs on a GPU),
# incompatible (the kernel package's code was written for another Triton than the installed one),
# not_run (interrupted or time limit).  Errors: import_error, check_error.
KINDS = ("over_budget", "non_finite", "exception", "cuda_fatal", "crashed", "timeout", "unsupported",
         "interpreter_gap", "incompatible", "not_run", "import_error", "check_error")
PROFILES = ("quick", "ci", "full")
DEVICE_LOST = "device_lost"     # Result.details key: the CUDA context is unusable after this check
# every worker of one run sees this directory (created and removed by pathmdn_verify.run.runner.Workers): checks share
# work across the run's workers there
RUN_DIR_ENV = "VERIFY_RUN_DIR"

@dataclass(frozen=True)
class Context:
    """What a check may depend on: device, profile, seed and the fidelity switches."""
    device: str = "cpu"
    profile: str = "ci"
    seed: int = 0
    fp32_dot: str = "tf32"
    kernel_root: str | None = None
    examples: int | None = None       # hypothesis examples per kernel check (None: the profile's default)
    save_failing: str | None = None   # directory: save each failing check's minimal example for `verify compare`
    configs: str = "cover"            # which config autotuned kernels run (pathmdn_verify.platform.configs.MODES)
    references: str = "auto"          # where the oracle and same-dtype run: auto (the op record's), device or cpu

    def pick(self, quick, ci, full):
        """The value for the current profile."""
        return {"quick": quick, "ci": ci, "full": full}[self.profile]


@dataclass
class Result:
    status: str
    measured: float | None = None
    budget: float | None = None
    message: str = ""
    details: dict = field(default_factory=dict)
    kind: str | None = None       # one of KINDS, or None for a plain pass
    measure: str | None = None    # what measured / budget are, e.g. "normwise_relative", "max_abs", "threshold"

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}")

    @classmethod
    def raised(cls, exc: BaseException, debug: bool = False) -> Result:
        """The result of a check that raised exc (pathmdn_verify.core.errors.verdict_of), its traceback in details
        (the innermost 3 frames unless debug); a lost CUDA context is marked DEVICE_LOST."""
        status, kind, message = verdict_of(exc)
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=None if debug else -3))
        return cls(status, message=message, kind=kind,
                   details={"traceback": tb, **({DEVICE_LOST: True} if kind == "cuda_fatal" else {})})


def within(measured: float, budget: float, what: str) -> Result:
    """pass when measured <= budget (NaN never passes); the message states both numbers."""
    ok = math.isfinite(measured) and measured <= budget
    verdict = "within" if ok else "EXCEEDS"
    return Result("pass" if ok else "fail", float(measured), float(budget),
                  f"{what}: {measured:.3e} {verdict} budget {budget:.3e}")


def rejects(measured: float, threshold: float, what: str) -> Result:
    """Negative control: pass when the wrong variant differs from the truth by more than threshold."""
    ok = not (measured <= threshold)   # NaN counts as rejected: the wrong form is visibly wrong
    verdict = "rejected" if ok else "NOT REJECTED"
    return Result("pass" if ok else "fail", float(measured), float(threshold),
                  f"{what}: difference {measured:.3e} vs threshold {threshold:.3e} -> {verdict}")


@dataclass(frozen=True)
class Check:
    id: str
    description: str
    run: Callable[[Context], Result]
    devices: tuple[str, ...] = ("cpu", "cuda")


REGISTRY: dict[str, Check] = {}


def register(check_id: str, description: str, run: Callable[[Context], Result],
             devices: tuple[str, ...] = ("cpu", "cuda")) -> None:
    if check_id in REGISTRY:
        raise ValueError(f"duplicate check id {check_id!r}")
    if str(CheckId.parse(check_id)) != check_id:     # the one grammar (pathmdn_verify.core.ids); UsageError if malformed
        raise ValueError(f"check id {check_id!r} does not round-trip")
    if not description or "\n" in description:
        raise ValueError(f"{check_id}: description must be one line")
    REGISTRY[check_id] = Check(check_id, description, run, devices)


def check(check_id: str, description: str, devices: tuple[str, ...] = ("cpu", "cuda")):
    """Decorator form of :func:`register`."""
    def deco(fn):
        register(check_id, description, fn, devices)
        return fn
    return deco


def select(patterns: list[str] | None, ids: list[str] | None = None,
           prefixes: tuple[str, ...] | None = None) -> list[Check]:
    """Checks whose id starts with one of prefixes and, when any selector is given, matches a -k
    expression (see :func:`matcher`) or equals one of ids (a union over every -k and --id)."""
    tests = [matcher(p) for p in patterns or ()]
    chosen = []
    for cid, c in REGISTRY.items():
        if prefixes and not cid.startswith(prefixes):
            continue
        if (patterns or ids) and not (cid in (ids or ()) or any(t(cid) for t in tests)):
            continue
        chosen.append(c)
    return chosen


# -k, as every command that selects checks by id reads it (matcher)
K_HELP = ("select {what} by id with a pytest -k expression: words joined by and/or/not and parentheses; a word "
          "matches the ids containing it, case-insensitively as in pytest; a word with * ? [ is a glob matching "
          "part of an id (e.g. -k 'path_attn and not bwd', -k 'path_attn.*.bf16'); repeatable (a union)")

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def matcher(expression: str) -> Callable[[str], bool]:
    """A -k expression as pytest writes it: words joined by `and`, `or`, `not` and parentheses.  A word
    matches an id that contains it; a word with * ? or [ is a glob matched against any part of the id
    (`path_attn.*.bf16` matches `kernel.fla.path_attn.fwd.bf16.typical`).  As in pytest, words match
    case-insensitively (`-k PATH_ATTN` is `-k path_attn`); the operators are lowercase.  UsageError when
    malformed."""
    tokens = _TOKEN.findall(expression)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take(expected=None):
        nonlocal pos
        tok = peek()
        if tok is None or tok in ("and", "or", ")") and expected != tok:
            raise UsageError(f"-k {expression!r}: expected {expected or 'a word'} at token {pos + 1}, "
                             f"found {tok or 'the end'}")
        pos += 1
        return tok

    def joined(op, combine, term):
        terms = [term()]
        while peek() == op:
            take(op)
            terms.append(term())
        return lambda cid: combine(t(cid) for t in terms)

    def disjunction():
        return joined("or", any, conjunction)

    def conjunction():
        return joined("and", all, negation)

    def negation():
        if peek() == "not":
            take("not")
            inner = negation()
            return lambda cid: not inner(cid)
        if peek() == "(":
            take("(")
            inner = disjunction()
            take(")")
            return inner
        word = take().lower()
        if any(ch in word for ch in "*?["):
            return lambda cid: fnmatch.fnmatchcase(cid.lower(), f"*{word}*")
        return lambda cid: word in cid.lower()

    test = disjunction()
    if peek() is not None:
        raise UsageError(f"-k {expression!r}: unexpected {peek()!r} at token {pos + 1}")
    return test
