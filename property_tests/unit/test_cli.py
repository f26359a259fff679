"""The verify command in this process, before any check runs: selection (globs, -k expressions), usage errors,
`verify list` and `verify merge`; a fatal CUDA error stops the search; git_dirty."""
import sys

import pytest
from helpers import own_process, run_cli

from pathmdn_verify import cli
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import Context, Result
from pathmdn_verify.run import xfail_list as xfails


def test_glob_and_exact_selection(registry):
    from pathmdn_verify.core.registry import select
    glob = select(["oracle.path.*.negative.*"])
    assert glob and all(".negative." in c.id for c in glob)
    exact = select(None, ["oracle.path.ut_product"])
    assert [c.id for c in exact] == ["oracle.path.ut_product"]
    part = select(["path_attn.*.bf16"])          # a glob matching part of an id
    assert part and all(".path_attn." in c.id and ".bf16" in c.id for c in part)


def test_k_expressions_as_pytest_writes_them(registry):
    from pathmdn_verify.core.registry import matcher, select
    ids = {c.id for c in select(["path_attn and not bwd"])}
    assert ids and all("path_attn" in i and "bwd" not in i for i in ids)
    assert {c.id for c in select(["path_attn"])} - ids == {c.id for c in select(["path_attn and bwd"])}
    both = {c.id for c in select(["(fox or spectra) and not negative"])}
    assert both == {c.id for c in registry.values() if ("fox" in c.id or "spectra" in c.id) and "negative" not in c.id}
    assert matcher("not not ut_product")("oracle.path.ut_product")
    for bad in ("a and", "(a", "a b", "and", "not"):
        with pytest.raises(UsageError, match="-k"):
            matcher(bad)
    r, _ = run_cli("list", "-k", "a and")
    assert r.returncode == 2 and r.stderr.startswith("verify: error: -k") and "Traceback" not in r.stderr


def test_pattern_that_selects_nothing_is_usage_error():
    r, _ = run_cli("oracles", "-k", "no.such.check", "--device", "cpu")
    assert r.returncode == 2
    assert r.stderr.startswith("verify: error:") and "no.such.check" in r.stderr
    assert "Traceback" not in r.stderr


def test_cuda_without_gpu_is_usage_error():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r, _ = run_cli("oracles", "--device", "cuda")
    assert r.returncode == 2 and "CUDA" in r.stderr and "Traceback" not in r.stderr


def test_unwritable_json_is_usage_error_and_writes_nothing(tmp_path):
    target = tmp_path / "missing_dir" / "out.json"
    r, doc = run_cli("oracles", "-k", "ut_product", "--device", "cpu", "--json", target)
    assert r.returncode == 2 and "--json" in r.stderr and doc is None
    assert not target.parent.exists()


def test_list_prints_ids_and_descriptions():
    r, _ = run_cli("list", "-k", "oracle.fox")
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines and all(line.startswith("oracle.fox") and len(line.split(None, 1)) == 2 for line in lines)


def test_a_call_in_this_process_that_puts_a_kernel_tree_on_its_import_path_fails(monkeypatch, tmp_path):
    """helpers.run_cli runs a command here only if it puts no kernel tree (a folder holding fla) on this
    process's import path and imports no kernel package (a command that does must run in its own: own_process);
    controls: a folder without fla joining the path (an --impl file's) passes, and so does the plain call."""
    (tmp_path / "tree" / "fla").mkdir(parents=True)
    (tmp_path / "tree" / "fla" / "__init__.py").write_text("")
    real = cli.main
    for folder, fails in ((tmp_path / "tree", True), (tmp_path, False)):
        def main(argv, folder=folder):
            sys.path.insert(0, str(folder))
            return real(argv)
        monkeypatch.setattr(cli, "main", main)
        try:
            if fails:
                with pytest.raises(AssertionError, match="put a kernel tree on this process's import path"):
                    run_cli("list", "-k", "oracle.fox")
            else:
                assert run_cli("list", "-k", "oracle.fox")[0].returncode == 0
        finally:
            sys.path.remove(str(folder))
    monkeypatch.setattr(cli, "main", real)
    assert run_cli("list", "-k", "oracle.fox")[0].returncode == 0
    assert own_process(["compare", "--kernel-root", "t"]) and own_process(["all", "--workers", "0", "--kernel-root", "t"])
    assert not own_process(["localize", "--kernel-root", "t"]) and not own_process(["all", "--kernel-root", "t"])


def test_fatal_cuda_error_stops_the_search(registry):
    """A CUDA runtime error poisons the context: the search reports the example that raised it, unshrunk, as
    kind cuda_fatal (the runner then replaces the worker: test_runner_slow.py), never a pass or a shrunk example."""
    from hypothesis import strategies as st

    from pathmdn_verify.core.search import search
    from pathmdn_verify.run import runner
    seen = []

    def evaluate(n):
        seen.append(n)
        if n >= 5:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        raise AssertionError("unreachable: every draw is >= 5")
    chk = runner.Check("test.cuda.lost", "raises a fatal CUDA error",
                       lambda ctx: search(st.integers(5, 100), evaluate, ctx, "test.cuda.lost", max_examples=20))
    rec = runner.apply_xfails(runner.execute(chk, Context()), xfails.current_scope("cpu", "ci"))
    assert len(seen) == 1                                 # stopped at once: no shrinking on a dead context
    assert rec.result.status == "fail" and f"[{seen[0]}]" in rec.result.message
    assert "fatal CUDA error" in rec.result.message and rec.result.kind == "cuda_fatal"


def test_merge_later_record_wins_unless_skip_and_refuses_other_runs(tmp_path):
    """verify merge: a later record replaces an earlier one unless it is a skip; results of a different run
    (device, profile, kernel package) or not following the schema are usage errors."""
    from pathmdn_verify.core import results
    from pathmdn_verify.core.results import Outcome
    cid = "kernel.fla.path_attn.fwd.bf16.beta_two"

    def run(name, status, measured, device="cpu"):
        rec = Outcome(cid, "d", Result(status, measured, 2.0, "x", kind=None if status == "pass" else "not_run"),
                     0.0, "r")
        doc = results.document([rec], command=["verify"], toolkit={"name": "t", "version": None, "git_commit": None},
                               kernel_package=None, environment={"device": device, "profile": "ci", "python": "3",
                                                                 "torch": "t", "triton": "t"},
                               started=0.0, wall_seconds=1.0, interrupted=False)
        results.write_json(tmp_path / name, doc)
        return str(tmp_path / name)
    a, b, c = run("a.json", "fail", 3.0), run("b.json", "pass", 0.5), run("c.json", "skip", None)
    assert results.merge([a, b, c], ["verify", "merge"], {"name": "t", "version": None, "git_commit": None})["checks"][0]["status"] == "pass"
    assert cli.main(["merge", a, c, "--json", str(tmp_path / "m.json")]) == 1      # the failure stands
    gpu = run("gpu.json", "pass", 0.5, device="cuda")
    with pytest.raises(UsageError, match="device"):
        results.merge([a, gpu], [], {"name": "t", "version": None, "git_commit": None})
    (tmp_path / "bad.json").write_text('{"checks": [], "measured": NaN}')
    assert cli.main(["merge", str(tmp_path / "bad.json")]) == 2


def test_git_dirty_says_when_the_commit_does_not_name_the_code(tmp_path):
    """environment.git_dirty: False for a clean checkout, True once a tracked file changes (the commit no longer
    names the code that runs), None outside a checkout; an untracked file leaves it clean."""
    import subprocess

    from pathmdn_verify.platform import environment
    repo = tmp_path / "repo"
    repo.mkdir()
    f = repo / "m.py"
    f.write_text("x = 1\n")
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)
    git("init", "-q")
    git("add", "m.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m")
    assert environment.git_commit(f) and environment.git_dirty(f) is False
    (repo / "untracked.py").write_text("")
    assert environment.git_dirty(f) is False
    f.write_text("x = 2\n")
    assert environment.git_dirty(f) is True
    assert environment.git_dirty(tmp_path / "elsewhere" / "m.py") is None
