"""verify merge of an interrupted run and a rerun: complete (not interrupted, exit status of its checks) when
every check has a record that ran, in either order; interrupted while some check was cut short in every result
that holds it; a check not run never replaces one that ran, a skip on its merits included."""
import pytest

from pathmdn_verify import cli
from pathmdn_verify.core import results
from pathmdn_verify.core.registry import Result
from pathmdn_verify.core.results import Outcome

TOOLKIT = {"name": "t", "version": None, "git_commit": None}
CUT = "not run: the run was interrupted"


def write(path, checks: dict, interrupted: bool) -> str:
    """A result of checks {id: (status, kind, message)}."""
    outcomes = [Outcome(cid, "d", Result(st, 0.5 if st == "pass" else None, 1.0 if st == "pass" else None, msg,
                                         kind=kind), 0.1, f"verify all --id {cid}")
                for cid, (st, kind, msg) in checks.items()]
    doc = results.document(outcomes, command=["verify"], toolkit=TOOLKIT, kernel_package=None,
                           environment={"device": "cpu", "profile": "ci", "python": "3", "torch": "t", "triton": "t"},
                           started=0.0, wall_seconds=1.0, interrupted=interrupted)
    results.write_json(path, doc)
    return str(path)


PASS, GAP = ("pass", None, "ok"), ("skip", "interpreter_gap", "not verifiable on the CPU interpreter")
NOT_RUN = ("skip", "not_run", CUT)


@pytest.fixture
def runs(tmp_path):
    cut = write(tmp_path / "cut.json", {"a.b.one": PASS, "a.b.two": NOT_RUN, "a.b.gap": NOT_RUN}, interrupted=True)
    rerun = write(tmp_path / "rerun.json", {"a.b.one": PASS, "a.b.two": PASS, "a.b.gap": GAP}, interrupted=False)
    return cut, rerun


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_an_interrupted_run_and_a_complete_rerun_merge_complete(runs, order, tmp_path):
    paths = [runs[i] for i in order]
    doc = results.merge(paths, ["verify", "merge"], TOOLKIT)
    assert doc["interrupted"] is False
    assert {c["id"]: c["kind"] for c in doc["checks"]} == {"a.b.one": None, "a.b.two": None,
                                                           "a.b.gap": "interpreter_gap"}
    assert cli.main(["merge", *paths, "--json", str(tmp_path / "m.json")]) == 0


def test_a_check_cut_short_in_every_result_keeps_the_merge_interrupted(runs, tmp_path):
    cut, _ = runs
    other = write(tmp_path / "other.json", {"a.b.one": PASS, "a.b.two": PASS}, interrupted=True)   # no a.b.gap
    doc = results.merge([cut, other], ["verify", "merge"], TOOLKIT)
    assert doc["interrupted"] is True
    assert [c["id"] for c in doc["checks"] if results.cut_short(c)] == ["a.b.gap"]
    assert cli.main(["merge", cut, other]) == 1
