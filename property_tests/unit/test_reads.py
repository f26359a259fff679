"""pathmdn_verify.platform.reads on events fed to its audit hook by hand (installing the hook here would observe the
pytest process for good): a file opened for reading is an input, one opened for writing is not, a module's .pyc
stands for its source, the caches' folders and the machine's pseudo-files are not inputs, each file is reported
once, and the takes are counted so that a reader who missed one knows."""
from __future__ import annotations

import os

import pytest

from pathmdn_verify.platform import reads


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """The module's state as in a new worker, with the hook 'installed' (events come from the test)."""
    for name, value in (("_read", set()), ("_written", set()), ("_reported", set()), ("_normal", {}),
                        ("_installed", [True]), ("_takes", [0])):
        monkeypatch.setattr(reads, name, value)
    for variable in reads.CACHE_FOLDERS:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("VERIFY_CACHE_DIR", str(tmp_path / "verdicts"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    return tmp_path


def _mine(taken, tmp_path) -> list[str]:
    n, files = taken
    return [os.path.relpath(f, os.path.realpath(tmp_path)) for f in files if f.startswith(os.path.realpath(tmp_path))]


def test_reads_are_inputs_writes_and_caches_are_not(fresh):
    (fresh / "pkg" / "__pycache__").mkdir(parents=True)
    (fresh / "pkg" / "mod.py").write_text("X = 1\n")
    for name in ("data.json", "out.txt", "both.txt"):
        (fresh / name).write_text("{}")
    reads._hook("open", (str(fresh / "data.json"), "r", 0))
    reads._hook("open", (str(fresh / "pkg" / "__pycache__" / "mod.cpython-311.pyc"), "r", 0))
    reads._hook("open", (str(fresh / "out.txt"), "w", 0))
    reads._hook("open", (str(fresh / "both.txt"), "r", 0))
    reads._hook("open", (str(fresh / "both.txt"), None, os.O_WRONLY | os.O_TRUNC))    # os.open: by its flags
    reads._hook("open", (str(fresh / "verdicts" / "ab" / "entry.json"), "r", 0))
    reads._hook("open", (str(fresh / "triton" / "kernel.cubin"), "rb", 0))
    reads._hook("open", (str(fresh / "inductor" / "52" / "graph.py"), "r", 0))
    reads._hook("open", ("/proc/self/status", "r", 0))
    reads._hook("open", (3, "r", 0))                                      # a descriptor: no path
    reads._hook("import", ("json", None, [], [], []))                     # other events are not reads
    assert _mine(reads.take(), fresh) == ["data.json", "pkg/mod.py"]
    assert not any(f.startswith("/proc/") for f in reads.take()[1])


def test_each_file_is_reported_once_and_the_takes_are_counted(fresh):
    (fresh / "a.txt").write_text("a")
    (fresh / "b.txt").write_text("b")
    reads._hook("open", (str(fresh / "a.txt"), "r", 0))
    first = reads.take()
    reads._hook("open", (str(fresh / "a.txt"), "r", 0))
    reads._hook("open", (str(fresh / "b.txt"), "rb", 0))
    second = reads.take()
    assert (first[0], _mine(first, fresh)) == (1, ["a.txt"])
    assert (second[0], _mine(second, fresh)) == (2, ["b.txt"])


def test_loaded_modules_are_reads_even_without_an_event(fresh):
    """The fork server imported torch before any hook existed: its modules' files count all the same."""
    import json
    assert os.path.realpath(json.__file__) in reads.take()[1]


def test_not_observed_is_none(monkeypatch):
    monkeypatch.setattr(reads, "_installed", [])
    assert reads.take() is None


def test_a_pyc_in_the_bytecode_folder_stands_for_its_source(fresh, monkeypatch):
    """Where the toolkit keeps bytecode in a folder of its own (sys.pycache_prefix: pathmdn_verify.platform.bytecode),
    a module's .pyc there is its source, as one in __pycache__ is.  The control: the same .pyc name with the prefix
    unset is not a name Python gives bytecode, and stays itself."""
    import importlib.util
    import sys
    (fresh / "pkg").mkdir()
    source = fresh / "pkg" / "mod.py"
    source.write_text("X = 1\n")
    monkeypatch.setattr(sys, "pycache_prefix", str(fresh / "bytecode"))
    pyc = importlib.util.cache_from_source(str(source))
    assert pyc.startswith(str(fresh / "bytecode") + os.sep), pyc
    reads._hook("open", (pyc, "rb", 0))
    assert _mine(reads.take(), fresh) == ["pkg/mod.py"]
    monkeypatch.setattr(reads, "_normal", {})
    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert reads._source(pyc) == os.path.realpath(pyc)
