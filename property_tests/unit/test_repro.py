"""Repro bundles without a kernel: the judgement repro.py makes (each way to fail, with the controls that pass), the
calls written out for every op (their parameters are the op's inputs, their keywords the ones they pass), the
generated script imports nothing of the toolkit (a planted import is caught), ISSUE.md's sections, and what
`verify repro` refuses before it writes anything."""
from __future__ import annotations

import ast
import inspect
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from pathmdn_verify import cli
from pathmdn_verify.repro import bundle, issue, standalone
from pathmdn_verify.repro.calls import CALLS

# what a bundle's repro.py may import: the standard library, torch, triton (the CPU's autotuner), numpy (the
# interpreter's version), fla (found by name at run time)
ALLOWED_IMPORTS = {"importlib", "inspect", "json", "os", "sys", "traceback", "warnings", "pathlib", "torch",
                   "triton", "triton.runtime", "numpy", "fla"}


# ------------------------------------------------------------------------------------------- the judgement


def test_judge_passes_within_the_budget_and_fails_past_it():
    expected = torch.arange(1.0, 9.0, dtype=torch.float64)
    budget = {"rel": 1e-3, "abs": 1e-2}
    assert standalone.judge("o", expected.float(), expected, budget)[0]
    ok, line = standalone.judge("o", expected + 0.5, expected, budget)        # planted error: over both
    assert not ok and line.startswith("  EXCEEDS o:") and "99x the budget" in line      # rel 0.099 / 1e-3
    near = expected.clone()
    near[0] += 5e-3                                                             # within abs, rel 3.9e-4: within
    assert standalone.judge("o", near, expected, budget)[0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_value_always_fails(bad):
    expected = torch.ones(4, dtype=torch.float64)
    out = expected.clone()
    out[2] = bad
    ok, line = standalone.judge("dv", out, expected, {"rel": 1e9, "abs": 1e9})
    assert not ok and "inf" in line


def test_a_zero_expected_tensor_is_judged_by_max_abs_alone():
    zero = torch.zeros(3, dtype=torch.float64)
    assert standalone.judge("dk", zero + 1e-4, zero, {"rel": None, "abs": 1e-3})[0]
    ok, line = standalone.judge("dk", zero + 1e-2, zero, {"rel": None, "abs": 1e-3})
    assert not ok and "rel" not in line


def test_judge_is_the_toolkits_rule():
    """The script's errors are pathmdn_verify.core.metrics' on the same tensors."""
    from pathmdn_verify.core.metrics import max_abs, rel_err
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    out = (ref + 1e-3 * torch.randn(5, 7, generator=gen, dtype=torch.float64)).float()
    assert standalone.rel_err(out, ref) == rel_err(out, ref)
    assert standalone.max_abs(out, ref) == max_abs(out, ref)


def test_entry_point_says_why_a_tree_cannot_make_the_call(monkeypatch):
    fake = types.ModuleType("fake_fla_ops")
    fake.entry = lambda q, k: None
    monkeypatch.setitem(sys.modules, "fake_fla_ops", fake)
    assert standalone.entry_point("fake_fla_ops", "entry", ("q", "k"))[0] is fake.entry
    assert standalone.entry_point("fake_fla_ops", "entry", ("q", "k", "use_cache"))[1] == \
        "fake_fla_ops.entry takes no use_cache"
    assert "AttributeError" in standalone.entry_point("fake_fla_ops", "other", ())[1]
    assert "ModuleNotFoundError" in standalone.entry_point("no_such_module_here", "entry", ())[1]


# --------------------------------------------------------------------------------------------- the calls


def _kernel_of(call):
    scope = {}
    exec(compile(call.source, f"<{call.function}>", "exec"), scope)
    return scope["kernel"]


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_call_takes_the_ops_inputs_and_passes_its_keywords(name):
    from pathmdn_verify import ops
    op = ops.OPS[name]
    params = list(inspect.signature(_kernel_of(CALLS[name])).parameters)
    assert params[0] == "entry" and set(params[1:]) == set(op.required + op.optional)
    passed = {kw.arg for node in ast.walk(ast.parse(CALLS[name].source)) if isinstance(node, ast.Call)
              and getattr(node.func, "id", None) == "entry" for kw in node.keywords if kw.arg is not None}
    assert passed == set(CALLS[name].keywords)


def test_every_op_of_fla_has_a_call():
    from pathmdn_verify import ops
    assert {n for n, op in ops.OPS.items() if op.impl == "fla"} == set(CALLS)


# ------------------------------------------------------------------------------------------ the script


def imports(source: str) -> set[str]:
    tree = ast.parse(source)
    return ({a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)})


def _example(op_name="path_attn", pass_="bwd"):
    from pathmdn_verify import ops
    return bundle.Example(f"kernel.fla.{op_name}.{pass_}.fp32.beta_uniform", ops.OPS[op_name], pass_, "fp32",
                          "T=8 seed=1", {}, 0, "tf32")


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_script_imports_nothing_of_the_toolkit(name):
    text = bundle.script(_example(name, "fwd"), "a title")
    assert imports(text) <= ALLOWED_IMPORTS
    assert "pathmdn_verify" not in text.split('"""', 2)[2]      # the docstring may name the toolkit; the code not
    compile(text, "repro.py", "exec")


def test_a_planted_import_is_caught():
    text = bundle.script(_example(), "a title").replace("import torch\n", "import torch\nimport pathmdn_verify\n", 1)
    assert imports(text) - ALLOWED_IMPORTS == {"pathmdn_verify"}


# ------------------------------------------------------------------------------------------------ ISSUE.md


def _doc(measured: dict) -> dict:
    return {"title": "parallel_path_attn backward in fp32: dv 7.88x over its error budget", "entry": "fla.ops.path_attn.parallel_path_attn",
            "check": "kernel.fla.path_attn.bwd.fp32.gate_weak", "pass": "bwd", "dtype": "fp32", "example": "T=600 seed=0",
            "grads_of": ["q", "v"], "fp32_dot": "tf32", "needs_gpu": None, "budget_text": "What the budgets mean.",
            "tensors": [{"name": "dq", "rel": 0.1, "abs": 2.0}, {"name": "dv", "rel": None, "abs": 0.7}],
            "measured": measured, "toolkit": {"version": "0.1.0"},
            "kernel_package": {"version": "0.6.0", "distribution": "fla-core"},
            "environment": {"torch": "2.13.0", "triton": "3.6.0", "python": "3.11", "device_name": "x86_64"}}


def test_issue_has_the_sections_a_tracker_asks_for():
    measured = {"device": "cpu", "tensors": [{"name": "dq", "err_rel": 1e-4, "err_abs": 1e-2, "ratio": 0.01},
                                             {"name": "dv", "err_rel": 0.1, "err_abs": 3.6, "ratio": 7.88}]}
    entry = types.SimpleNamespace(devices=("cpu",), regime="K < V past T = 512", measured="dv 4.2x",
                                  cause="dv offset by K in parallel_path_bwd_inter_dkv.py")
    text = issue.render(_doc(measured), CALLS["path_attn"], [entry], "q [1, 600, 2, 16] float32")
    heads = [line for line in text.splitlines() if line.startswith("#")]
    assert heads == ["# parallel_path_attn backward in fp32: dv 7.88x over its error budget", "## Environment",
                     "## Steps to reproduce", "## Expected", "## Observed", "## Cause"]
    assert "| dv | 0.1 | 3.6 | 7.88 |" in text and "none (the expected tensor is 0)" in text
    assert "dv offset by K in parallel_path_bwd_inter_dkv.py" in text and "python repro.py" in text


def test_issue_names_where_an_exception_is_raised():
    measured = {"device": "cuda", "exception": "OutOfResources: out of resource", "where": "fla/ops/x.py:12"}
    text = issue.render(_doc(measured), CALLS["path_attn"], [], "q")
    assert "raises `OutOfResources: out of resource` at `fla/ops/x.py:12`" in text and "Not established." in text


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("argv, message", [
    (["kernel.fla.path_attn.decode.fp32.beta_uniform"], "forward or backward check"),
    (["kernel.fla.path_attn.convention.gate_scaled"], "forward or backward check"),
    (["layer.fla.path.base.fp32.mask"], "forward or backward check"),
    (["kernel.fla.path_attn.fwd.fp32.no_such_regime"], "no such check"),
    (["kernel.fla.path_attn.fwd.fp32.beta_uniform", "--examples", "0"], "must be at least 1"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, message, tmp_path, capsys):
    out = tmp_path / "bundle"
    assert cli.main(["repro", *argv, "--out", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_case_and_inputs_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["repro", "kernel.fla.path_attn.fwd.fp32.beta_uniform", "--case", "T=8", "--inputs", "x.pt",
                  "--out", str(tmp_path / "b")])
    assert stop.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_a_non_empty_out_is_refused(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine\n")
    assert cli.main(["repro", "kernel.fla.path_attn.fwd.fp32.beta_uniform", "--out", str(tmp_path)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_read_refuses_a_folder_that_is_not_a_bundle(tmp_path):
    with pytest.raises(ValueError, match="not a repro bundle"):
        bundle.read(tmp_path)
    for f in bundle.FILES[:3]:
        (tmp_path / f).write_text(json.dumps({"format": 0}))
    with pytest.raises(ValueError, match="format 0"):
        bundle.read(tmp_path)


# ------------------------------------------------------------------------------------ the bundles of docs/


REPRO_DOCS = Path(__file__).resolve().parents[2] / "docs" / "repro"
DOCS_BUNDLES = sorted(p for p in REPRO_DOCS.iterdir() if p.is_dir())


@pytest.mark.parametrize("folder", DOCS_BUNDLES, ids=[p.name for p in DOCS_BUNDLES])
def test_a_bundle_of_the_docs_is_what_this_toolkit_writes(folder):
    """Each bundle holds its four files, its tensors under 1 MB, a check that exists, and the repro.py this
    toolkit writes for it (a change to the script's common part or to an op's call makes it stale here:
    `python -m pathmdn_verify.tools.repro_bundles docs/repro` rewrites them); the README and the findings
    link it."""
    from pathmdn_verify import ops
    from pathmdn_verify.core.registry import REGISTRY
    from pathmdn_verify.run import load_checks
    load_checks()
    doc = bundle.read(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(bundle.FILES)
    assert (folder / "tensors.pt").stat().st_size < 1024 ** 2
    assert doc["check"] in REGISTRY
    ex = bundle.Example(doc["check"], ops.record(doc["check"]), doc["pass"], doc["dtype"], doc["example"], {},
                        doc["seed"], doc["fp32_dot"])
    assert (folder / "repro.py").read_text() == bundle.script(ex, doc["title"])
    assert f"({folder.name}/ISSUE.md)" in (REPRO_DOCS / "README.md").read_text()
    assert f"(repro/{folder.name}/ISSUE.md)" in (REPRO_DOCS.parent / "findings.md").read_text()


def test_a_stale_bundle_script_is_caught():
    """The control: a repro.py that differs from what the toolkit writes is not equal to it."""
    doc = bundle.read(DOCS_BUNDLES[0])
    from pathmdn_verify import ops
    ex = bundle.Example(doc["check"], ops.record(doc["check"]), doc["pass"], doc["dtype"], doc["example"], {},
                        doc["seed"], doc["fp32_dot"])
    stale = (DOCS_BUNDLES[0] / "repro.py").read_text().replace("GONE, DEFECT", "DEFECT, GONE")
    assert stale != bundle.script(ex, doc["title"])


def test_rewriting_a_bundle_repeats_its_command():
    from pathmdn_verify.repro.make import BF16_ON_CPU
    from pathmdn_verify.tools.repro_bundles import command
    doc = {"check": "kernel.fla.x.fwd.bf16.y", "example": "T=8 seed=1", "seed": 0, "fp32_dot": "tf32", "title": "t",
           "needs_gpu": BF16_ON_CPU}
    tmp = Path("/tmp/b")
    argv = command(doc, tmp)
    assert argv[3:] == ["repro", "kernel.fla.x.fwd.bf16.y", "--case", "T=8 seed=1", "--seed", "0", "--fp32-dot", "tf32",
                        "--device", "cpu", "--title", "t", "--out", str(tmp)]
    assert command({**doc, "needs_gpu": "Hopper"}, tmp)[-2:] == ["--needs-gpu", "Hopper"]


@pytest.fixture
def two_commits(tmp_path):
    import subprocess
    repo = tmp_path / "repo"
    (repo / "fla").mkdir(parents=True)
    shas = []
    for text in ("a", "b"):
        (repo / "fla" / "__init__.py").write_text(f"# {text}\n")
        for argv in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", text]):
            subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True)
        shas.append(subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                                   text=True).stdout.strip())
    return repo, shas


@pytest.mark.parametrize("extra, message", [
    (["--bundle", "{tmp}"], "not a repro bundle"),
    (["--bundle", "{bundle}", "--id", "kernel.fla.path_attn.fwd.fp32.beta_uniform"], "leave out -k, --id and --signature"),
    (["--bundle", "{bundle}", "--python", "{tmp}/no-python"], "not an executable file"),
    (["--id", "kernel.fla.path_attn.fwd.fp32.beta_uniform", "--python", "/bin/sh"], "give --bundle DIR"),
])
def test_bisect_with_a_bundle_refuses_bad_input(two_commits, tmp_path, capsys, extra, message):
    repo, (good, bad) = two_commits
    fill = {"tmp": str(tmp_path), "bundle": str(DOCS_BUNDLES[0])}
    argv = ["bisect", "--repo", str(repo), "--good", good, "--bad", bad, *(a.format(**fill) for a in extra)]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
