"""The command layer: -k matches case-insensitively as pytest's does; a subcommand's unknown option is that
subcommand's usage error; an interrupted run's JUnit says so; a skip names its check once and the innermost
error once; a listed check that passes is news only where its entry says the defect reproduces; the live
status line shows only running checks, within the terminal's width."""
import io
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from pathmdn_verify import cli
from pathmdn_verify.core import results
from pathmdn_verify.core.errors import Bf16ArithmeticNotEmulated, UsageError
from pathmdn_verify.core.registry import Context, Result, matcher
from pathmdn_verify.core.results import Outcome
from pathmdn_verify.run import terminal, xfail_list as xfails

ID = "kernel.fla.path_attn.fwd.bf16.beta_two"


# ------------------------------------------------------------------------------------------------ -k


@pytest.mark.parametrize("expr", ["PATH_ATTN", "Path_Attn and not BWD", "PATH_ATTN.*.BF16", "(FWD or nothing) and BETA_TWO"])
def test_k_matches_case_insensitively(expr):
    assert matcher(expr)(ID)
    assert matcher(expr.lower())(ID)


def test_k_operators_stay_lowercase_and_negation_is_case_insensitive():
    assert not matcher("path_attn and not FWD")(ID)
    with pytest.raises(UsageError):
        matcher("path_attn and")


def test_list_selects_the_same_checks_whatever_the_case(registry, capsys):
    assert cli.main(["list", "-k", "path_attn and state_tracking"]) == 0
    lower = capsys.readouterr().out
    assert cli.main(["list", "-k", "PATH_ATTN and STATE_TRACKING"]) == 0
    assert capsys.readouterr().out == lower and "kernel.fla.path_attn.state_tracking.fp32" in lower


def test_k_help_says_pytest_expression_and_case():
    helptext = cli.build_parser()._subparsers._group_actions[0].choices["all"].format_help()
    assert "pytest -k expression" in " ".join(helptext.split()) and "case-insensitively" in helptext
    assert "contains PATTERN" not in helptext


# ------------------------------------------------------------------------------------------------ usage


def test_unknown_option_of_a_subcommand_prints_that_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["all", "--bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: verify all ") and "verify all: error: unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):
        cli.main(["merge", "a.json", "--bogus"])
    assert "usage: verify merge " in capsys.readouterr().err


def test_every_option_has_help():
    missing = []
    sub = cli.build_parser()._subparsers._group_actions[0]
    for name in ("all", "oracles", "symbolic", "kernels", "mutants", "list", "merge", "xfails"):
        for action in sub.choices[name]._actions:
            if not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing


def test_every_command_defaults_to_the_ci_profile():
    sub = cli.build_parser()._subparsers._group_actions[0]
    for name, p in sub.choices.items():
        for action in p._actions:
            if "--profile" in action.option_strings and name != "report":   # report: verify/commands/report.py
                assert action.default == "ci", name


# ------------------------------------------------------------------------------------------------ junit


def _doc(interrupted):
    def rec(cid, status, kind=None, message="m"):
        return Outcome(cid, "d", Result(status, 0.5 if status == "pass" else None, 1.0 if status == "pass" else None,
                                       message, kind=kind), 0.1, f"verify all --id {cid}")
    records = [rec("a.b.pass", "pass"), rec("a.b.gap", "skip", "interpreter_gap", "not verifiable"),
               rec("a.b.cut1", "skip", "not_run", "not run: the run was interrupted"),
               rec("a.b.cut2", "skip", "not_run", "not run: the run was interrupted")]
    return results.document(records, command=["verify"], toolkit={"name": "t", "version": None, "git_commit": None},
                            kernel_package=None, environment={"device": "cpu", "profile": "ci", "python": "3",
                                                              "torch": "t", "triton": "t"},
                            started=0.0, wall_seconds=1.0, interrupted=interrupted)


def test_junit_of_an_interrupted_run_marks_the_checks_not_run(tmp_path):
    doc = _doc(True)
    results.write_junit(tmp_path / "r.xml", doc["checks"], interrupted=doc["interrupted"])
    suite = ET.parse(tmp_path / "r.xml").getroot()
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {"interrupted": "true", "not_run": "2"}
    cases = {c.get("name"): c.find("skipped") for c in suite.iter("testcase")}
    for cid in ("a.b.cut1", "a.b.cut2"):
        assert cases[cid].get("type") == "interrupted"
        assert cases[cid].get("message") == "not run: the run was interrupted"
    assert cases["a.b.gap"].get("type") is None and cases["a.b.pass"] is None
    results.write_junit(tmp_path / "ok.xml", _doc(False)["checks"])
    assert not list(ET.parse(tmp_path / "ok.xml").getroot().iter("property"))


def test_merge_of_an_interrupted_result_keeps_the_marking(tmp_path):
    results.write_json(tmp_path / "s1.json", _doc(True))
    assert cli.main(["merge", str(tmp_path / "s1.json"), "--junit", str(tmp_path / "m.xml")]) == 1
    suite = ET.parse(tmp_path / "m.xml").getroot()
    assert {p.get("name"): p.get("value") for p in suite.iter("property")}["interrupted"] == "true"
    assert sum(c.get("type") == "interrupted" for c in suite.iter("skipped")) == 2


# ------------------------------------------------------------------------------------------------ skip messages


class InterpreterError(Exception):
    """As triton's interpreter raises it: InterpreterError(repr(original)) from original."""


def _wrapped_gap():
    try:
        raise Bf16ArithmeticNotEmulated("bf16 arithmetic (ReduceOps.apply) is not emulated")
    except Bf16ArithmeticNotEmulated as exc:
        raise InterpreterError(repr(exc)) from exc


def _printed(records):
    out = io.StringIO()
    terminal.print_summary(records, Console(file=out, width=400, highlight=False), 1.0)
    return out.getvalue()


def test_skip_of_a_search_names_the_check_once_and_the_innermost_error_once():
    from hypothesis import strategies as st

    from pathmdn_verify.core.search import search
    cid = "kernel.fla.gdn_chunk.bwd.bf16.typical"
    res = search(st.integers(1, 3), lambda n: _wrapped_gap(), Context(profile="quick"), cid, max_examples=2)
    assert res.status == "skip" and res.kind == "interpreter_gap"
    assert cid not in res.message and "InterpreterError" not in res.message
    assert res.message.count("Bf16ArithmeticNotEmulated") == 1
    line = next(x for x in _printed([Outcome(cid, "d", res, 1.0, "r")]).splitlines() if "skipped" in x)
    assert line.count(cid) == 1 and line.count("Bf16ArithmeticNotEmulated") == 1


def test_skip_of_a_raising_check_names_the_innermost_error_once():
    from pathmdn_verify.run import runner

    def run(ctx):
        _wrapped_gap()
    rec = runner.execute(runner.Check("test.gap.raises", "raises an interpreter gap", run), Context())
    assert rec.result.kind == "interpreter_gap" and "InterpreterError" not in rec.result.message
    assert rec.result.message.count("Bf16ArithmeticNotEmulated") == 1


# ------------------------------------------------------------------------------------------------ not reproduced

LIST = '''
[[xfail]]
id = "kernel.fla.op.fwd.bf16.measured"
packages = ["fla 0.6.0"]
kinds = ["over_budget"]
ratios = {"cpu/quick" = {min = 3.0, max = 30.0, seeds = 20}, "cpu/ci" = {min = 0.5, max = 3.0, seeds = 20}}
regime = "r"
measured = "m"
cause = "c"

[[xfail]]
id = "kernel.fla.op.fwd.bf16.gpu_only"
packages = ["fla 0.6.0"]
kinds = ["over_budget"]
compare_ratio = false
devices = ["cpu", "cuda:NVIDIA H200"]
reproduces = ["cuda:NVIDIA H200"]
regime = "r"
measured = "m"
cause = "c2"
'''


@pytest.fixture
def listfile(tmp_path):
    f = tmp_path / "xf.toml"
    f.write_text(LIST)
    return f


def _pass(cid, scope, listfile):
    return xfails.apply(cid, Result("pass", 0.69, 1.0, "ok"), scope, listfile)


def test_a_listed_pass_is_news_only_where_the_entry_says_it_reproduces(listfile):
    quick, ci = xfails.Scope("fla 0.6.0", "cpu", "quick"), xfails.Scope("fla 0.6.0", "cpu", "ci")
    h200 = xfails.Scope("fla 0.6.0", "cuda:NVIDIA H200", "ci")
    news = _pass("kernel.fla.op.fwd.bf16.measured", quick, listfile)      # failed at every seed at cpu/quick
    assert xfails.NOT_REPRODUCED in news.message and news.details["expected_failure"]["expected_here"]
    margin = _pass("kernel.fla.op.fwd.bf16.measured", ci, listfile)       # min 0.5 at cpu/ci: passes on some seeds
    assert xfails.NOT_REPRODUCED not in margin.message and "not reproduced at cpu/ci" in margin.message
    cpu = _pass("kernel.fla.op.fwd.bf16.gpu_only", ci, listfile)
    assert xfails.NOT_REPRODUCED not in cpu.message and "cuda:NVIDIA H200" in cpu.message
    assert xfails.NOT_REPRODUCED in _pass("kernel.fla.op.fwd.bf16.gpu_only", h200, listfile).message
    records = [Outcome(cid, "d", r, 1.0, "x") for cid, r in (("kernel.fla.op.fwd.bf16.measured", news),
                                                           ("kernel.fla.op.fwd.bf16.measured", news),
                                                           ("kernel.fla.op.fwd.bf16.gpu_only", cpu))]
    lines = [x for x in _printed(records).splitlines() if "not reproduced" in x]
    assert len(lines) == 1 and "1 expected failure(s) not reproduced" in lines[0]   # once, the news only
    assert "gpu_only" not in lines[0]
    assert not [x for x in _printed(records[2:]).splitlines() if "not reproduced" in x]


def test_reproduces_must_be_a_list_of_names(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text(LIST.replace('reproduces = ["cuda:NVIDIA H200"]', 'reproduces = "cuda"'))
    with pytest.raises(UsageError, match="reproduces"):
        xfails.load(f)


def test_the_shipped_list_keeps_cpu_runs_quiet_about_state_tracking():
    """The state-tracking entries apply on the CPU (the exit status is the same on every machine) but record
    no failure there: a CPU pass is not news."""
    entries = xfails.expected_failures()
    for profile in ("quick", "ci"):
        scope = xfails.Scope("fla 0.6.0", "cpu", profile)
        assert not entries["kernel.fla.path_attn.state_tracking.fp32"].expected_to_reproduce(scope)


# ------------------------------------------------------------------------------------------------ status line


def test_status_line_lists_running_checks_within_the_width():
    ids = [f"kernel.fla.mdn_chunk{n}.bwd.bf16.logmu_below_floor" for n in range(8)]
    for width in (40, 80, 117):
        line = terminal.status_line(ids, width)
        assert len(line) <= width and line.startswith("running 8: ") and "more)" in line
    assert terminal.status_line(ids[:1], 200) == f"running: {ids[0]}"
    assert len(terminal.status_line(["x" * 300], 60)) <= 60


def test_live_status_drops_finished_checks():
    from pathmdn_verify.core.registry import Check
    console = Console(file=io.StringIO(), force_terminal=True, width=300)
    progress = terminal.Progress(console, 3)
    shown = []
    progress.status.update = lambda text="", **kw: shown.append(str(text))
    progress.status.start = lambda: None
    checks = [Check(f"a.b.c{i}", "d", lambda ctx: None) for i in range(2)]
    progress.start(0, checks[0])
    progress.start(1, checks[1])
    progress.done(0, Outcome("a.b.c0", "d", Result("pass", 0.1, 1.0, "ok"), 0.1, "r"))
    assert shown[-1] == "running: a.b.c1"
    progress.done(1, Outcome("a.b.c1", "d", Result("pass", 0.1, 1.0, "ok"), 0.1, "r"))
    assert shown[-1] == ""
    progress.close()


def test_status_width_is_at_most_120_columns():
    assert terminal.MAX_STATUS == 120


def test_quiet_known_warnings_reaches_child_processes(monkeypatch):
    import warnings
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    with warnings.catch_warnings():
        cli.quiet_known_warnings()
        cli.quiet_known_warnings()       # idempotent
        spec = __import__("os").environ["PYTHONWARNINGS"].split(",")
        assert "ignore::RuntimeWarning:pathmdn_verify.platform.fidelity" in spec and len(spec) == len(set(spec))
        assert any("Triton is not supported on current platform" in s for s in spec)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default")
            cli.quiet_known_warnings()
            warnings.warn("Triton is not supported on current platform, roll back to CPU.", UserWarning)
        assert not seen


