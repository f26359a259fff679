"""The expected-failure list is scoped and ratcheted: an entry applies to its kernel package, device class and
profile only; a listed check that fails worse than the known defect is a failure; `verify xfails --update`
rewrites measured ratios and nothing else; a malformed list is a one-line usage error."""
import json
import math
import subprocess

import pytest

from pathmdn_verify import cli
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import DEVICE_LOST, Result
from pathmdn_verify.run import xfail_list as xfails

LIST = '''# header comment kept
[[xfail]]
id = "kernel.fla.op.fwd.bf16.r"
packages = ["fla 0.6.0"]
kinds = ["over_budget"]
ratios = {"cpu/quick" = {min = 3.0, max = 30.0, seeds = 20}}
regime = "r"    # a comment kept
measured = "m"
cause = "c"

[[xfail]]
ids = ["kernel.fla.op.bwd.bf16.r", "kernel.fla.op.bwd.bf16.s"]
packages = ["fla 0.6.0"]
kinds = ["exception"]
exception = "OutOfResources"
devices = ["cuda:NVIDIA H200"]
profiles = ["full"]
regime = "r2"
measured = "m2"
cause = "c2"

[[xfail]]
id = "oracle.x.y"
kinds = ["over_budget", "non_finite"]
regime = "r3"
measured = "m3"
cause = "c3"
'''
QUICK = xfails.Scope("fla 0.6.0", "cpu", "quick")


@pytest.fixture
def listfile(tmp_path):
    f = tmp_path / "xf.toml"
    f.write_text(LIST)
    return f


def fail(measured, budget=1.0, **kw):
    return Result("fail", measured, budget, "msg", **kw)


def test_known_way_is_xfail_and_worse_is_a_failure_with_both_numbers(listfile):
    cid = "kernel.fla.op.fwd.bf16.r"     # bound = 30 * max(10, 30 / 3) = 300
    assert xfails.apply(cid, fail(250.0), QUICK, listfile).status == "xfail"
    worse = xfails.apply(cid, fail(400.0), QUICK, listfile)
    assert worse.status == "fail" and xfails.WORSE in worse.message
    assert "400" in worse.message and "300" in worse.message
    nonfinite = xfails.apply(cid, fail(math.inf), QUICK, listfile)    # another kind: worse at any ratio
    assert nonfinite.status == "fail" and "non_finite" in nonfinite.message
    ci = xfails.apply(cid, fail(1e6), xfails.Scope("fla 0.6.0", "cpu", "ci"), listfile)   # no spread for cpu/ci
    assert ci.status == "xfail" and "kind only" in ci.message
    assert ci.details["expected_failure"]["verdict"] == "known" and worse.details["expected_failure"]["bound"] == 300
    passed = xfails.apply(cid, Result("pass", 0.5, 1.0, "ok"), QUICK, listfile)
    assert passed.status == "pass" and xfails.NOT_REPRODUCED in passed.message
    assert xfails.apply("kernel.fla.unlisted", fail(2.0), QUICK, listfile).status == "fail"


def test_kinds_read_from_results():
    assert xfails.failure_kind(fail(math.inf, details={DEVICE_LOST: True})) == ("cuda_fatal", None)
    raised = Result("fail", math.inf, 1.0, "x: minimal failing example [T=1]: kernel raised OutOfResources: out of")
    assert xfails.failure_kind(raised) == ("exception", "OutOfResources")
    wrapped = Result("fail", math.inf, 1.0, "x: [T=514]: kernel raised InterpreterError: OutOfBoundsAccess('kernel k')")
    assert xfails.failure_kind(wrapped) == ("exception", "OutOfBoundsAccess")     # the interpreter's wrapper skipped
    assert xfails.failure_kind(fail(math.nan)) == ("non_finite", None)
    assert xfails.failure_kind(fail(3.0, kind="timeout")) == ("timeout", None)
    assert xfails.ratio(fail(3.0, 2.0, details={"worst_ratio": 40.0})) == 40.0


def test_entries_apply_to_their_package_device_and_profile_only(listfile):
    fork = xfails.Scope("fla 0.3.2@0123456789ab", "cpu", "quick")
    assert set(xfails.applicable(fork, listfile)) == {"oracle.x.y"}       # kernel entries name fla 0.6.0
    h200 = xfails.Scope("fla 0.6.0", "cuda:NVIDIA H200", "full")
    assert "kernel.fla.op.bwd.bf16.s" in xfails.applicable(h200, listfile)
    assert "kernel.fla.op.bwd.bf16.s" not in xfails.applicable(xfails.Scope("fla 0.6.0", "cuda:NVIDIA H200", "ci"),
                                                               listfile)
    assert "kernel.fla.op.bwd.bf16.s" not in xfails.applicable(xfails.Scope("fla 0.6.0", "cuda:NVIDIA A100", "full"),
                                                               listfile)
    oor = Result("fail", math.inf, 1.0, "kernel raised OutOfResources: smem")
    assert xfails.apply("kernel.fla.op.bwd.bf16.r", oor, h200, listfile).status == "xfail"
    other = Result("fail", math.inf, 1.0, "kernel raised CompilationError: x")
    assert xfails.apply("kernel.fla.op.bwd.bf16.r", other, h200, listfile).status == "fail"
    assert "apply to fla 0.3.2@0123456789ab on cpu" in xfails.describe(fork, listfile)


def test_package_identity_names_version_and_commit_of_a_checkout(tmp_path):
    pkg = tmp_path / "fork" / "fla"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.3.2"\n')
    assert xfails.identity(xfails.package_of(str(pkg / "__init__.py"))) == "fla 0.3.2"     # a copy: no commit
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path / "fork"), *a], check=True, capture_output=True)
    git("init", "-q")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x")
    ident = xfails.identity(xfails.package_of(str(pkg / "__init__.py")))
    assert ident.startswith("fla 0.3.2@") and len(ident.split("@")[1]) == 12


def test_update_rewrites_ratios_only(listfile, tmp_path):
    run = tmp_path / "run.json"
    checks = [{"id": "kernel.fla.op.fwd.bf16.r", "status": st, "measured": m, "budget": 1.0,
               "details": {"worst_ratio": w}} for st, m, w in
              (("xfail", 5.0, 50.0), ("xfail", 2.0, 2.0), ("pass", 0.5, 0.5), ("xfail", "inf", None))]
    env = {"expected_failures": {"scope": {"package": "fla 0.6.0", "device": "cpu", "profile": "ci"}}}
    run.write_text(json.dumps({"environment": env, "checks": checks}))
    before = listfile.read_text().splitlines()
    assert cli.main(["xfails", "--update", str(run), "--file", str(listfile)]) == 0
    after = listfile.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 1
    assert changed[0][1] == ('ratios = {"cpu/ci" = {min = 0.5, max = 50, seeds = 3}, '
                             '"cpu/quick" = {min = 3, max = 30, seeds = 20}}')
    assert xfails.load(listfile)[0].ratios["cpu/ci"] == {"min": 0.5, "max": 50.0, "seeds": 3}


@pytest.mark.parametrize("text, says", [
    ("[[xfail]]\nid = 'a'\nregime = 'r'\nmeasured = 'm'\ncause = 'c'\n", "lacks ['kinds']"),
    ("[[xfail]]\nid = 'a'\nkinds = ['slow']\nregime = 'r'\nmeasured = 'm'\ncause = 'c'\n", "kinds ['slow']"),
    ("[[xfail]]\nid = 'kernel.a'\nkinds = ['over_budget']\nregime = 'r'\nmeasured = 'm'\ncause = 'c'\n",
     "name their kernel packages"),
    ("[[xfail]]\nids = ['a', 'a']\nkinds = ['non_finite']\nregime = 'r'\nmeasured = 'm'\ncause = 'c'\n", "twice"),
    ("[[xfail]]\nid = 'a'\nkinds = ['exception']\nregime = 'r'\nmeasured = 'm'\ncause = 'c'\n", "go together"),
    ("[[xfail]]\nid = 'a'\nkinds = ['over_budget']\nratios = {'cpu/ci' = {min = 0, max = 1, seeds = 1}}\n"
     "regime = 'r'\nmeasured = 'm'\ncause = 'c'\n", "ratios.cpu/ci"),
    ("[[xfail]]\nid = 'a'\nkind = 'over_budget'\n", "unknown field"),
    ("[[xfail]\n", "xf.toml"),
])
def test_malformed_list_is_a_one_line_usage_error(tmp_path, capsys, text, says):
    f = tmp_path / "xf.toml"
    f.write_text(text)
    with pytest.raises(UsageError, match=None) as err:
        xfails.load(f)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert cli.main(["xfails", "--file", str(f), "--device", "cpu"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_shipped_list_is_valid_and_scoped(registry):
    listed = xfails.expected_failures()
    assert set(listed) <= set(registry), set(listed) - set(registry)
    h200_ci = xfails.applicable(xfails.Scope("fla 0.6.0", "cuda:NVIDIA H200", "ci"))
    assert "kernel.fla.path_attn.bwd.bf16.beta_uniform" in h200_ci          # D = 32 is drawn at ci
    assert "kernel.fla.path_attn.state_tracking.bf16" in h200_ci             # n = 256 is tried at ci
    assert "kernel.fla.path_attn.fwd.fp32.beta_uniform" not in h200_ci       # D = 128 only at full
    assert not [c for c in xfails.applicable(xfails.Scope("fla 0.3.2", "cpu", "ci")) if c.startswith("kernel.")]
