"""`verify bisect` on a throwaway git repository made from the installed fla-core's own code.

History (linear): base (good) -> plant (a mutant of verify/ops/attention_ops.py: a numerical regression in a Triton
kernel) -> break (fla.ops.path_attn does not import) -> mend -> docs -> unnamed (an argument of the PaTH entry
point renamed) -> renamed (back) -> revert the plant (fixed) -> docs.  Bisect must name exactly the planted commit
(with --fixed: the revert), list the commit that cannot run as skipped, and leave the repository as it
was.  One cheap killer check at --profile quick; git's midpoints make each run test one unrunnable commit.
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import (
    MARKER_ENV,
    PATIENCE,
    gone,
    verify_command,
    wait_for,
    wait_for_marker,
)

from pathmdn_verify import cli
from pathmdn_verify.platform.mutation import fla_package_dir, materialize
from pathmdn_verify.ops import mutants as _mutants

MUTANTS = _mutants()

MUTANT = MUTANTS["path_householder_reversed"]
CHECK = MUTANT.killers[0]                     # kernel.fla.path_attn.fwd.fp32.beta_uniform
BROKEN, API = "fla/ops/path_attn/__init__.py", "fla/ops/path_attn/parallel.py"


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """(repo, {name: sha}) with a dirty working tree and an untracked file, as a user's clone may be."""
    repo = tmp_path_factory.mktemp("kernels") / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    pristine = tmp_path_factory.mktemp("pristine")
    materialize(MUTANT, tmp_path_factory.mktemp("mutant"))        # fails here if the mutant is out of date
    shutil.copytree(fla_package_dir(), repo / "fla", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(repo / "fla", pristine / "fla")
    (repo / "README").write_text("kernels\n")
    shas = {"base": _commit(repo, "base: fla-core as installed")}
    target = repo / "fla" / MUTANT.path
    target.write_text(target.read_text().replace(MUTANT.old, MUTANT.new))
    shas["plant"] = _commit(repo, f"plant: {MUTANT.description}")
    init = repo / BROKEN
    init.write_text(init.read_text() + "\ndef (:\n")
    shas["break"] = _commit(repo, "break: a syntax error")
    shutil.copy(pristine / BROKEN, init)
    shas["mend"] = _commit(repo, "mend the syntax error")
    (repo / "README").write_text("kernels, v2\n")
    shas["docs"] = _commit(repo, "docs")
    api = repo / API
    api.write_text(api.read_text().replace("    use_cache: bool = False,\n)", "    return_cache: bool = False,\n)"))
    shas["unnamed"] = _commit(repo, "rename an argument of the entry point")
    shutil.copy(pristine / API, api)
    shas["renamed"] = _commit(repo, "rename it back")
    shutil.copy(pristine / "fla" / MUTANT.path, target)
    shas["revert"] = _commit(repo, "revert the plant")
    (repo / "README").write_text("kernels, v3\n")
    shas["docs2"] = _commit(repo, "docs again")
    (repo / "README").write_text("uncommitted edit\n")
    (repo / "scratch.txt").write_text("untracked\n")
    return repo, shas


def snapshot(repo: Path) -> tuple:
    return (git(repo, "status", "--porcelain"), git(repo, "worktree", "list", "--porcelain"),
            git(repo, "for-each-ref"), git(repo, "rev-parse", "HEAD"), (repo / "README").read_text(),
            Path(repo, git(repo, "rev-parse", "--git-path", "BISECT_START")).exists())


def bisect(repo, good, bad, *extra, json_path=None):
    argv = ["bisect", "--repo", str(repo), "--good", good, "--bad", bad, "--id", CHECK, "--profile", "quick",
            "--examples", "1", "--device", "cpu", *extra]
    if json_path:
        argv += ["--json", str(json_path)]
    return cli.main(argv)


@pytest.mark.parametrize("fixed", [False, True], ids=["regression", "fixed"])
def test_bisect_names_the_planted_commit(history, tmp_path, capsys, fixed):
    repo, shas = history
    before = snapshot(repo)
    out = tmp_path / "bisect.json"
    if fixed:
        status = bisect(repo, shas["revert"], shas["mend"], "--fixed", json_path=out)
    else:
        status = bisect(repo, shas["base"], shas["docs"], json_path=out)
    text = capsys.readouterr().out
    assert status == 0, text
    doc = json.loads(out.read_text())
    first, parent, skipped, why = (("revert", "renamed", "unnamed", "takes no use_cache") if fixed
                                   else ("plant", "base", "break", "SyntaxError"))
    assert doc["first"]["commit"] == shas[first]
    assert doc["first"]["files"] == (["fla/" + MUTANT.path])
    assert doc["parent"]["commit"] == shas[parent]
    at_first, at_parent = doc["first"]["checks"][0], doc["parent"]["checks"][0]
    broken, ok = (at_parent, at_first) if fixed else (at_first, at_parent)
    assert broken["status"] == "fail" and broken["measured"] > broken["budget"]
    assert ok["status"] == "pass" and ok["measured"] <= ok["budget"]
    assert [s["commit"] for s in doc["skipped"]] == [shas[skipped]]
    assert why in doc["skipped"][0]["reason"]
    assert doc["replayed"][CHECK]                       # the failing example drawn at --bad, replayed
    assert doc["steps"] >= 2 and "git bisect start" in doc["log"]
    assert "uncommitted changes" in text and f"first {'fixed' if fixed else 'bad'} commit" in text
    assert snapshot(repo) == before


def test_bad_input_is_exit_2_and_touches_nothing(history, tmp_path, capsys):
    repo, shas = history
    before = snapshot(repo)
    cases = [   # (options replacing the valid ones, flags added, the reason printed)
        ({"--repo": str(tmp_path)}, [], "not a git repository"),
        ({"--good": "no-such-rev"}, [], "unknown revision"),
        ({"--good": shas["docs"]}, [], "same commit"),
        ({"--good": shas["docs2"]}, [], "not an ancestor"),
        ({"--good": shas["plant"], "--bad": shas["docs"]}, ["--fixed"], "not an ancestor"),
        ({"--id": "kernel.nope"}, [], "no kernel or layer check matches"),
        ({"--import-root": "sub"}, [], "no fla/__init__.py"),
    ]
    for options, flags, reason in cases:
        valid = {"--repo": str(repo), "--good": shas["base"], "--bad": shas["docs"], "--id": CHECK}
        argv = ["bisect", *[x for kv in {**valid, **options}.items() for x in kv], *flags]
        assert cli.main(argv) == 2, options
        err = capsys.readouterr().err.strip()
        assert reason in err and len(err.splitlines()) == 1, (options, err)
    assert snapshot(repo) == before


def test_a_bisect_in_progress_is_left_alone(history, capsys):
    repo, shas = history
    git(repo, "bisect", "start", "--no-checkout", shas["docs"], shas["base"])
    try:
        mine = snapshot(repo)
        assert bisect(repo, shas["base"], shas["docs"]) == 2
        assert "bisect is in progress" in capsys.readouterr().err
        assert snapshot(repo) == mine
    finally:
        git(repo, "bisect", "reset")


# Prepended to fla/__init__.py at one commit of `blocking`: with $VERIFY_TEST_MARKER set, importing fla there
# writes the marker (the step's pid) and then never returns, so that a test interrupts a bisect step that is
# certainly running, whatever the machine's speed.
BLOCKER = f"""import os as _os
if _os.environ.get({MARKER_ENV!r}):     # planted by property_tests/slow/test_bisect.py
    import time as _time
    _tmp = _os.environ[{MARKER_ENV!r}] + ".tmp"
    with open(_tmp, "w") as _f:
        _f.write(str(_os.getpid()))
    _os.replace(_tmp, _os.environ[{MARKER_ENV!r}])
    while True:
        _time.sleep(60)
"""


@pytest.fixture(scope="module")
def blocking(tmp_path_factory):
    """(repo, {name: sha}): base (good) -> block (importing fla blocks) -> plant (bad; the mutant, no blocker).
    The block commit is the only one between --good and --bad, so `git bisect run` steps into it first."""
    repo = tmp_path_factory.mktemp("blocking") / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    shutil.copytree(fla_package_dir(), repo / "fla", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "README").write_text("kernels\n")
    shas = {"base": _commit(repo, "base: fla-core as installed")}
    init = repo / "fla" / "__init__.py"
    pristine = init.read_text()
    init.write_text(BLOCKER + pristine)
    shas["block"] = _commit(repo, "block: importing fla never returns")
    init.write_text(pristine)
    target = repo / "fla" / MUTANT.path
    target.write_text(target.read_text().replace(MUTANT.old, MUTANT.new))
    shas["plant"] = _commit(repo, f"plant: {MUTANT.description}")
    return repo, shas


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_removes_the_worktree(blocking, tmp_path, monkeypatch, sig):
    """Interrupted in the middle of `git bisect run`: the signal comes once the step at the block commit is
    running (its marker), never after a delay; the step is killed, the worktree removed, exit 130."""
    repo, shas = blocking
    before = snapshot(repo)
    marker = tmp_path / "step.started"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    proc = subprocess.Popen(verify_command("bisect", "--repo", repo, "--good", shas["base"], "--bad", shas["plant"],
                                           "--id", CHECK, "--profile", "quick", "--examples", "1", "--device", "cpu"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        step = wait_for_marker(marker, proc)
        assert git(repo, "worktree", "list").count("\n") == 1          # the bisect's own worktree exists
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=PATIENCE)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    assert "worktree was removed" in err
    assert "checking --good" in out                  # it got past the first two steps, into git bisect run
    wait_for(lambda: gone(step), "the blocked step was killed")
    assert snapshot(repo) == before


def _tree(repo, sha) -> str:
    return git(repo, "rev-parse", f"{sha}:fla")


def test_a_step_reuses_the_verdicts_of_a_tree_already_judged(history, tmp_path, capsys):
    """With a cache of its own: a step whose fla tree equals a commit judged before it reruns nothing (here plant's,
    equal to mend's); an identical second bisect reruns nothing at any step and names the same commit.  The control: --no-cache reruns every
    check at every step."""
    repo, shas = history
    cache_args = ["--cache-dir", str(tmp_path / "cache")]
    docs = []
    for name, extra in (("first", cache_args), ("second", cache_args), ("control", ["--no-cache"])):
        out = tmp_path / f"{name}.json"
        assert bisect(repo, shas["base"], shas["renamed"], *extra, json_path=out) == 0, capsys.readouterr().out
        docs.append(json.loads(out.read_text()))
    first, second, control = docs
    assert first["first"]["commit"] == second["first"]["commit"] == control["first"]["commit"] == shas["plant"]
    draw, *steps = first["judged"]              # --bad draws the inputs (a search); the steps replay them
    assert draw["commit"] == shas["renamed"]
    seen, repeats = set(), 0
    for step in steps:
        tree = _tree(repo, step["commit"])
        if tree in seen:
            repeats += 1
            assert step["ran"] == 0 and step["reused"] > 0, step
        elif step["verdict"] != "skip":
            assert step["ran"] > 0, step
        seen.add(tree)
    assert repeats, first["judged"]            # plant's tree is mend's (the bisect judges mend first)
    run = lambda doc: [s for s in doc["judged"] if s["verdict"] != "skip"]      # a skip (cannot import) runs none
    assert all(step["ran"] == 0 and step["reused"] > 0 for step in run(second)), second["judged"]
    assert all(step["ran"] > 0 and step["reused"] == 0 for step in run(control)), control["judged"]
    assert [s["commit"] for s in second["judged"]] == [s["commit"] for s in first["judged"]]
