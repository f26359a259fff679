"""The verdict cache never replays a stale verdict: changing any one component of what a verdict depends on (a
file the check's worker read, the toolkit's sources, a run parameter, a package version, the device class, an
environment variable, a named implementation's sources) makes the lookup miss.  Each test has its negative control: the same change under a cache whose key leaves that
component out replays the old verdict, so the test would fail without it."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import Context, Result
from pathmdn_verify.core.results import Outcome
from pathmdn_verify.run import verdicts

CHECK = "kernel.fla.gdn_chunk.fwd.fp32.typical"


def _outcome(status="pass", message="within budget") -> Outcome:
    return Outcome(CHECK, "a check", Result(status, 0.5, 1.0, message, {"tensors": []}, measure="normwise_relative"),
                   1.25, f"verify run --id {CHECK}", 0.0, 0)


@pytest.fixture
def root(tmp_path) -> Path:
    """A kernel root with two files: one the check depended on, one it never reached."""
    (tmp_path / "root" / "fla").mkdir(parents=True)
    (tmp_path / "root" / "fla" / "chunk.py").write_text("SCALE = 1.0\n")
    (tmp_path / "root" / "fla" / "unused.py").write_text("X = 0\n")
    return tmp_path / "root"


def _keep(tmp_path, root, ctx=Context(), files=("fla/chunk.py",), vc=None, **kw):
    vc = vc or _past(verdicts.VerdictCache(tmp_path / "c", "cpu"))
    assert vc.put(_outcome(**kw), ctx, "run-1", {str(root / f) for f in files}, root)
    return vc


def _past(vc: verdicts.VerdictCache) -> verdicts.VerdictCache:
    """A cache whose run started after the fixture's files were written (a file changed since the run started is
    never kept: see test_a_file_changed_during_the_run_is_not_kept)."""
    vc.reads.started = float("inf")
    return vc


def test_an_unchanged_check_replays_its_verdict_with_the_run_it_came_from(tmp_path, root):
    _keep(tmp_path, root)
    hit = verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root)
    assert hit is not None and hit.result.status == "pass" and hit.result.measured == 0.5
    assert hit.result.details["cached"]["run"] == "run-1" and hit.result.details["cached"]["seconds"] == 1.25


@pytest.mark.parametrize("status,message", [("fail", "o: normwise 3.1 > budget 1.0 [example (B=1, T=64)]"),
                                            ("error", "RuntimeError: launch failed")])
def test_a_failing_or_erroring_verdict_is_cached_and_replays_message_and_repro(tmp_path, root, status, message):
    _keep(tmp_path, root, status=status, message=message)
    hit = verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root)
    assert (hit.result.status, hit.result.message, hit.repro) == (status, message, f"verify run --id {CHECK}")


@pytest.mark.parametrize("kind", verdicts.NOT_KEPT)
def test_a_verdict_of_the_machine_is_not_kept(tmp_path, root, kind):
    vc = _past(verdicts.VerdictCache(tmp_path / "c", "cpu"))
    out = _outcome(status="error")
    out.result.kind = kind
    assert not vc.put(out, Context(), "run-1", {str(root / "fla/chunk.py")}, root)
    assert vc.get(CHECK, Context(), root) is None
    assert not list((tmp_path / "c").rglob("*.json"))


def test_a_file_the_check_depended_on_changed_misses_and_its_control_replays(tmp_path, root):
    _keep(tmp_path, root)
    (root / "fla" / "chunk.py").write_text("SCALE = 1.01\n")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None
    # control: a verdict kept without that file among its dependencies replays after the same change
    _keep(tmp_path, root, files=("fla/unused.py",))
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is not None


def test_a_file_the_check_never_reached_changes_nothing(tmp_path, root):
    _keep(tmp_path, root)
    (root / "fla" / "unused.py").write_text("X = 1\n")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is not None


def test_a_file_gone_misses(tmp_path, root):
    _keep(tmp_path, root)
    (root / "fla" / "chunk.py").unlink()
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None


def test_the_same_files_in_another_kernel_root_replay(tmp_path, root):
    """Dependencies are named by their path in the kernel root: a bisect's worktree of the same code reuses."""
    _keep(tmp_path, root)
    other = shutil.copytree(root, tmp_path / "elsewhere")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), other) is not None


PARAMS = {"seed": 1, "profile": "quick", "examples": 3, "configs": "all", "fp32_dot": "ieee", "references": "cpu"}


class _Without(verdicts.VerdictCache):
    """A cache whose key leaves one run parameter out (the negative control)."""
    left_out = ""

    def key(self, check_id, ctx, extra=None):
        return super().key(check_id, dataclasses.replace(ctx, **{self.left_out: getattr(Context(), self.left_out)}),
                           extra)


@pytest.mark.parametrize("param", sorted(PARAMS))
def test_each_run_parameter_is_in_the_key(tmp_path, root, param):
    _keep(tmp_path, root)
    changed = dataclasses.replace(Context(), **{param: PARAMS[param]})
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, changed, root) is None
    control = type("Control", (_Without,), {"left_out": param})(tmp_path / "c", "cpu")
    assert control.get(CHECK, changed, root) is not None


@pytest.mark.parametrize("component,changed", [("device", "cuda:H200"), ("toolkit", "0" * 64),
                                               ("environment", "torch"), ("environment", "triton"),
                                               ("environment", "transformers"), ("environment", "python")])
def test_the_toolkit_versions_and_device_class_are_in_the_key(tmp_path, root, component, changed):
    def made(change: bool, control: bool) -> verdicts.VerdictCache:
        vc = _past(verdicts.VerdictCache(tmp_path / ("control" if control else "c"), "cpu"))
        if change and component == "environment":
            vc.base["environment"] = {**vc.base["environment"], changed: "0.0.0-other"}
        elif change:
            vc.base[component] = changed
        if control:                         # the negative control: a key without that component
            del vc.base[component]
        return vc

    _keep(tmp_path, root, vc=made(change=False, control=False))
    assert made(change=True, control=False).get(CHECK, Context(), root) is None
    _keep(tmp_path, root, vc=made(change=False, control=True))
    assert made(change=True, control=True).get(CHECK, Context(), root) is not None


@pytest.mark.parametrize("variable", ["VERIFY_EMULATE_H200_OFF", "VERIFY_IMPLS", "VERIFY_EXTRA_CHECKS", "MY_GAIN",
                                      "TRITON_F32_DEFAULT", "TORCH_BLAS_PREFER_CUBLASLT", "OMP_NUM_THREADS"])
def test_every_environment_variable_is_in_the_key(tmp_path, root, monkeypatch, variable):
    """Any variable (an emulation switched off, a plug-in module, one an implementation reads, Triton's or torch's
    numerics) is in the key; those of NOT_KEYED are not (the control: a run in another terminal, temporary folder
    or cache folder replays)."""
    monkeypatch.delenv(variable, raising=False)
    _keep(tmp_path, root)
    monkeypatch.setenv(variable, "1")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None
    monkeypatch.delenv(variable)
    for name in verdicts.NOT_KEYED:
        monkeypatch.setenv(name, str(tmp_path / "elsewhere"))
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is not None


def test_a_variable_declared_unkeyed_replays_across_its_values_and_an_undeclared_one_does_not(tmp_path, root,
                                                                                             monkeypatch):
    """$VERIFY_CACHE_UNKEYED (names and NAME* prefixes): a CI's per-run identifiers, declared, change no key, so
    the next run with other values replays; the control: a variable not declared (RUN_ID under the prefix
    CI_*, GITHUB_RUN_ID under GITHUB_RUN_IDX) misses; a malformed entry is a usage error."""
    monkeypatch.setenv("RUN_ID", "1")
    monkeypatch.setenv("CI_JOB_ID", "7")
    _keep(tmp_path, root)
    monkeypatch.setenv("VERIFY_CACHE_UNKEYED", "RUN_ID,CI_*")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").differences() == [
        "variable CI_JOB_ID now declared unkeyed", "variable RUN_ID now declared unkeyed"]
    _keep(tmp_path, root)
    monkeypatch.setenv("RUN_ID", "2")
    monkeypatch.setenv("CI_JOB_ID", "8")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is not None
    monkeypatch.setenv("VERIFY_CACHE_UNKEYED", "CI_*")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None
    monkeypatch.setenv("VERIFY_CACHE_UNKEYED", "RUN_ID,CI_*,GITHUB_RUN_IDX")
    monkeypatch.setenv("GITHUB_RUN_ID", "3")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None
    for bad in ("*", "A=B", "CI_*X"):
        monkeypatch.setenv("VERIFY_CACHE_UNKEYED", bad)
        with pytest.raises(UsageError, match="VERIFY_CACHE_UNKEYED"):
            verdicts.VerdictCache(tmp_path / "c", "cpu")


def test_a_plug_in_modules_source_is_in_the_key(tmp_path, root, monkeypatch):
    """An op of a $VERIFY_EXTRA_CHECKS module depends on that module's code, read or not: an edit to it misses, the
    same bytes replay.  The control: an edit to a file beside a plain module (not a package) changes nothing."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "my_op.py").write_text("GAIN = 1.0\n")
    (plugins / "notes.py").write_text("X = 0\n")
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.setenv("VERIFY_EXTRA_CHECKS", "my_op")
    _keep(tmp_path, root)
    (plugins / "notes.py").write_text("X = 1\n")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is not None
    (plugins / "my_op.py").write_text("GAIN = 1.01\n")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None
    (plugins / "my_op.py").write_text("GAIN = 1.0\n")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is not None


def test_every_source_of_an_implementations_package_is_in_the_key(tmp_path, root, monkeypatch):
    """An implementation's package is in the key whole, every .py file of its top folder, imported or not (a
    module it would load later, a sibling): an edit to any misses.  The control: a file outside the package."""
    import sys

    from pathmdn_verify.ops import impls
    pkg = tmp_path / "mine" / "kern"
    (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "sub/__init__.py", "sub/attn.py", "sub/later.py"):
        (pkg / f).write_text("def path(q, k, v, w, beta, scale=None):\n    return q\n" if f == "sub/attn.py" else "")
    (tmp_path / "mine" / "notes.py").write_text("X = 0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mine"))
    from kern.sub import attn
    monkeypatch.setattr(impls, "IMPLS", {})
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    impls.implement(__import__("pathmdn_verify.ops", fromlist=["OPS"]).OPS["path_attn"], attn.path, name="mine",
                    fp32_dot="ieee")
    _keep(tmp_path, root)
    (tmp_path / "mine" / "notes.py").write_text("X = 1\n")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is not None
    (pkg / "sub" / "later.py").write_text("Y = 2\n")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None


def test_a_file_changed_during_the_run_is_not_kept(tmp_path, root):
    """A file modified after the run started may have been read in either version: the verdict is not kept (the
    control: the same put from a run that started after the edit keeps it)."""
    vc = verdicts.VerdictCache(tmp_path / "c", "cpu")
    (root / "fla" / "chunk.py").write_text("SCALE = 1.02\n")
    assert not vc.put(_outcome(), Context(), "run-1", {str(root / "fla/chunk.py")}, root)
    assert _past(verdicts.VerdictCache(tmp_path / "c", "cpu")).put(_outcome(), Context(), "run-1",
                                                                {str(root / "fla/chunk.py")}, root)


def test_each_read_file_is_named_and_hashed_once_per_run(tmp_path, root, monkeypatch):
    """Every check of a worker reports all the worker read so far (thousands of files, in the reporting process,
    between two checks): each file is named and hashed once per run, however many checks report it."""
    files = [root / "fla" / f"m{i}.py" for i in range(40)]
    for f in files:
        f.write_text(f"X = {f.name!r}\n")
    calls = {"where": 0, "digest": 0}
    where, digest = verdicts.where, verdicts.ReadLists.digest
    monkeypatch.setattr(verdicts, "where", lambda *a: calls.__setitem__("where", calls["where"] + 1) or where(*a))
    monkeypatch.setattr(verdicts.ReadLists, "digest",
                        lambda self, f: calls.__setitem__("digest", calls["digest"] + 1) or digest(self, f))
    vc = _past(verdicts.VerdictCache(tmp_path / "c", "cpu"))
    for n in range(10, 41, 10):           # four checks, each reporting the reads so far
        assert vc.put(_outcome(), Context(seed=n), "run-1", {str(f) for f in files[:n]}, root)
    assert calls == {"where": 40, "digest": 40}
    hit = verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(seed=40), root)
    assert hit is not None and hit.result.status == "pass"


def test_reads_not_observed_keep_nothing(tmp_path, root):
    """A check whose reads are not known (run in the caller's process, a worker's report missed) is never kept."""
    vc = _past(verdicts.VerdictCache(tmp_path / "c", "cpu"))
    assert not vc.put(_outcome(), Context(), "run-1", None, root)
    assert vc.get(CHECK, Context(), root) is None


def test_a_bisect_steps_replayed_cases_are_in_the_key(tmp_path, root):
    vc = _past(verdicts.VerdictCache(tmp_path / "c", "cpu"))
    vc.put(_outcome(), Context(), "abc", {str(root / "fla/chunk.py")}, root, {"replay": ["B=1"]})
    assert vc.get(CHECK, Context(), root, {"replay": ["B=2"]}) is None
    assert vc.get(CHECK, Context(), root, {"replay": ["B=1"]}) is not None


@pytest.fixture
def toolkit(tmp_path_factory) -> list[Path]:
    """A copy of the toolkit's source folders (their hash is the toolkit's component of the key; outside
    tmp_path, whose JSON documents are held to the results schema)."""
    out, tmp_path = [], tmp_path_factory.mktemp("copy")
    for folder in verdicts.toolkit_folders():
        out.append(Path(shutil.copytree(folder, tmp_path / "toolkit" / folder.name,
                                        ignore=shutil.ignore_patterns("__pycache__"))))
    return out


def _file(folders, name):
    return next(f for d in folders for f in d.rglob(name))


@pytest.mark.parametrize("name", ["path_oracle.py", "budget.py", "search.py", "gdn_ops.py"])
def test_a_reference_budget_or_search_change_changes_the_toolkit_hash(toolkit, name):
    """A reference (an oracle), a budget, the search and an op record: each is a source of the toolkit."""
    before = verdicts.toolkit_hash(toolkit)
    f = _file(toolkit, name)
    f.write_text(f.read_text() + "\n# one line more\n")
    assert verdicts.toolkit_hash(toolkit) != before


def test_a_file_moved_within_the_toolkit_changes_its_hash(toolkit):
    before = verdicts.toolkit_hash(toolkit)
    f = _file(toolkit, "path_oracle.py")
    f.rename(f.parent.parent / f.name)
    assert verdicts.toolkit_hash(toolkit) != before


def test_the_expected_failure_list_is_not_in_the_toolkit_hash(toolkit):
    """It is applied to the raw verdict after the lookup (an entry's edit needs no rerun): its control."""
    before = verdicts.toolkit_hash(toolkit)
    f = _file(toolkit, "expected_failures.toml")
    f.write_text(f.read_text() + "\n# edited\n")
    assert verdicts.toolkit_hash(toolkit) == before


@pytest.mark.parametrize("keep", [verdicts.KEEP, 1])
def test_an_edit_and_its_revert_each_replay_their_own_verdict(tmp_path, root, monkeypatch, keep):
    """A key keeps an entry per set of dependency contents: after an edit's verdict is kept, the revert still
    finds the first one (a bisect's steps, a branch switched back and forth).  The control: one entry per key
    (KEEP = 1) loses it."""
    monkeypatch.setattr(verdicts, "KEEP", keep)
    _keep(tmp_path, root, status="pass")
    chunk = root / "fla" / "chunk.py"
    chunk.write_text("SCALE = 1.01\n")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None
    _keep(tmp_path, root, status="fail")
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root).result.status == "fail"
    chunk.write_text("SCALE = 1.0\n")
    back = verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root)
    assert (back.result.status == "pass") if keep > 1 else back is None


def test_a_corrupt_entry_is_ignored_with_a_warning(tmp_path, root, capsys):
    vc = _keep(tmp_path, root)
    [entry] = [e for e in (tmp_path / "c").rglob("*.json") if not {"reads", verdicts.BASES} & set(e.parts)]
    entry.write_text('{"run": "run-1", "reads": {')
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is None
    err = capsys.readouterr().err
    assert "ignoring an unreadable verdict-cache entry" in err and entry.name in err
    _keep(tmp_path, root, vc=vc)               # the next run's verdict replaces it
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").get(CHECK, Context(), root) is not None


@pytest.mark.parametrize("env, where", [({"TRITON_HOME": "h"}, "h/.triton/verify-verdicts"),
                                        ({"TRITON_HOME": "h", "TRITON_CACHE_DIR": "c/cache"}, "c/verify-verdicts"),
                                        ({"TRITON_CACHE_DIR": "c/cache", "VERIFY_CACHE_DIR": "v"}, "v")])
def test_the_default_folder_is_beside_the_triton_cache_the_run_uses(tmp_path, monkeypatch, env, where):
    """Beside the disk cache Triton uses ($TRITON_CACHE_DIR, else $TRITON_HOME/.triton/cache), unless
    $VERIFY_CACHE_DIR names one; the first case is its control: $TRITON_HOME moves it."""
    for name in ("TRITON_HOME", "TRITON_CACHE_DIR", "VERIFY_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, str(tmp_path / value))
    assert verdicts.default_dir() == tmp_path / where


def test_a_cache_that_replays_nothing_says_what_of_the_key_changed(tmp_path, root, monkeypatch):
    """differences(): a variable set since the last run that kept verdicts is named (its value never kept: an
    environment may hold secrets), the toolkit's code too; the control: the same settings are no difference ([]),
    and a folder where no run kept any has nothing to compare (None)."""
    monkeypatch.delenv("MY_TOKEN", raising=False)
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").differences() is None
    _keep(tmp_path, root)
    assert verdicts.VerdictCache(tmp_path / "c", "cpu").differences() == []
    monkeypatch.setenv("MY_TOKEN", "s3cret-value")
    changed = verdicts.VerdictCache(tmp_path / "c", "cpu")
    changed.base["toolkit"] = "0" * 64
    assert changed.differences() == ["the toolkit's code changed", "variable MY_TOKEN set"]
    _keep(tmp_path, root, vc=_past(changed))
    assert changed.differences() == []
    assert not any("s3cret-value" in p.read_text() for p in (tmp_path / "c").rglob("*.json"))


def test_the_header_names_what_changed_and_how_to_declare_a_per_run_variable():
    """The run's header line (commands.checks._cache_line): the replay count; the key's changes; the way to declare
    a variable unkeyed only where a variable changed (controls: a changed toolkit, or a variable just declared, gets no
    such hint)."""
    from pathmdn_verify.commands.checks import _cache_line
    cache = {"folder": "/c", "replay": 0, "of": 9}
    line = _cache_line({"verdict_cache": {**cache, "key_changes": ["variable OUT changed"]}})
    assert line.startswith("verdict cache /c: 0 of 9 verdicts replay; none does") and "variable OUT changed" in line
    assert "VERIFY_CACHE_UNKEYED=NAME,PREFIX*" in line
    for changes in (["the toolkit's code changed"], ["variable OUT now declared unkeyed"]):
        line = _cache_line({"verdict_cache": {**cache, "key_changes": changes}})
        assert changes[0] in line and "VERIFY_CACHE_UNKEYED" not in line
    assert "another profile, seed or option" in _cache_line({"verdict_cache": {**cache, "key_changes": []}})
    assert _cache_line({"verdict_cache": {**cache, "replay": 9, "key_changes": None}}).endswith("9 of 9 verdicts replay")


def test_only_the_named_implementations_sources_are_in_the_key(tmp_path, root, monkeypatch):
    """A process that registered two implementations (pv.check of each, the pytest plugin, the tests' in-process
    runs) keys a run of one by that one's sources: an edit to the other's file replays, an edit to its own misses.
    The control: a cache of both names misses on the other's edit."""
    import sys

    from pathmdn_verify.ops import OPS, impls
    monkeypatch.setattr(impls, "IMPLS", {})
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("one", "two"):
        (tmp_path / f"impl_{name}.py").write_text("def path(q, k, v, w, beta, scale=None):\n    return q\n")
        impls.implement(OPS["path_attn"], __import__(f"impl_{name}").path, name=name, fp32_dot="ieee")
    vc = lambda *names: _past(verdicts.VerdictCache(tmp_path / "c", "cpu", names))
    _keep(tmp_path, root, vc=vc("one"))
    _keep(tmp_path, root, vc=vc("one", "two"))
    (tmp_path / "impl_two.py").write_text("def path(q, k, v, w, beta, scale=None):\n    return 2 * q\n")
    assert vc("one").get(CHECK, Context(), root) is not None
    assert vc("one", "two").get(CHECK, Context(), root) is None
    (tmp_path / "impl_one.py").write_text("def path(q, k, v, w, beta, scale=None):\n    return 2 * q\n")
    assert vc("one").get(CHECK, Context(), root) is None
