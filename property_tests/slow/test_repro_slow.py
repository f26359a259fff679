"""The bundles of docs/repro/ run where a maintainer of fla runs them: in a fresh venv with torch 2.13.0 (the CPU
build), fla-core 0.6.0, triton 3.6.0 and numpy < 2.4 and without this toolkit (built once per session; `import
pathmdn_verify` must fail there).  Each bundle that reproduces on the CPU exits 1 against fla-core 0.6.0, and 0
against a copy of fla with the known fix; each GPU-only bundle exits 77 on a CPU (and is run by hand on a GPU).
`verify bisect --bundle` names the commit of a throwaway history that brings a defect in, and the one that takes
it out.  Each op's call written out in a bundle (pathmdn_verify.repro.calls) gives its adapter's tensors, bit for
bit."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

from pathmdn_verify import cli
from pathmdn_verify.platform.mutation import Mutant, materialize

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = sorted(p for p in (ROOT / "docs" / "repro").iterdir() if (p / "bundle.json").is_file())
PLAIN = ("torch==2.13.0", "fla-core==0.6.0", "triton==3.6.0", "numpy<2.4", "packaging")


def needs_gpu(bundle: Path) -> str | None:
    return json.loads((bundle / "bundle.json").read_text())["needs_gpu"]


CPU_BUNDLES = [b for b in BUNDLES if not needs_gpu(b)]
GPU_BUNDLES = [b for b in BUNDLES if needs_gpu(b)]

# the fixes known for findings (docs/repro/README.md): applied to a copy of fla, the bundle must pass
FIXES = {
    "path_dv_offset": Mutant("dv_offset_by_v", "dv offset by the value head dim",
                             "ops/path_attn/parallel_path_bwd_inter_dkv.py", "dv += (bos * HQ + i_hq) * K",
                             "dv += (bos * HQ + i_hq) * V", ()),
    "path_fp16_factors": Mutant("fp32_householder_factors", "the Householder factors kept in fp32",
                                "ops/path_attn/parallel.py", ".to(torch.float16)", ".to(torch.float32)", (), count=4),
}


@pytest.fixture(scope="session")
def plain(tmp_path_factory) -> Path:
    """The python of a fresh venv with torch, fla-core, triton and numpy < 2.4 only (pip, as a maintainer would)."""
    where = tmp_path_factory.mktemp("plain-venv") / "venv"
    t0 = time.perf_counter()
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PLAIN],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"pip install {' '.join(PLAIN)} failed:\n{done.stderr[-3000:]}"
    print(f"\nfresh venv with {' '.join(PLAIN)}: {time.perf_counter() - t0:.0f} s")
    return python


def plain_fla(python: Path) -> Path:
    found = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('fla').origin)"],
                           capture_output=True, text=True, check=True)
    return Path(found.stdout.strip()).parent


def run_bundle(python: Path, bundle: Path, kernel_root: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    if kernel_root is not None:
        env["PYTHONPATH"] = str(kernel_root)
    return subprocess.run([python, bundle / "repro.py"], capture_output=True, text=True, env=env, cwd=bundle.parent,
                          timeout=900)


def test_the_venv_has_torch_and_fla_but_not_the_toolkit(plain):
    assert subprocess.run([plain, "-c", "import torch, triton, fla.ops.path_attn"], capture_output=True).returncode == 0
    missing = subprocess.run([plain, "-c", "import pathmdn_verify"], capture_output=True, text=True)
    assert missing.returncode == 1 and "No module named 'pathmdn_verify'" in missing.stderr


def test_there_are_cpu_and_gpu_bundles():
    assert len(CPU_BUNDLES) >= 4 and len(GPU_BUNDLES) >= 4
    assert set(FIXES) <= {b.name for b in CPU_BUNDLES}


@pytest.mark.parametrize("bundle", CPU_BUNDLES, ids=[b.name for b in CPU_BUNDLES])
def test_a_cpu_bundle_reproduces_with_fla_alone(plain, bundle):
    done = run_bundle(plain, bundle)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL: the defect is present" in done.stdout and "EXCEEDS" in done.stdout


@pytest.mark.parametrize("name", sorted(FIXES))
def test_a_known_fix_makes_its_bundle_pass(plain, name, tmp_path):
    root = materialize(FIXES[name], tmp_path, source=plain_fla(plain))
    done = run_bundle(plain, ROOT / "docs" / "repro" / name, kernel_root=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"({root / 'fla'})" in done.stdout                       # the patched copy ran, not the venv's fla
    assert "PASS: every tensor within its budget" in done.stdout and "EXCEEDS" not in done.stdout


@pytest.mark.parametrize("bundle", GPU_BUNDLES, ids=[b.name for b in GPU_BUNDLES])
def test_a_gpu_bundle_says_so_on_a_cpu(plain, bundle):
    done = run_bundle(plain, bundle)
    assert done.returncode == 77, done.stdout + done.stderr
    assert f"needs an NVIDIA GPU ({needs_gpu(bundle)})" in done.stdout and "nothing was run" in done.stdout


# ------------------------------------------------------------------------------------------- bisect


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def history(plain, tmp_path_factory):
    """fla with fp32 Householder factors (good) -> fla-core 0.6.0 as released (the fp16 factors: bad) -> a syntax
    error in fla.ops.path_attn (unrunnable) -> mended -> docs -> the factors back in fp32 (fixed) -> docs."""
    repo = tmp_path_factory.mktemp("fla-history") / "repo"
    fixed = materialize(FIXES["path_fp16_factors"], tmp_path_factory.mktemp("fixed"), source=plain_fla(plain))
    shutil.copytree(fixed / "fla", repo / "fla", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    shas = {"base": _commit(repo, "base: fp32 Householder factors")}
    shutil.copy(plain_fla(plain) / "ops/path_attn/parallel.py", repo / "fla/ops/path_attn/parallel.py")
    shas["plant"] = _commit(repo, "the factors in fp16")
    init = repo / "fla/ops/path_attn/__init__.py"
    pristine = init.read_text()
    init.write_text(pristine + "\ndef (:\n")
    shas["break"] = _commit(repo, "a syntax error")
    init.write_text(pristine)
    shas["mend"] = _commit(repo, "mend it")
    (repo / "README").write_text("docs\n")
    shas["docs"] = _commit(repo, "docs")
    shutil.copy(fixed / "fla/ops/path_attn/parallel.py", repo / "fla/ops/path_attn/parallel.py")
    shas["fix"] = _commit(repo, "fp32 factors again")
    (repo / "README").write_text("docs, v2\n")
    shas["docs2"] = _commit(repo, "docs again")
    return repo, shas


@pytest.mark.parametrize("fixed", [False, True], ids=["regression", "fixed"])
def test_bisect_with_a_bundle_names_the_commit(plain, history, tmp_path, capsys, fixed):
    repo, shas = history
    good, bad = (shas["docs2"], shas["mend"]) if fixed else (shas["base"], shas["docs"])
    out = tmp_path / "bisect.json"
    status = cli.main(["bisect", "--repo", str(repo), "--good", good, "--bad", bad, *(["--fixed"] if fixed else []),
                       "--bundle", str(ROOT / "docs/repro/path_fp16_factors"), "--python", str(plain),
                       "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    doc = json.loads(out.read_text())
    assert doc["first"]["commit"] == shas["fix" if fixed else "plant"]
    assert doc["first"]["files"] == ["fla/ops/path_attn/parallel.py"]
    assert "repro.py exit 1" in json.dumps(doc["parent" if fixed else "first"]["checks"])
    if not fixed:                                   # the syntax error: repro.py cannot import the entry point
        assert [s["commit"] for s in doc["skipped"]] == [shas["break"]]
        assert "repro.py exit 2" in doc["skipped"][0]["reason"] and "SyntaxError" in doc["skipped"][0]["reason"]
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


# ------------------------------------------------------------------------------- the calls, bit for bit

CALLS_AGREE = r"""
import sys, torch
from pathmdn_verify.core.registry import Context
from pathmdn_verify.platform.setup import prepare
prepare(Context(device="cpu"))
from pathmdn_verify import ops
from pathmdn_verify.core.engine import case_inputs
from pathmdn_verify.core.records import as_tuple, scale_of
from pathmdn_verify.repro.calls import CALLS
from pathmdn_verify.repro import standalone
for name, call in sorted(CALLS.items()):
    op = ops.OPS[name]
    dtype = "fp32" if "fp32" in op.dtypes else "bf16"
    x = case_inputs(op, op.sample_case, {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype], "cpu")
    scope = {"torch": torch}     # repro.py imports torch above the call
    exec(call.source, scope)
    entry, why = standalone.entry_point(call.module, call.function, call.keywords)
    assert entry is not None, why
    with torch.no_grad():
        theirs = as_tuple(op.kernel(**x, scale=scale_of(x)))
        ours = scope["kernel"](entry, **{n: t for n, t in x.items() if t is not None})
    assert len(ours) == len(theirs) == len(op.outputs), name
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), name
    print(name, dtype, "identical")
"""


def test_each_call_gives_its_adapters_tensors():
    done = subprocess.run([sys.executable, "-c", CALLS_AGREE], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    from pathmdn_verify.repro.calls import CALLS
    assert done.stdout.count("identical") == len(CALLS)
