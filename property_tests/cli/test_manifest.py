"""`verify manifest` (pathmdn_verify.commands.manifest): a run compared with the manifest written from it matches
(exit 0); a planted change of one check's status, of its kind alone, a check missing or added, and another
profile each fail the comparison (exit 1) with the difference printed; with --all-cached a check that ran again
does too; the committed manifests of .ci/ read."""
from pathlib import Path

import pytest

from pathmdn_verify import cli
from pathmdn_verify.core import results
from pathmdn_verify.core.registry import Result
from pathmdn_verify.core.results import Outcome

CHECKS = {"kernel.fla.a.fwd.bf16.typical": ("pass", None), "kernel.fla.a.bwd.bf16.floor": ("xfail", "over_budget"),
          "layer.fla.b.default.bf16.generation": ("skip", "interpreter_gap")}
PACKAGE = {"name": "fla", "version": "0.6.0", "path": "/site-packages/fla", "distribution": "fla-core",
           "git_commit": None}


def _write_run(path, checks=CHECKS, profile="quick", cached=()):
    records = [Outcome(cid, "d", Result(status, 0.5, 1.0, "m", kind=kind, details={"cached": {
        "key": "0" * 16, "run": "r", "seconds": 1.0}} if cid in cached else {}), 0.1, f"verify all --id {cid}")
               for cid, (status, kind) in checks.items()]
    doc = results.document(records, command=["verify", "all"], toolkit={"name": "t", "version": None, "git_commit": None},
                           kernel_package=PACKAGE, environment={"device": "cpu", "profile": profile, "python": "3",
                                                                "torch": "t", "triton": "t"},
                           started=0.0, wall_seconds=1.0, interrupted=False)
    results.write_json(path, doc)
    return str(path)


def _manifest(tmp_path, capsys, *args):
    code = cli.main(["manifest", *map(str, args)])
    return code, capsys.readouterr().out


@pytest.fixture
def written(tmp_path, capsys):
    manifest = tmp_path / "cpu-quick.txt"
    assert _manifest(tmp_path, capsys, "write", _write_run(tmp_path / "run.json"), manifest)[0] == 0
    return manifest


def test_an_unchanged_run_matches(tmp_path, capsys, written):
    text = written.read_text()
    assert "package = fla 0.6.0\ndevice = cpu\nprofile = quick\n" in text
    assert "kernel.fla.a.bwd.bf16.floor xfail over_budget\n" in text and "kernel.fla.a.fwd.bf16.typical pass\n" in text
    code, out = _manifest(tmp_path, capsys, "check", _write_run(tmp_path / "again.json"), written)
    assert code == 0 and "matches" in out


@pytest.mark.parametrize("change, difference", [
    ({"kernel.fla.a.bwd.bf16.floor": ("fail", "over_budget")},
     "kernel.fla.a.bwd.bf16.floor: manifest xfail over_budget, run fail over_budget"),
    ({"kernel.fla.a.bwd.bf16.floor": ("xfail", "non_finite")},        # the kind alone
     "kernel.fla.a.bwd.bf16.floor: manifest xfail over_budget, run xfail non_finite"),
    ({"kernel.fla.a.fwd.bf16.typical": ("xfail", "over_budget")},
     "kernel.fla.a.fwd.bf16.typical: manifest pass, run xfail over_budget"),
    ({"layer.fla.b.default.bf16.generation": ("pass", None)},
     "layer.fla.b.default.bf16.generation: manifest skip interpreter_gap, run pass"),
    ({"kernel.fla.c.fwd.bf16.new": ("pass", None)}, "kernel.fla.c.fwd.bf16.new: not in the manifest, run pass"),
    ({"kernel.fla.a.fwd.bf16.typical": None}, "kernel.fla.a.fwd.bf16.typical: manifest pass, not in the run"),
], ids=["status", "kind", "pass_to_xfail", "skip_to_pass", "added", "removed"])
def test_a_planted_change_fails_and_is_printed(tmp_path, capsys, written, change, difference):
    checks = {cid: sk for cid, sk in {**CHECKS, **change}.items() if sk is not None}
    code, out = _manifest(tmp_path, capsys, "check", _write_run(tmp_path / "changed.json", checks), written)
    assert code == 1
    assert out.splitlines()[0] == difference and "differs from" in out.splitlines()[-1]


def test_a_run_of_another_profile_fails(tmp_path, capsys, written):
    code, out = _manifest(tmp_path, capsys, "check", _write_run(tmp_path / "ci.json", profile="ci"), written)
    assert code == 1 and "profile: manifest quick, run ci" in out


def test_what_is_not_a_manifest_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("package = fla 0.6.0\ndevice = cpu\nprofile = quick\nkernel.fla.a maybe\n")
    assert _manifest(tmp_path, capsys, "check", _write_run(tmp_path / "run.json"), bad)[0] == 2
    assert _manifest(tmp_path, capsys, "check", tmp_path / "missing.json", bad)[0] == 2


def test_the_committed_manifests_read_and_name_their_scope():
    """.ci/manifests/<device class>[-<card>]-<profile>.txt: the CPU's at the two profiles CI runs (.ci/run compares each
    run with its own), and a GPU's (README.md's command), all without a failure."""
    from pathmdn_verify.commands.manifest import read
    folder = Path(__file__).resolve().parents[2] / ".ci" / "manifests"
    found = sorted(folder.glob("*.txt"))
    assert {"cpu-ci.txt", "cpu-quick.txt"} <= {f.name for f in found}
    for f in found:
        scope, checks = read(str(f))
        assert f.name.startswith(scope["device"].split(":")[0]) and f.name.endswith(f"-{scope['profile']}.txt")
        assert scope["package"] == "fla 0.6.0"
        assert len(checks) > 400 and not any(v.startswith(("fail", "error")) for v in checks.values())
    assert 'verify manifest check "$out/verify-$profile.json" ".ci/manifests/cpu-$profile.txt"' in (
        folder.parent / "run").read_text()


def test_all_cached_requires_every_verdict_reused(tmp_path, capsys, written):
    """--all-cached (CI's unchanged rerun): a check that ran again is a difference; the control: every verdict
    reused matches."""
    every = _write_run(tmp_path / "rerun.json", cached=set(CHECKS))
    assert _manifest(tmp_path, capsys, "check", every, written, "--all-cached")[0] == 0
    some = _write_run(tmp_path / "partial.json", cached=set(list(CHECKS)[1:]))
    code, out = _manifest(tmp_path, capsys, "check", some, written, "--all-cached")
    assert code == 1 and "kernel.fla.a.fwd.bf16.typical: ran again, not reused from the verdict cache" in out
    assert _manifest(tmp_path, capsys, "check", some, written)[0] == 0       # without the flag: statuses alone


def test_a_manifest_of_several_runs_keeps_each_verdict_seen(tmp_path, capsys):
    """Written from two runs of one scope that differ on one check (a defect whose outcome depends on the memory
    it reads), the line holds both verdicts and a run with either matches; a third verdict, and a check that
    agreed in both runs changed, are differences.  Runs of another scope or selection are refused."""
    flaky = "kernel.fla.a.bwd.bf16.floor"
    one = _write_run(tmp_path / "one.json")
    two = _write_run(tmp_path / "two.json", {**CHECKS, flaky: ("xfail", "cuda_fatal")})
    manifest = tmp_path / "m.txt"
    assert _manifest(tmp_path, capsys, "write", one, two, manifest)[0] == 0
    assert f"{flaky} xfail cuda_fatal | xfail over_budget\n" in manifest.read_text()
    for run in (one, two):
        assert _manifest(tmp_path, capsys, "check", run, manifest)[0] == 0
    third = _write_run(tmp_path / "third.json", {**CHECKS, flaky: ("fail", "over_budget")})
    code, out = _manifest(tmp_path, capsys, "check", third, manifest)
    assert code == 1 and f"{flaky}: manifest xfail cuda_fatal | xfail over_budget, run fail over_budget" in out
    other = _write_run(tmp_path / "other.json", {**CHECKS, "kernel.fla.a.fwd.bf16.typical": ("fail", "exception")})
    assert _manifest(tmp_path, capsys, "check", other, manifest)[0] == 1
    assert _manifest(tmp_path, capsys, "write", one, _write_run(tmp_path / "ci.json", profile="ci"), manifest)[0] == 2
    fewer = _write_run(tmp_path / "fewer.json", dict(list(CHECKS.items())[:2]))
    assert _manifest(tmp_path, capsys, "write", one, fewer, manifest)[0] == 2
    assert _manifest(tmp_path, capsys, "check", one, two, manifest)[0] == 2
