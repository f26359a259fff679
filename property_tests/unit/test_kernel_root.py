"""--kernel-root, in this process: fla/__init__.py read without running it, keywords an old tree's entry point
takes, the version no gate, the declared import fixes only where their defect is.  The trees run through the
command are test_kernel_root_slow.py's (it takes tree() from here); they are built at test time from the
installed fla-core (nothing third-party is committed)."""
import shutil
from pathlib import Path

import pytest

from pathmdn_verify.core.errors import VariantUnsupported


def _installed_fla() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("fla")
    assert spec is not None and spec.origin, "these tests copy the installed fla-core"
    return Path(spec.origin).parent


def tree(tmp_path: Path, name: str = "tree") -> Path:
    """A copy of the installed fla-core package under tmp_path/name (the --kernel-root): without the layers and
    models that flash-linear-attention installs into the same fla directory, which import the ops these tests
    edit (fla/__init__.py imports them when present)."""
    root = tmp_path / name
    shutil.copytree(_installed_fla(), root / "fla", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for zoo in ("layers", "models"):
        shutil.rmtree(root / "fla" / zoo, ignore_errors=True)
    return root


def test_init_obstacle_reads_fla_init_without_running_it(tmp_path, monkeypatch):
    from pathmdn_verify.kernels import fla_import as kr
    root = tree(tmp_path)
    # fla-core 0.6.0: the model zoo is optional, found through extend_path in any fla directory on sys.path;
    # a tree without one while the installed fla has one would import the installed layers on its ops
    zoo_installed = (_installed_fla() / "layers").is_dir()
    assert ("extends fla's path" in (kr.init_obstacle(root) or "")) == zoo_installed
    if zoo_installed:
        for zoo in ("layers", "models"):
            shutil.copytree(_installed_fla() / zoo, root / "fla" / zoo)
    assert kr.init_obstacle(root) is None                      # its own model zoo: nothing to rescue
    init = root / "fla" / "__init__.py"
    init.write_text(init.read_text() + "\nfrom fla.layers import ABCAttention\n")
    assert ("model zoo" in (kr.init_obstacle(root) or "")) == (not kr._findable("transformers"))
    init.write_text('__version__ = "0.4.0"\ntry:\n    import transformers_stand_in_missing\nexcept ImportError:\n'
                    '    pass\n')
    assert kr.init_obstacle(root) is None                      # a guarded import is the package's own business
    init.write_text('__version__ = "0.4.0"\nimport transformers_stand_in_missing\n')
    assert "transformers_stand_in_missing" in kr.init_obstacle(root)
    assert kr.read_version(init) == "0.4.0"
    shutil.rmtree(root / "fla" / "ops")                        # no kernels: nothing to rescue, the error names it
    assert kr.init_obstacle(root) is None


def test_keywords_only_when_named():
    """A **kwargs is not a parameter: an old tree's swallows unknown keywords silently; the body reading it is."""
    from pathmdn_verify.kernels import fla_ops

    def old(q, k, scale=None, **kwargs):
        return "ran"

    def new(q, k, scale=None, **kwargs):
        chunk_size = kwargs.get('chunk_size', 64)
        return chunk_size

    assert not fla_ops._accepts(old, "chunk_size") and fla_ops._accepts(new, "chunk_size")
    with pytest.raises(VariantUnsupported, match="takes no chunk_size"):
        fla_ops._call(old, 1, 2, chunk_size=16)
    assert fla_ops._call(old, 1, 2, scale=0.5) == "ran"


def test_fla_version_is_not_a_gate():
    from pathmdn_verify.kernels import fla_ops
    assert not hasattr(fla_ops, "SUPPORTED_FLA")
    assert fla_ops.fla_version() == fla_ops.check_fla_version() == "0.6.0"


def test_import_fixes_apply_only_where_their_defect_is(monkeypatch):
    """Each declared import fix (pathmdn_verify.kernels.fla_import.IMPORT_FIXES) changes a module only where its defect is: the
    fork's undefined FLA_CACHE_RESULTS and its unused pandas import (pandas taken as not installed) are fixed; a
    module that defines the name, reads it only inside a function, uses pandas, imports another missing module
    unused, or imports an installed one unused, is left as it is (its own NameError or ImportError stays the
    tree's)."""
    import ast

    from pathmdn_verify.kernels import fla_import
    from pathmdn_verify.kernels.fla_import import IMPORT_FIXES, fix_module
    findable = fla_import._findable
    monkeypatch.setattr(fla_import, "_findable", lambda name: name != "pandas" and findable(name))

    def fixed(source: str):
        tree = ast.parse(source)
        names = fix_module(tree)
        namespace: dict = {}
        exec(compile(tree, "<m>", "exec"), namespace)
        return names, namespace

    names, ns = fixed('"""doc"""\nfrom __future__ import annotations\nSUPPORTS_AUTOTUNE_CACHE = True\n'
                      'autotune_cache_kwargs = {"cache_results": FLA_CACHE_RESULTS} if SUPPORTS_AUTOTUNE_CACHE else {}\n')
    assert names == ["undefined_fla_cache_results"] and ns["autotune_cache_kwargs"] == {"cache_results": True}
    names, ns = fixed("import pandas as pd\nimport os\nx = os.sep\n")
    assert names == ["unused_missing_import"] and "pd" not in ns
    assert set(IMPORT_FIXES) == {"undefined_fla_cache_results", "unused_missing_import"}
    for untouched in ("FLA_CACHE_RESULTS = False\ny = FLA_CACHE_RESULTS\n",        # defined
                      "def f():\n    return FLA_CACHE_RESULTS\n",                  # read only when called
                      "import pandas as pd\nx = pd.DataFrame\n",                   # used: its ImportError stays
                      "import verify_test_missing_module\n",                       # not a declared module
                      "import json as unused\n"):                                   # installed
        tree = ast.parse(untouched)
        assert fix_module(tree) == [] and ast.dump(tree) == ast.dump(ast.parse(untouched)), untouched
    with pytest.raises(ImportError):
        exec(compile("import verify_test_missing_module\n", "<m>", "exec"), {})


def test_the_distribution_is_the_one_whose_file_list_names_the_package(tmp_path):
    """kernel_package's distribution: the metadata beside the package whose RECORD lists fla/__init__.py (another
    distribution there that installed other files of fla is not it); a checkout has none.  Control: the same
    RECORD without that line names no distribution."""
    from pathmdn_verify.platform import environment
    (tmp_path / "fla" / "ops").mkdir(parents=True)
    (tmp_path / "fla" / "__init__.py").write_text("__version__ = '9.9'\n")
    for name, listed in (("fla_core", "fla/__init__.py"), ("flash_linear_attention", "fla/ops/x.py")):
        info = tmp_path / f"{name}-9.9.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 9.9\n")
        (info / "RECORD").write_text(f"{listed},sha256=x,1\n{info.name}/METADATA,,\n")
    assert environment.kernel_package(str(tmp_path))["distribution"] == "fla-core"
    (tmp_path / "fla_core-9.9.dist-info" / "RECORD").write_text("fla/ops/y.py,,\n")
    assert environment.kernel_package(str(tmp_path))["distribution"] is None
