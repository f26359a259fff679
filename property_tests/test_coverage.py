"""`verify coverage`: a kernel that never runs and a launcher branch never taken are reported, per op."""
from __future__ import annotations

import json

import coverage

from verify import cli
from verify.coverage import analyse, kernels_and_launchers

KERNELS = '''
import functools
jit = functools.partial


@jit
def used_kernel(x):
    return x + 1


@jit
def unused_kernel(x):
    return x - 1


def launcher(x, backward=False):
    if backward:
        return unused_kernel(x)
    return used_kernel(x)
'''


def test_unrun_kernel_and_untaken_branch_are_named(tmp_path, monkeypatch):
    package = tmp_path / "toy_kernels"          # not named fla: the installed fla stays the one imported
    (package / "ops" / "toy").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ops" / "__init__.py").write_text("")
    (package / "ops" / "toy" / "__init__.py").write_text("")
    (package / "ops" / "toy" / "k.py").write_text(KERNELS)
    kernels, launchers = kernels_and_launchers(package / "ops" / "toy" / "k.py")
    assert set(kernels) == {"used_kernel", "unused_kernel"} and set(launchers) == {"launcher"}
    monkeypatch.syspath_prepend(str(tmp_path))
    cov = coverage.Coverage(source=[str(package)], branch=True, data_file=None, config_file=False)
    cov.start()
    from toy_kernels.ops.toy import k
    assert k.launcher(1) == 2
    cov.stop()
    out = tmp_path / "c.json"
    cov.json_report(outfile=str(out))
    r = analyse(json.loads(out.read_text()), package.resolve(), ("ops/toy",))
    assert r["kernels"] == 2 and r["kernels_never_ran"] == ["ops/toy/k.py:unused_kernel"]
    assert r["launcher_branches_never_taken"] == ["ops/toy/k.py:17->18 in launcher"]
    assert 0 < r["executed"] < r["statements"]


def test_forward_checks_leave_the_backward_kernels_unrun(tmp_path, capsys):
    """On fla itself: a forward check runs the forward kernels and none of the backward ones."""
    out = tmp_path / "cov.json"
    assert cli.main(["coverage", "--id", "kernel.fla.path_attn.convention.gate_scaled", "--profile", "quick",
                     "--json", str(out), "--html", str(tmp_path / "html")]) == 0
    r = json.loads(out.read_text())["ops"]["path_attn"]
    never = {k.split(":")[1] for k in r["kernels_never_ran"]}
    assert "parallel_path_fwd_kernel" not in never and "intra_chunk_preprocess_bwd_kernel" in never
    assert (tmp_path / "html" / "path_attn" / "index.html").is_file()
    assert "kernels never ran" in capsys.readouterr().out


def test_a_selection_without_kernel_checks_is_exit_2(capsys):
    assert cli.main(["coverage", "-k", "oracle.path"]) == 2
    assert "no kernel.fla check" in capsys.readouterr().err
