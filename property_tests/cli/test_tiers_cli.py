"""The unit tier imports no Triton and no kernel package (property_tests/conftest.py): planted tests, run by pytest
in a child process under a copy of the conftest, fail there when they or their module import triton, once per
package; the same tests in a cli folder pass (the control).  In any tier, a module that imports triton at
collection without the interpreter stops the session (the control: the same module under the interpreter)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
PLANTED = {"test_runtime.py": "def test_clean():\n    pass\n\n\ndef test_imports_triton():\n    import triton  # noqa: F401\n"
                              "\n\ndef test_after():\n    import triton  # noqa: F401\n",
           "test_module.py": "import triton  # noqa: F401\n\n\ndef test_first():\n    pass\n",
           "test_workers.py": "from pathmdn_verify.run.session import RunOptions, Session\n\n\n"
                              "def test_starts_workers():\n    Session(RunOptions(ids=('symbolic.path.cross_block',), "
                              "device='cpu', workers='1', cache=False)).run()\n\n\ndef test_after():\n    pass\n",
           "test_timed.py": "import time\n\nimport pytest\n\n\n@pytest.mark.budget(1)\ndef test_over():\n"
                            "    time.sleep(1.5)\n\n\n@pytest.mark.budget(60)\ndef test_within():\n    time.sleep(1.5)\n"}


def _pytest(tmp_path, tier: str, name: str, interpret: str = "1") -> subprocess.CompletedProcess:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / tier).mkdir(exist_ok=True)
    (tmp_path / tier / name).write_text(PLANTED[name])
    env = {**os.environ, "TRITON_INTERPRET": interpret}     # the conftest's other rule: triton under the interpreter
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
                           str(tmp_path / tier / name)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("name, failed", [("test_runtime.py", "test_imports_triton"), ("test_module.py", "test_first")])
def test_a_unit_test_that_imports_triton_fails(tmp_path, name, failed):
    r = _pytest(tmp_path, "unit", name)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the unit tier imported ['triton']" in r.stdout
    errors = [line for line in r.stdout.splitlines() if line.startswith("ERROR ")]
    assert len(errors) == 1 and failed in errors[0], r.stdout        # once: the later tests are not blamed


def test_a_unit_test_that_starts_workers_fails(tmp_path):
    r = _pytest(tmp_path, "unit", "test_workers.py")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "left a fork server running" in r.stdout
    errors = [line for line in r.stdout.splitlines() if line.startswith("ERROR ")]
    assert len(errors) == 1 and "test_starts_workers" in errors[0], r.stdout      # the next test is not blamed


def test_a_unit_test_after_one_of_another_tier_that_started_workers_is_not_blamed(tmp_path):
    """In one process (the whole suite under pytest-xdist) the fork server a cli test's session left running is
    not the unit test's after it."""
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    for tier, name, text in (("cli", "test_workers.py", PLANTED["test_workers.py"]),
                             ("unit", "test_plain.py", "def test_plain():\n    pass\n")):
        (tmp_path / tier).mkdir(exist_ok=True)
        (tmp_path / tier / name).write_text(text)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
                        str(tmp_path / "cli"), str(tmp_path / "unit")], cwd=tmp_path,
                       env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("name", list(PLANTED))
def test_the_same_tests_in_the_cli_tier_pass(tmp_path, name):
    r = _pytest(tmp_path, "cli", name)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("interpret, code", [("0", 4), ("1", 0)])
def test_a_module_importing_triton_without_the_interpreter_stops_the_collection(tmp_path, interpret, code):
    r = _pytest(tmp_path, "cli", "test_module.py", interpret=interpret)
    assert r.returncode == code, r.stdout + r.stderr
    assert ("the collection imported ['triton'] without the Triton interpreter" in r.stdout + r.stderr) == bool(code)


@pytest.mark.parametrize("tier, failed", [("slow", ["test_over"]), ("cli", [])])
def test_a_slow_test_past_its_time_budget_fails(tmp_path, tier, failed):
    """The slow tier's time budgets (conftest.py: budget(seconds), else SLOW_BUDGET_S); the other tiers have none."""
    r = _pytest(tmp_path, tier, "test_timed.py")
    assert r.returncode == (1 if failed else 0), r.stdout + r.stderr
    assert [n for n in ("test_over", "test_within") if f"FAILED {tier}/test_timed.py::{n}" in r.stdout] == failed
    assert ("over its time budget of 1 s" in r.stdout) == bool(failed), r.stdout
