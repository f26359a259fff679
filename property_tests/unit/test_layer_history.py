"""fla's layer history as data (verify/layers/history.py): a tree placed by git ancestry or by version, a tree of
the very version a change was made in without git is unknown (never guessed), and the table is well formed."""
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
    assert H.available("gdn.allow_neg_eigval", H.Tree("0.2.0", None, None)).startswith("fla 0.2.0 (no git) predates")


def test_the_table_is_well_formed():
    for conv in H.CONVENTIONS.values():
        dates = [c.date for c, _ in conv.changes]
        assert dates == sorted(dates), conv.name
        assert all(c.commit is None or len(c.commit) >= 8 for c, _ in conv.changes), conv.name
        assert isinstance(conv.oldest, bool) == all(isinstance(v, bool) for _, v in conv.changes), conv.name
