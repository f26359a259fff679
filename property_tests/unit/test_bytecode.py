"""pathmdn_verify.platform.bytecode: where Python writes no bytecode and the probe package has none, the `verify`
command keeps its bytecode in a folder of its own (sys.pycache_prefix); nowhere else does it change the process.
The process's flags are the test's own (monkeypatch), never the pytest process's."""
from __future__ import annotations

import importlib.util
import py_compile
import sys

import pytest

from pathmdn_verify.platform import bytecode


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A package `nobytecode` without bytecode as the probe, Python writing none, no prefix, nothing enabled."""
    (tmp_path / "nobytecode").mkdir()
    (tmp_path / "nobytecode" / "__init__.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(bytecode, "PROBE", "nobytecode")
    monkeypatch.setattr(bytecode, "_kept", [])
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setenv(bytecode.ENV, str(tmp_path / "kept"))
    return tmp_path


def test_where_every_process_compiles_from_source_the_bytecode_is_kept_in_a_folder(probe):
    assert bytecode.enable() == str(probe / "kept")
    assert (sys.pycache_prefix, sys.dont_write_bytecode) == (str(probe / "kept"), False)
    assert bytecode.kept() and bytecode.enable() == str(probe / "kept")
    assert bytecode.server_environ() == {"PYTHONPYCACHEPREFIX": str(probe / "kept"), "PYTHONDONTWRITEBYTECODE": None}
    assert bytecode.interpreter_flags(["-B", "-P"]) == ["-P"]
    line = bytecode.note()
    assert line.startswith("bytecode: ") and str(probe / "kept") in line and bytecode.ENV in line, line


@pytest.mark.parametrize("situation", ["writes bytecode", "the probe has bytecode", "a prefix of the user's", "off"])
def test_elsewhere_the_process_is_left_as_it_was(probe, monkeypatch, situation):
    """The controls: Python writes bytecode; the package has its .pyc beside it; the user keeps bytecode in a folder
    of theirs (PYTHONPYCACHEPREFIX); $VERIFY_BYTECODE_DIR is off (then the header says how to compile it once)."""
    if situation == "writes bytecode":
        monkeypatch.setattr(sys, "dont_write_bytecode", False)
    elif situation == "the probe has bytecode":
        source = str(probe / "nobytecode" / "__init__.py")
        py_compile.compile(source, cfile=importlib.util.cache_from_source(source))
    elif situation == "a prefix of the user's":
        monkeypatch.setattr(sys, "pycache_prefix", str(probe / "theirs"))
    else:
        monkeypatch.setenv(bytecode.ENV, "off")
    before = (sys.pycache_prefix, sys.dont_write_bytecode)
    assert bytecode.enable() is None
    assert (sys.pycache_prefix, sys.dont_write_bytecode) == before and not bytecode.kept()
    assert bytecode.server_environ() == {} and bytecode.interpreter_flags(["-B"]) == ["-B"]
    line = bytecode.note()
    if situation == "off":
        assert line.startswith("note: ") and f"compileall -q {probe}" in line, line
    else:
        assert line is None
