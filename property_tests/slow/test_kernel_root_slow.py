"""--kernel-root accepts any fla checkout (mid-2025 .. HEAD): entry points found by what the tree offers,
fla/__init__.py's model zoo bypassed only when it cannot run, the H200 tile emulation reaching check_shared_mem
wherever the tree defines it (and verified), a tree that cannot be imported one line and exit 2, a package
whose __init__ re-exports run lazily.

The trees are built at test time from the installed fla-core (nothing third-party is committed): each test
copies it (test_kernel_root.tree) and edits the copy the way an older version differs.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import run_cli
from test_kernel_root import tree

PATH_CHECK = "kernel.fla.path_attn.fwd.fp32.beta_uniform"
TILES = ("env.interpreter.tiles.check_shared_mem", "env.interpreter.tiles.path_fwd", "env.interpreter.tiles.fox_fwd")


def edit(path: Path, old: str, new: str, count: int = 1, regex: bool = False) -> None:
    text = path.read_text()
    changed, n = re.subn(old if regex else re.escape(old), new, text, flags=re.MULTILINE)
    assert n >= count, f"{path}: {old!r} found {n} times"
    path.write_text(changed)


def set_version(root: Path, version: str) -> None:
    edit(root / "fla" / "__init__.py", r'^__version__ = "[^"]+"', f'__version__ = "{version}"', regex=True)


def verify(root: Path, *args: str, env: dict | None = None, json_out: Path | None = None):
    """`verify kernels` on the tree `root` from its folder (helpers.run_cli: the tree is imported by the worker)."""
    words = ["kernels", "--device", "cpu", "--profile", "quick", "--workers", "1", "--kernel-root", str(root), *args]
    return run_cli(*words, *(["--json", json_out] if json_out is not None else []), cwd=root,
                   env={**os.environ, **(env or {})})


def statuses(doc) -> dict:
    return {c["id"]: c["status"] for c in doc["checks"]}


def ids(*check_ids: str) -> list[str]:
    return [a for i in check_ids for a in ("--id", i)]


LAZY_PROBE = """
import os, sys
sys.path.insert(0, sys.argv[1])
from pathmdn_verify.kernels.fla_import import install_import_shim, is_lazy
install_import_shim()
import fla.ops.a                                   # a submodule: runs a only
print(os.environ["RAN"], is_lazy(sys.modules["fla.ops"]), fla.__version__)
from fla.ops import f                              # a re-exported name: runs fla.ops/__init__ in full
print(os.environ["RAN"], is_lazy(sys.modules["fla.ops"]), f())
"""


def test_reexporting_packages_run_their_init_on_first_use_of_a_name(tmp_path):
    """fla, fla.ops: importing a submodule runs it alone; the first name the package re-exports runs its
    __init__ (nothing it defines is lost); an __init__ that does more than import and name is run eagerly."""
    ops = tmp_path / "fla" / "ops"
    ops.mkdir(parents=True)
    (tmp_path / "fla" / "__init__.py").write_text('__version__ = "9.9"\nfrom fla.ops import f\n')
    (ops / "__init__.py").write_text("from .a import f\nfrom .b import g\n__all__ = ['f', 'g']\n")
    for name in ("a", "b"):
        (ops / f"{name}.py").write_text(f"import os\nos.environ['RAN'] = os.environ.get('RAN', '') + '{name}'\n"
                                        f"def {'f' if name == 'a' else 'g'}():\n    return '{name}'\n")
    run = lambda: subprocess.run([sys.executable, "-c", LAZY_PROBE, str(tmp_path)], capture_output=True, text=True,
                                 env={**os.environ, "RAN": ""}, check=False)
    r = run()
    assert r.returncode == 0 and r.stdout.split("\n")[:2] == ["a True 9.9", "ab False a"], r.stdout + r.stderr
    # a side effect beyond importing and naming (here: into os.environ) is not deferred
    (ops / "__init__.py").write_text("import os\nos.environ['RAN'] = 'init'\nfrom .a import f\n")
    r = run()
    assert r.returncode == 0 and r.stdout.split("\n")[0].startswith("inita False"), r.stdout + r.stderr


# ------------------------------------------------------------------------------------------------ CLI, trees

def test_old_entry_point_name_and_version(tmp_path):
    """(a) fla 0.3.1: PaTH's entry point is parallel_path_attention (renamed 2025-09); the version is no gate."""
    root = tree(tmp_path)
    for f in [root / "fla" / "ops" / "__init__.py", *(root / "fla" / "ops" / "path_attn").glob("*.py")]:
        text = f.read_text()
        f.write_text(re.sub(r"\bparallel_path_attn\b", "parallel_path_attention", text))
    edit(root / "fla" / "ops" / "path_attn" / "parallel.py", "parallel_path_attention = parallel_path_attention\n", "")
    set_version(root, "0.3.1")
    assert "parallel_path_attn(" not in (root / "fla" / "ops" / "path_attn" / "parallel.py").read_text()
    r, doc = verify(root, *ids(PATH_CHECK), json_out=tmp_path / "r.json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert statuses(doc) == {PATH_CHECK: "pass"}
    assert doc["kernel_package"]["version"] == "0.3.1" and doc["kernel_package"]["path"] == str(root / "fla")
    assert doc["environment"]["interpreter_fidelity"]["device_properties"] == "H200 (max_shared_mem 232448)"


def test_model_zoo_that_cannot_import_is_bypassed(tmp_path):
    """(b) fla before 2026-06: fla/__init__.py imports the model zoo unconditionally (here a missing module
    stands in for transformers): the kernels are still imported, from the tree, and verified."""
    root = tree(tmp_path)
    init = root / "fla" / "__init__.py"
    init.write_text("import transformers_stand_in_missing  # the model zoo's dependency\n" + init.read_text())
    set_version(root, "0.4.0")
    r, doc = verify(root, *ids(PATH_CHECK, TILES[0]), json_out=tmp_path / "r.json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert statuses(doc) == {PATH_CHECK: "pass", TILES[0]: "pass"}
    assert doc["kernel_package"]["version"] == "0.4.0" and doc["kernel_package"]["path"] == str(root / "fla")


def test_syntax_error_is_one_line_naming_the_file(tmp_path):
    """(c) a tree that cannot be imported: exit 2, one line naming the module, the file and the error."""
    root = tree(tmp_path)
    bad = root / "fla" / "ops" / "path_attn" / "parallel.py"
    bad.write_text(bad.read_text() + "\ndef broken(:\n")
    out = tmp_path / "r.json"
    r, doc = verify(root, *ids(PATH_CHECK), json_out=out)
    assert r.returncode == 2 and doc is None and not out.exists(), r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "SyntaxError" in lines[0] and "fla.ops.path_attn" in lines[0], \
        r.stderr


def test_missing_op_package_is_unsupported_not_exit_2(tmp_path):
    """A variant the tree does not offer (no fla.ops.momentum_delta_rule before 0.6.0): skipped, kind unsupported."""
    root = tree(tmp_path)
    shutil.rmtree(root / "fla" / "ops" / "momentum_delta_rule")
    edit(root / "fla" / "ops" / "__init__.py", r"^from \.momentum_delta_rule import \([^)]*\)\n", "", regex=True)
    edit(root / "fla" / "ops" / "__init__.py", r"^\s*'(chunk|fused_recurrent)_momentum_delta_rule',\n", "",
         regex=True, count=0)
    cid = "kernel.fla.mdn_recurrent.fwd.fp32.typical"
    r, doc = verify(root, *ids(cid), json_out=tmp_path / "r.json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (c,) = doc["checks"]
    assert c["status"] == "skip" and c["kind"] == "unsupported" and "momentum_delta_rule" in c["message"], c


def test_tile_emulation_follows_check_shared_mem_into_device_module(tmp_path):
    """(d) fla 0.5.1 .. HEAD define check_shared_mem / get_all_max_shared_mem in fla/utils/_device.py: the
    emulation patches that module (where the function reads its globals), the canaries read back the H200's
    tiles from real launches; with the emulation off they fail, and the results do not claim H200."""
    root = tree(tmp_path)
    utils = root / "fla" / "utils"
    (utils / "hardware.py").rename(utils / "_device.py")
    for f in root.rglob("*.py"):
        text = f.read_text()
        new = text.replace("fla.utils.hardware", "fla.utils._device").replace("from .hardware import",
                                                                                "from ._device import")
        if new != text:
            f.write_text(new)
    set_version(root, "0.5.2")
    assert not (utils / "hardware.py").exists() and "def check_shared_mem" in (utils / "_device.py").read_text()
    r, doc = verify(root, *ids(*TILES), json_out=tmp_path / "on.json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert statuses(doc) == dict.fromkeys(TILES, "pass")
    check = next(c for c in doc["checks"] if c["id"] == TILES[0])
    assert "fla.utils._device.check_shared_mem" in check["message"]
    assert doc["environment"]["interpreter_fidelity"]["device_properties"] == "H200 (max_shared_mem 232448)"

    r, doc = verify(root, *ids(*TILES), env={"VERIFY_EMULATE_H200_TILES": "0"}, json_out=tmp_path / "off.json")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert statuses(doc) == dict.fromkeys(TILES, "fail")
    assert doc["environment"]["interpreter_fidelity"]["device_properties"].startswith("not emulated")
    path = next(c for c in doc["checks"] if c["id"] == TILES[1])
    assert "'BS': 32" in path["message"] and "'BT': 64" in path["message"]
