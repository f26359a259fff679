"""fla's layer history as data (verify/layers/history.py): a tree placed by git ancestry or by version, a tree of
the very version a change was made in without git is unknown (never guessed), the table is well formed, and history
explains a verdict without deciding it: an option the constructor refuses by its signature is unsupported, one it
swallows is built (and judged), a call that reaches a missing optional dependency is named as such."""
import subprocess

import pytest

from pathmdn_verify.layers import history as H

CHANGE = H.Change("deadbeef", "2026-04-06", "0.5.0", "a change")


def test_a_tree_without_git_is_placed_by_version():
    assert H.contains(H.Tree("0.5.1", None, None), CHANGE) is True
    assert H.contains(H.Tree("0.4.2", None, None), CHANGE) is False
    assert H.contains(H.Tree("0.6.0", None, None), H.Change(None, "2026-09", "0.6.0", "release only")) is True


def test_the_version_a_change_was_made_in_is_unknown_without_git():
    with pytest.raises(H.ConventionUnknown, match="verify a git checkout"):
        H.contains(H.Tree("0.5.0", None, None), CHANGE)


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_a_git_checkout_is_placed_by_ancestry(tmp_path):
    _git(tmp_path, "init", "-q")
    shas = []
    for i in range(3):
        (tmp_path / "f").write_text(str(i))
        _git(tmp_path, "add", "f")
        _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", str(i))
        shas.append(_git(tmp_path, "rev-parse", "HEAD"))
    change = H.Change(shas[1][:8], "d", "0.5.0", "the middle commit")
    assert H.contains(H.Tree("0.5.0", shas[2], str(tmp_path)), change) is True
    assert H.contains(H.Tree("0.5.0", shas[1], str(tmp_path)), change) is True
    assert H.contains(H.Tree("0.5.0", shas[0], str(tmp_path)), change) is False
    unknown = H.Change("0123abcd", "d", "0.5.0", "not in this repository")   # git cannot tell: the version decides
    with pytest.raises(H.ConventionUnknown):
        H.contains(H.Tree("0.5.0", shas[0], str(tmp_path)), unknown)


def test_value_walks_the_changes_in_order():
    tree = H.Tree("0.4.0", None, None)          # after 2025-06-17 (0.3.0), before 2026-04 (0.5.0)
    assert H.value("gdn.allow_neg_eigval", tree) is True
    assert H.value("gdn.g_arg", tree) == "log_alpha"
    assert H.value("gdn.state", tree) == "[N,H,K,V]"
    assert H.value("gdn.state", H.Tree("0.6.0", None, None)) == "[N,H,V,K]"
    assert H.explain("gdn.allow_neg_eigval", H.Tree("0.2.0", None, None)).startswith("fla 0.2.0 (no git) predates ea8f1ee3")
    assert H.explain("gdn.allow_neg_eigval", H.Tree("0.4.0", None, None)) is None
    assert "may predate" in H.explain("gdn.conv_bias", H.Tree("0.2.2", None, None))     # the version it was made in


def test_the_table_is_well_formed():
    for conv in H.CONVENTIONS.values():
        dates = [c.date for c, _ in conv.changes]
        assert dates == sorted(dates), conv.name
        assert all(c.commit is None or len(c.commit) >= 8 for c, _ in conv.changes), conv.name
        assert isinstance(conv.oldest, bool) == all(isinstance(v, bool) for _, v in conv.changes), conv.name
        assert conv.kind in H.KINDS and (conv.kind == "form" or conv.oldest is False), conv.name


def test_history_explains_a_verdict_and_never_decides_it():
    """A failing or unsupported result gets the change a tree before it lacks; a pass only keeps it in details; a
    tree that has every change gets nothing."""
    from pathmdn_verify.checks.layer_checks import explained
    from pathmdn_verify.core.registry import Result
    old = H.Tree("0.2.0", None, None)
    names = ("gdn.conv_bias", "gdn.state")
    notes = [n for n in (H.explain(name, old) for name in names) if n]
    assert len(notes) == 2 and "4e719f2f" in notes[0]
    import unittest.mock as mock
    with mock.patch.object(H, "current", return_value=old):
        failed = explained(Result("fail", message="over budget", kind="over_budget"), names)
        passed = explained(Result("pass", message="within budget"), names)
    assert failed.status == "fail" and "history: fla 0.2.0 (no git) predates 4e719f2f" in failed.message
    assert passed.status == "pass" and passed.message == "within budget" and passed.details["history"] == notes
    with mock.patch.object(H, "current", return_value=H.Tree("0.6.0", None, None)):
        assert "history" not in explained(Result("fail", message="x"), names).details


def test_an_option_is_refused_only_by_the_signature():
    """Unsupported: a constructor without the parameter and without **kwargs.  A constructor with **kwargs takes
    anything (and builds a layer without what it ignores: the comparison judges it)."""
    from pathmdn_verify.layers.common import refused_options

    class Strict:
        def __init__(self, hidden_size=8, conv_size=4):
            pass

    class Swallows:
        def __init__(self, hidden_size=8, **kwargs):
            pass
    assert refused_options(Strict, {"conv_size": 3, "conv_bias": True}) == ["conv_bias"]
    assert refused_options(Strict, {"conv_size": 3}) == []
    assert refused_options(Swallows, {"conv_bias": True, "allow_neg_eigval": True}) == []


OPTIONAL = """
try:
    from package_not_installed_here import fast_conv, fast_update
except ImportError:
    fast_conv, fast_update = None, None


def uses_it(x):
    return fast_update(x)


def raises_for_it(x):
    if fast_conv is None:
        raise ImportError("`fast_conv` is not available: install package_not_installed_here")


def unrelated(x):
    return {}["fast"](x)
"""


def test_a_call_that_reaches_a_missing_optional_dependency_is_named(tmp_path, monkeypatch):
    """missing_dependency: a None-bound optional import called, or a raise naming it, in the innermost frame; an
    unrelated error in the same module is not (its negative control), nor is a call of an installed package."""
    import importlib

    from pathmdn_verify.core.errors import missing_dependency
    (tmp_path / "optional_mod.py").write_text(OPTIONAL)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("optional_mod")
    found = {}
    for fn in (mod.uses_it, mod.raises_for_it, mod.unrelated):
        try:
            fn(1)
        except Exception as exc:      # noqa: BLE001 (each raises)
            found[fn.__name__] = missing_dependency(exc)
    assert found["uses_it"].startswith("package_not_installed_here (an optional dependency, not installed: "
                                       "optional_mod.py:9 reaches fast_update")
    assert "reaches fast_conv" in found["raises_for_it"]
    assert found["unrelated"] is None
    (tmp_path / "optional_mod2.py").write_text(OPTIONAL.replace("package_not_installed_here", "json"))
    mod2 = importlib.import_module("optional_mod2")
    try:
        mod2.raises_for_it(1)
    except ImportError as exc:
        assert missing_dependency(exc) is None            # json is installed: the module's own error
