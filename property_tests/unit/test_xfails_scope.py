"""Any fla checkout: an expected-failure entry measured on fla 0.6.0 applies to every tree whose fla says 0.6.0
(the installed package, a copy or git checkout of it; narrowed by `commits` / `trees` where an entry names
them) and to no other version; a malformed `--xfails FILE` is exit 2, one line.  Trees are built at test time
from the installed fla (never committed); copy_fla and verify serve test_xfails_scope_cli.py and
test_xfails_scope_slow.py."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import run_cli

from pathmdn_verify import cli
from pathmdn_verify.core.registry import Result
from pathmdn_verify.run import xfail_list as xfails


ENTRY = '''[[xfail]]
id = "kernel.fla.op.fwd.bf16.r"
packages = ["fla 0.6.0"]
kinds = ["over_budget"]
ratios = {"cpu/quick" = {min = 3.0, max = 30.0, seeds = 20}}
regime = "r"
measured = "m"
cause = "c"
'''


def installed_fla() -> Path:
    import importlib.util
    return Path(importlib.util.find_spec("fla").origin).parent     # found, not imported


def copy_fla(dest: Path, version: str | None = None) -> Path:
    """dest/fla: a copy of the installed fla (its __version__ edited to `version` if given); returns dest."""
    shutil.copytree(installed_fla(), dest / "fla", ignore=shutil.ignore_patterns("__pycache__"))
    if version is not None:
        init = dest / "fla" / "__init__.py"
        text, n = re.subn(r"""(?m)^__version__\s*=\s*['"][^'"]+['"]""", f"__version__ = '{version}'",
                          init.read_text())
        assert n == 1
        init.write_text(text)
    return dest


def scope_of(root: Path, profile: str = "quick") -> xfails.Scope:
    pkg = xfails.package_of(str(root / "fla" / "__init__.py"))
    return xfails.Scope(xfails.identity(pkg), "cpu", profile, pkg["path"])


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def verify(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd)[0]


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """A copy of the installed fla 0.6.0 as a git checkout (two commits), and a copy saying 0.3.2."""
    base = tmp_path_factory.mktemp("trees")
    same = copy_fla(base / "same")
    git(same, "init", "-q")
    git(same, "add", "-A")
    git(same, "commit", "-qm", "copy of fla 0.6.0")
    first = git(same, "rev-parse", "HEAD")
    (same / "NOTES").write_text("a later commit\n")
    git(same, "add", "NOTES")
    git(same, "commit", "-qm", "later")
    return {"same": same, "first": first, "head": git(same, "rev-parse", "HEAD"),
            "fork": copy_fla(base / "fork", "0.3.2")}


def listed(tmp_path, extra: str = "") -> Path:
    f = tmp_path / "xf.toml"
    f.write_text(ENTRY + extra)
    return f


def test_an_entry_applies_to_any_tree_of_its_version_and_not_to_another(trees, tmp_path):
    f = listed(tmp_path)
    cid = "kernel.fla.op.fwd.bf16.r"
    same, fork = scope_of(trees["same"]), scope_of(trees["fork"])
    assert same.package == f"fla 0.6.0@{trees['head'][:12]}" and fork.package == "fla 0.3.2"
    assert cid in xfails.applicable(same, f)                                  # a git checkout of 0.6.0
    assert cid in xfails.applicable(xfails.Scope("fla 0.6.0", "cpu", "quick"), f)   # the installed package
    assert cid not in xfails.applicable(fork, f)                              # the fork's version
    failing = lambda r: xfails.apply(cid, Result("fail", r, 1.0, "msg"), same, f)
    assert failing(250.0).status == "xfail"                                   # bound 30 * 10 = 300
    worse = failing(400.0)                                                    # the ratchet holds on a checkout
    assert worse.status == "fail" and xfails.WORSE in worse.message
    assert xfails.describe(same, f).startswith(
        f"expected failures: 1 of 1 entries apply to fla 0.6.0@{trees['head'][:12]} on cpu")
    assert "(measured on fla 0.6.0)" in xfails.describe(fork, f) and "0 of 1 entries apply" in xfails.describe(fork, f)


def test_the_built_in_list_applies_to_a_checkout_as_to_the_installed_package(trees):
    installed = xfails.Scope("fla 0.6.0", "cpu", "ci", str(installed_fla()))
    n = len(xfails.applicable(installed))
    assert len(xfails.applicable(scope_of(trees["same"], "ci"))) == n
    assert len(xfails.applicable(scope_of(trees["fork"], "ci"))) < n      # only the entries without packages


def test_commits_and_trees_narrow_an_entry(trees, tmp_path):
    same, fork = scope_of(trees["same"]), scope_of(trees["fork"])
    first, head = trees["first"], trees["head"]
    cid = "kernel.fla.op.fwd.bf16.r"

    def applies(field: str, scope) -> bool:
        f = tmp_path / "n.toml"
        f.write_text(ENTRY.replace('kinds = ', f'{field}\nkinds = '))
        return cid in xfails.applicable(scope, f)
    assert applies(f'commits = ["{first[:12]}..{head}"]', same)
    assert applies(f'commits = ["{first}.."]', same) and applies(f'commits = ["..{head[:7]}"]', same)
    assert not applies(f'commits = ["..{first}"]', same)                     # HEAD is after the range
    assert not applies(f'commits = ["{"0" * 40}.."]', same)                  # unknown to this checkout
    assert applies(f'commits = ["..{first}"]', xfails.Scope("fla 0.6.0", "cpu", "quick"))   # no git: version
    h = xfails.tree_hash(same.root)
    assert h == xfails.tree_hash(str(installed_fla()))                        # same code, same hash
    assert applies(f'trees = ["{h[:20]}"]', same) and not applies(f'trees = ["sha256:{"0" * 16}"]', same)
    assert not applies(f'trees = ["{h}"]', fork)


@pytest.mark.parametrize("text, says", [
    ("[[xfail]]\nid = 'a'\nkinds = ['over_budget']\n", "lacks"),
    ("[[xfail]\n", "Expected"),
    (ENTRY.replace('kinds = ', 'commits = ["main"]\nkinds = '), "commits 'main'"),
    (ENTRY.replace('packages = ["fla 0.6.0"]', 'packages = ["fla >=zero"]'), "packages 'fla >=zero'"),
    (ENTRY.replace('packages = ["fla 0.6.0"]', 'packages = ["fla 0.6.0@main"]'), "packages 'fla 0.6.0@main'"),
    ("xfail = 3\n", "array of tables"),
])
def test_a_malformed_xfails_file_is_exit_2_in_one_line(tmp_path, capsys, planted, text, says):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    for argv in (["all", "--id", "test.planted.pass", "--device", "cpu", "--xfails", str(bad)],
                 ["xfails", "--device", "cpu", "--xfails", str(bad)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("verify: error:") and str(bad) in err[0] and says in err[0], err
