"""`verify coverage`: a kernel that never runs and a launcher branch never taken are named (a toy package), and a
selection without kernel checks is exit 2.  TARGETS and assert_reached serve test_coverage_cli.py and
test_coverage_slow.py."""
from __future__ import annotations

import json

import coverage

from pathmdn_verify import cli
from pathmdn_verify.run.code_coverage import analyse, kernels_and_launchers
from pathmdn_verify.platform.mutation import fla_package_dir


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


def test_a_selection_without_kernel_checks_is_exit_2(capsys):
    assert cli.main(["coverage", "-k", "oracle.path"]) == 2
    assert "no kernel check" in capsys.readouterr().err


def _line_of(rel: str, text: str) -> int:
    """The line number of the one line of fla's file rel that contains text."""
    lines = [n for n, s in enumerate((fla_package_dir() / rel).read_text().splitlines(), 1) if text in s]
    assert len(lines) == 1, f"{rel}: {text!r} found on lines {lines}"
    return lines[0]


# What the coverage regression cases of verify/ops/ exist to reach: check -> (op, file, a statement that runs
# only there; None: the launcher branch of MDN's explicit p)
TARGETS = {
    "kernel.fla.path_attn.bwd.fp32.gate_weak": [     # T > 512: fla's super-block stages
        ("path_attn", "ops/path_attn/parallel_path_bwd_inter_dqh.py", "NUM_BLOCKS + idx_j + 1) * HQ + i_hq)"),
        ("path_attn", "ops/path_attn/parallel_path_bwd_inter_dkv.py", "b_dk = tl.dot(b_dA.to(b_q.dtype), b_q, b_dk)"),
        ("path_attn", "ops/path_attn/transform_q.py", "if offset % S == 0:")],
    "kernel.fla.path_attn.decode.fp32.beta_uniform": [
        ("path_attn", "ops/path_attn/prepare_k_cache.py", "i_n, i_t = tl.load(indices + i_t * 2)")],
    "kernel.fla.mdn_chunk16.fwd.bf16.typical": [("mdn", "ops/momentum_delta_rule/chunk.py", None)],
}


def assert_reached(tmp_path, ids):
    """`verify coverage` of the checks at the quick profile with one drawn example (the regression cases run
    first whatever the profile) reaches every target of theirs."""
    out = tmp_path / "cov.json"
    assert cli.main(["coverage", "--profile", "quick", "--examples", "1", "--json", str(out),
                     *[a for i in ids for a in ("--id", i)]]) == 0
    ops = json.loads(out.read_text())["ops"]
    for op, rel, text in [t for i in ids for t in TARGETS[i]]:
        if text is None:     # the launcher's `if p is None:` went both ways
            branch = f"{rel}:{_line_of(rel, 'if p is None:')}->"
            assert not [b for b in ops[op]["launcher_branches_never_taken"] if b.startswith(branch)]
        else:
            assert _line_of(rel, text) not in ops[op]["files"][rel]["missing_lines"], f"{rel}: {text!r} never ran"
