"""One failure must not hide another: a check's search goes on after its first failure and reports each distinct
failure by its signature (for an exception its type and the kernel line; for an output over budget or non-finite
the tensor and the structural case), with its own minimal example; an expected-failure entry covers the signatures
it lists, and any other failure of the same check fails it.  On a synthetic kernel with two planted bugs."""
import math
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from pathmdn_verify.core.budget import Verdict
from pathmdn_verify.core.errors import innermost, kernel_frame
from pathmdn_verify.core.registry import Context
from pathmdn_verify.core.search import Probe, search
from pathmdn_verify.run import xfail_list


@dataclass(frozen=True)
class Case:
    T: int
    cu_seqlens: tuple | None = None
    seed: int = 0

    def label(self):
        return f"T={self.T}" + (f" cu_seqlens={self.cu_seqlens}" if self.cu_seqlens else "")


def planted_kernel(case: Case):
    """Bug 1: varlen cases are 100x over budget in tensor o.  Bug 2: T > 64 raises an IndexError here."""
    if case.T > 64:
        raise IndexError("planted: a block past the end")
    err = 1e-2 if case.cu_seqlens else 1e-5
    return Probe(Verdict("o", err, err, 1e-4, 1e-4, 2.5e-5, 2.5e-5), case.label(), {})


CASES = st.builds(Case, T=st.sampled_from([16, 80]), cu_seqlens=st.sampled_from([None, (0, 5, 16)]))
EXPLICIT = [Case(16), Case(16, (0, 5, 16)), Case(80)]


def run(evaluate=planted_kernel, explicit=EXPLICIT):
    return search(CASES, evaluate, Context(profile="ci"), "kernel.t.op.fwd.fp32.typical", max_examples=4,
                  explicit=explicit)


def test_both_planted_bugs_are_reported_each_with_its_own_example():
    r = run()
    sigs = {f["signature"]: f for f in r.details["failures"]}
    assert r.status == "fail" and len(sigs) == 2, r.message
    varlen = sigs["over_budget:o[varlen]"]
    assert varlen["example"] == "T=16 cu_seqlens=(0, 5, 16)" and math.isclose(varlen["ratio"], 100.0)
    raised = next(s for s in sigs if s.startswith("exception:IndexError@"))
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if 'raise IndexError("planted' in text)
    assert raised.endswith(f"test_distinct_failures.py:{line}")       # the planted kernel's raising line
    assert sigs[raised]["example"] == "T=80" and "2 distinct failures" in r.message


def test_a_lone_bug_is_one_failure_and_a_clean_kernel_passes():
    one = run(lambda c: planted_kernel(Case(16, c.cu_seqlens)))      # bug 2 removed
    assert [f["signature"] for f in one.details["failures"]] == ["over_budget:o[varlen]"]
    clean = run(lambda c: planted_kernel(Case(16)))
    assert clean.status == "pass" and "failures" not in clean.details


def _entry(tmp_path, signatures: str | None):
    f = tmp_path / "list.toml"
    f.write_text('[[xfail]]\nid = "kernel.t.op.fwd.fp32.typical"\npackages = ["t"]\nkinds = ["over_budget", "exception"]\n'
                 'exception = "IndexError"\n' + (f"signatures = {signatures}\n" if signatures else "")
                 + 'regime = "r"\nmeasured = "m"\ncause = "planted"\n')
    return f


def test_an_entry_for_one_signature_leaves_the_other_failing(tmp_path):
    scope = xfail_list.Scope(None, "cpu", "ci", impls=(("t", "t"),))
    listed_one = xfail_list.apply("kernel.t.op.fwd.fp32.typical", run(), scope,
                                  _entry(tmp_path, '["over_budget:o[varlen]"]'))
    assert listed_one.status == "fail" and xfail_list.WORSE in listed_one.message
    assert listed_one.details["expected_failure"]["not_listed"][0].startswith("exception:IndexError@")
    both = xfail_list.apply("kernel.t.op.fwd.fp32.typical", run(), scope,
                            _entry(tmp_path, '["over_budget:o[varlen]", "exception:IndexError@*"]'))
    assert both.status == "xfail", both.message
    any_of_its_kinds = xfail_list.apply("kernel.t.op.fwd.fp32.typical", run(), scope, _entry(tmp_path, None))
    assert any_of_its_kinds.status == "xfail"                         # no signatures: every failure of its kinds


def test_the_kernel_frame_names_the_innermost_cause():
    def kernel():
        raise ValueError("planted")
    try:
        try:
            kernel()
        except ValueError as exc:
            raise RuntimeError("wrapped, as the interpreter does") from exc
    except RuntimeError as exc:
        assert type(innermost(exc)).__name__ == "ValueError"
        assert kernel_frame(exc).startswith("test_distinct_failures.py:")
