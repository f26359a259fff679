"""The wheel as a user installs it, in a fresh virtual environment beside Hugging Face's `kernels` and the newest
transformers: one import package (pathmdn_verify) and nothing of ours at the top of site-packages; `import
kernels` is still Hugging Face's; a kernel check and a layer check (whose transformers imports `kernels`) run.
And a kernel author's own package (docs/examples/my_kernels: two implementations registered in a few lines that
import only the public API, found through the entry-point group pathmdn_verify) is verified by `verify all
--impl NAME` and by its own pytest run (the plugin's --verify-impl): the clean kernel passes, the planted bug
fails.

The fresh environment takes the test environment's third-party packages (torch, fla, transformers, ...) through
a .pth file, so that only what the test installs lands in its own site-packages: our wheel, Hugging Face's
kernels (from PyPI) and the example package."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "my_kernels"


def _run(cmd, cwd, env, timeout=900):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return r


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv with our wheel, Hugging Face's kernels and the example package installed in it."""
    tmp = tmp_path_factory.mktemp("install")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONSAFEPATH"] = "1"
    r = _run([sys.executable, "-m", "venv", tmp / "venv"], tmp, env)
    assert r.returncode == 0, r.stderr
    py = tmp / "venv" / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).stdout.strip())
    # this environment's package folders (its own and any a .pth of it adds), after the fresh venv's own
    (site / "zz_test_environment.pth").write_text("".join(f"{p}\n" for p in sys.path if p.endswith("-packages")))
    import importlib.metadata as md
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--ignore-installed"]
    for what in ([*pip, "--no-deps", f"kernels=={md.version('kernels')}"],
                 [*pip, "--no-deps", REPO],
                 [*pip, "--no-deps", EXAMPLE]):
        r = _run(what, tmp, env)
        assert r.returncode == 0, f"{what}: {r.stdout[-2000:]}{r.stderr[-3000:]}"
    return py, site, tmp, env


def test_one_import_package_beside_hugging_faces_kernels(venv):
    py, site, tmp, env = venv
    ours = sorted(p.name for p in site.iterdir() if p.name in ("verify", "references", "kernels", "pathmdn_verify"))
    assert ours == ["kernels", "pathmdn_verify"], ours          # kernels/ is Hugging Face's
    r = _run([py, "-c", "import kernels, transformers, pathmdn_verify.kernels.fla_ops; "
                        "print(kernels.__file__, hasattr(kernels, 'get_kernel'), transformers.__version__)"], tmp, env)
    assert r.returncode == 0 and " True " in r.stdout and str(site) in r.stdout, r.stdout + r.stderr
    out = tmp / "run.json"
    r = _run([tmp / "venv" / "bin" / "verify", "all", "--device", "cpu", "--profile", "quick", "--json", out,
              "--id", "kernel.fla.path_attn.fwd.fp32.beta_uniform", "--id", "layer.fla.gdn.default.fp32.forward"], tmp, env)
    doc = json.loads(out.read_text())
    assert r.returncode == 0 and [c["status"] for c in doc["checks"]] == ["pass", "pass"], r.stdout[-3000:]


def test_own_kernel_by_entry_point(venv):
    py, site, tmp, env = venv
    verify = tmp / "venv" / "bin" / "verify"
    out = tmp / "mine.json"
    r = _run([verify, "kernels", "--impl", "my_path", "--impl", "my_path_planted", "--device", "cpu", "--profile",
              "quick", "-k", "fp32.beta_uniform", "--json", out], tmp, env)
    doc = json.loads(out.read_text())
    status = {c["id"]: c for c in doc["checks"]}
    clean = {i: c for i, c in status.items() if i.startswith("kernel.my_path.")}
    planted = {i: c for i, c in status.items() if i.startswith("kernel.my_path_planted.")}
    assert r.returncode == 1 and len(clean) == len(planted) == 3, r.stdout[-3000:]
    for impl in (clean, planted):       # it offers no decode: a skip that says so, never a failure
        decode = impl[next(i for i in impl if ".decode." in i)]
        assert decode["status"] == "skip" and decode["kind"] == "unsupported" and "no decode" in decode["message"]
    assert all(c["status"] == "pass" for i, c in clean.items() if ".decode." not in i), clean
    for pass_ in ("fwd", "bwd"):        # the planted 1% beta bug fails by far more than its budget
        c = planted[f"kernel.my_path_planted.path_attn.{pass_}.fp32.beta_uniform"]
        assert c["status"] == "fail" and c["measured"] > 10 * c["budget"], c
    fwd = planted["kernel.my_path_planted.path_attn.fwd.fp32.beta_uniform"]
    # its repro line reproduces it in a fresh shell: it names the implementation
    assert "--impl my_path_planted" in fwd["repro"]
    again = _run(["sh", "-c", fwd["repro"] + f" --json {tmp / 'again.json'}"], tmp,
                 {**env, "PATH": f"{verify.parent}{os.pathsep}{env['PATH']}"})
    assert again.returncode == 1 and json.loads((tmp / "again.json").read_text())["checks"][0]["status"] == "fail"


def test_own_kernel_in_its_own_pytest_run(venv):
    py, site, tmp, env = venv
    project = tmp / "my_kernels_checkout"
    shutil.copytree(EXAMPLE, project)
    junit = tmp / "junit.xml"
    r = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--verify-impl", "my_path", "--verify-impl",
              "my_path_planted", "--verify-k", "fwd.fp32.beta_uniform or fwd.bf16.beta_uniform", "--junitxml", junit],
             project, env)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert "4 items" in r.stdout or "collected 4" in r.stdout or r.stdout.count("kernel.my_path") >= 1
    text = junit.read_text()
    assert 'tests="4"' in text and 'failures="1"' in text and 'skipped="2"' in text, text[:2000]
    assert 'name="measured"' in text and "verify all --id kernel.my_path_planted.path_attn.fwd.fp32" in text
