"""The `verify` command where Python writes no bytecode and the probe package has none (as in an image installed
without bytecode): its parent, its fork server and its workers keep what they compile in $VERIFY_BYTECODE_DIR, and
the next run reads it back instead of compiling again (pathmdn_verify.platform.bytecode)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

DRIVER = """
import sys
sys.path.insert(0, {here!r})
from pathmdn_verify.platform import bytecode
bytecode.PROBE = "nobytecode"          # the probe stands for torch, which has bytecode in this test's environment
from pathmdn_verify import cli
if __name__ == "__main__":             # the fork server imports this module as __mp_main__
    sys.exit(cli.main(sys.argv[1:]))
"""


def _run(tmp_path, kept):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "VERIFY_BYTECODE_DIR": str(kept)}
    env.pop("PYTHONPYCACHEPREFIX", None)
    return subprocess.run([sys.executable, "-B", "-P", str(tmp_path / "driver.py"), "all", "--id",
                           "kernel.fla.l2norm.fwd.fp32.typical", "--device", "cpu", "--workers", "1", "--no-cache",
                           "--profile", "quick"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def _kept_for(kept: Path, source: str) -> Path:
    """Where Python keeps the bytecode of `source` under the prefix `kept` (as cache_from_source makes it)."""
    head, name = os.path.split(os.path.abspath(source))
    return kept / head.lstrip(os.sep) / f"{name[:-3]}.{sys.implementation.cache_tag}.pyc"


def test_every_process_of_a_run_keeps_its_bytecode_and_the_next_run_reads_it(tmp_path):
    (tmp_path / "nobytecode").mkdir()
    (tmp_path / "nobytecode" / "__init__.py").write_text("x = 1\n")
    (tmp_path / "driver.py").write_text(DRIVER.format(here=str(tmp_path)))
    kept = tmp_path / "kept"
    first = _run(tmp_path, kept)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "bytecode: Python writes none here" in first.stdout and str(kept) in first.stdout, first.stdout[:3000]
    # each process's own: the parent's command module, the fork server's dynamo (its preload; the parent never
    # imports it), a worker's fla (only workers import the kernel package)
    import torch
    from pathmdn_verify.commands import checks
    fla_dir = os.path.dirname(importlib.util.find_spec("fla").origin)
    assert _kept_for(kept, checks.__file__).is_file()
    assert _kept_for(kept, os.path.join(os.path.dirname(torch.__file__), "_dynamo", "__init__.py")).is_file()
    assert any((kept / fla_dir.lstrip(os.sep)).rglob("*.pyc"))
    before = {p: p.stat().st_mtime_ns for p in kept.rglob("*.pyc")}
    second = _run(tmp_path, kept)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    after = {p: p.stat().st_mtime_ns for p in kept.rglob("*.pyc")}
    assert after == before, "the second run compiled again what the first kept"
    assert not list(tmp_path.rglob("__pycache__"))       # nothing beside the sources
