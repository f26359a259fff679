"""Any fla checkout: an expected-failure entry measured on fla 0.6.0 applies to every tree whose fla says 0.6.0
(the installed package, a copy or git checkout of it; narrowed by `commits` / `trees` where an entry names
them) and to no other version; `--xfails FILE` replaces the built-in list (a malformed FILE is exit 2, one
line); `verify compare` survives a kernel that kills its process (a crashed verdict, exit 1) and takes
--kernel-root; the repro line of `--save-failing` names the kernel root, so it reproduces the failure.

Trees are built at test time from the installed fla (never committed)."""
import json
import re
import shlex
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
PATH_CHECK = "kernel.fla.path_attn.fwd.bf16.beta_uniform"


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
    pkg = xfails.kernel_package(str(root / "fla" / "__init__.py"))
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


def test_xfails_file_turns_a_listed_failure_into_xfail(tmp_path, planted):
    f = tmp_path / "mine.toml"
    f.write_text('[[xfail]]\nid = "test.planted.xfail"\nkinds = ["over_budget"]\n'
                 'regime = "r"\nmeasured = "m"\ncause = "planted"\n')
    out = tmp_path / "run.json"
    r = verify("all", "--id", "test.planted.xfail", "--device", "cpu", "--profile", "quick", "--xfails", str(f),
               "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(out.read_text())["checks"][0]["status"] == "xfail"
    # --xfails adds to the built-in list (a maintainer keeps the known upstream defects); --xfails-only replaces it
    assert re.search(rf"expected failures: \d+ of \d\d+ entries apply to .*\(from {re.escape(str(f))}, and the built-in "
                     r"list\)", r.stdout) and f"listed in {f}" in r.stdout, r.stdout
    only = verify("all", "--id", "test.planted.xfail", "--device", "cpu", "--profile", "quick", "--xfails-only", str(f))
    assert only.returncode == 0 and "expected failures: 1 of 1 entries apply to" in only.stdout, only.stdout
    plain = verify("all", "--id", "test.planted.xfail", "--device", "cpu", "--profile", "quick")
    assert plain.returncode == 1                                              # the built-in list does not name it


def test_compare_survives_a_kernel_that_aborts(tmp_path, registry):
    import torch

    from pathmdn_verify.ops import OPS
    root = copy_fla(tmp_path / "abort")
    target = root / "fla" / "ops" / "path_attn" / "parallel.py"
    text = target.read_text()
    head = re.search(r"(?ms)^def parallel_path_attn\(.*?^\) -> [^\n]*:\n", text)
    assert head, "parallel_path_attn's signature changed"
    target.write_text(text[:head.end()] + "    import os\n    os.abort()\n" + text[head.end():])
    op = OPS["path_attn"]
    x = {n: t for n, t in op.inputs(op.sample_case, torch.bfloat16).items() if t is not None}
    torch.save(x, tmp_path / "x.pt")
    out = tmp_path / "c.json"
    r = verify("compare", "--op", "path_attn", "--inputs", str(tmp_path / "x.pt"), "--device", "cpu",
               "--kernel-root", str(root), "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^FAIL .*crashed \(signal 6\b", r.stdout, re.MULTILINE), r.stdout
    doc = json.loads(out.read_text())
    assert (doc["status"], doc["kind"], doc["signal"]) == ("fail", "crashed", 6)


def test_save_failing_repro_names_the_kernel_root_and_reproduces(tmp_path):
    from pathmdn_verify.platform.mutation import materialize
    from pathmdn_verify.ops.attention_ops import PATH_MUTANTS
    mutant = next(m for m in PATH_MUTANTS if m.name == "path_zero_mask")
    root = materialize(mutant, tmp_path / "mutant")
    out = tmp_path / "run.json"
    r = verify("kernels", "--kernel-root", str(root), "--id", PATH_CHECK, "--profile", "quick", "--device", "cpu",
               "--save-failing", str(tmp_path / "saved"), "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    command = json.loads(out.read_text())["checks"][0]["details"]["compare_command"]
    assert command in r.stdout
    argv = shlex.split(command)
    assert argv[:2] == ["verify", "compare"] and argv[argv.index("--kernel-root") + 1] == str(root)
    replay = verify(*argv[1:])
    assert replay.returncode == 1 and "EXCEEDS" in replay.stdout, replay.stdout + replay.stderr
