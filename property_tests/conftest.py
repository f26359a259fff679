import importlib
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# The repository's folders are the installed package pathmdn_verify (pyproject.toml maps them into it), never
# top-level packages: with the repository's top on sys.path (`python -m pytest` puts the current directory
# first, and the check workers inherit this process's path) its kernels/ would shadow Hugging Face's `kernels`,
# which transformers imports.
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
os.environ["PYTHONSAFEPATH"] = "1"     # the same for every Python the tests start (python -c ... in this checkout)
# The tiers, in the order their tests start (README.md).  helpers.py, planted_checks.py and every tier's folder are
# importable from any test file, however pytest is started (a split file's parts import what they share from the
# part that keeps its name): test file names are unique across the tiers.
TIERS = ("slow", "cli", "unit")
for folder in (*(HERE / t for t in TIERS), HERE):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


SLOW_BUDGET_S = 180.0     # a slow-tier test's time budget (its call), unless it declares its own: budget(seconds)


@pytest.hookimpl(trylast=True)          # after pytest's tmp_path plugin has set up the session's base folder
def pytest_configure(config):
    """The runs the tests start keep and reuse verdicts in this session's own cache, shared by its xdist workers,
    never a user's (~/.triton/verify-verdicts); a test of the cache names its own folder.  The cache is in the
    session's base temporary folder, which pytest removes after a few sessions (a folder of its own would be left
    behind by every session)."""
    config.addinivalue_line("markers", "budget(seconds): a slow-tier test's time budget, in place of SLOW_BUDGET_S")
    if "VERIFY_CACHE_DIR" not in os.environ:
        base = config._tmp_path_factory.getbasetemp() if hasattr(config, "_tmp_path_factory") else None
        root = Path(base).parent if base is not None and hasattr(config, "workerinput") else base
        os.environ["VERIFY_CACHE_DIR"] = str(Path(root or tempfile.mkdtemp()) / "verify-verdicts")

# CI: deterministic, no example database writes.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def budget_of(item) -> float | None:
    """The seconds a test's call may take: slow-tier tests only (their marker's, else SLOW_BUDGET_S)."""
    if item.path.parent.name != "slow":
        return None
    mark = item.get_closest_marker("budget")
    return float(mark.args[0]) if mark else SLOW_BUDGET_S


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A slow-tier test that passed past its time budget fails, saying by how much (the tier keeps only end-to-end
    paths, each within a budget: README.md)."""
    outcome = yield
    report = outcome.get_result()
    budget = budget_of(item)
    if call.when == "call" and report.passed and budget is not None and call.duration > budget:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: {call.duration:.0f} s, over its time budget of {budget:.0f} s"


def pytest_collection_modifyitems(items):
    """The slow tier first, then cli, then unit, the collection order otherwise: under pytest-xdist the longest
    tests then start at once instead of ending the run alone on one worker."""
    rank = {t: n for n, t in enumerate(TIERS)}
    items.sort(key=lambda item: rank.get(item.path.parent.name, len(TIERS)))


@pytest.fixture(scope="session")
def registry():
    from pathmdn_verify import checks
    from pathmdn_verify.core.registry import REGISTRY
    checks.load_all()
    return REGISTRY


@pytest.fixture
def planted(registry, monkeypatch):
    """The checks of planted_checks.py, registered here and in every check worker (in-process runs and
    `python -m pathmdn_verify` subprocesses alike)."""
    from pathmdn_verify.run import EXTRA_CHECKS_ENV
    here = str(Path(__file__).parent)
    monkeypatch.setenv(EXTRA_CHECKS_ENV, "planted_checks")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
    return importlib.import_module("planted_checks")


def pytest_collection_finish(session):
    """No test module imports triton or fla at collection without the interpreter: compiled-mode kernels defined in
    the pytest process make every later in-process activation of the fidelity layer refuse, in whichever tests share
    the process (pytest-xdist), far from the module that did it.  Import them in a fixture (fidelity first)."""
    found = kernel_packages(sys.modules)
    if found and os.environ.get("TRITON_INTERPRET") != "1":
        raise pytest.UsageError(f"the collection imported {sorted(found)} without the Triton interpreter: a test "
                                "module imports it at its top; import it in a fixture, after "
                                "pathmdn_verify.platform.fidelity.prepare_cpu_kernels()")


@pytest.fixture(autouse=True)
def no_compiled_mode_triton_in_this_process():
    """A test may import triton or fla in the pytest process only with the interpreter on (TRITON_INTERPRET=1,
    set by pathmdn_verify.platform.fidelity): compiled-mode kernels defined here make every later in-process activation of the
    fidelity layer refuse, so the failure would land on another test, depending on the order (pytest-xdist)."""
    import sys
    before = {m for m in ("triton", "fla") if m in sys.modules}
    yield
    late = {m for m in ("triton", "fla") if m in sys.modules} - before
    assert not late or os.environ.get("TRITON_INTERPRET") == "1", \
        f"this test imported {sorted(late)} without the Triton interpreter: do that in a child process"


KERNEL_PACKAGES = ("triton", "fla")      # what the unit tier never imports (README.md)
_reported: set[str] = set()              # the kernel packages a unit test of this process was failed for


def kernel_packages(modules) -> set[str]:
    """The KERNEL_PACKAGES among the names of imported modules (sys.modules)."""
    return {m.split(".")[0] for m in modules} & set(KERNEL_PACKAGES)


def unit_tier_imports(session_items, module_names) -> set[str]:
    """The kernel packages a session of unit tests alone has imported, not yet reported: the unit tier imports
    neither Triton nor fla (at collection, in a fixture or in a test).  Empty for a session with other tiers (their
    tests import them)."""
    if not session_items or any(item.path.parent.name != "unit" for item in session_items):
        return set()
    return kernel_packages(module_names) - _reported


@pytest.fixture(autouse=True)
def the_unit_tier_imports_no_kernel_package(request):
    """Fails the first test after which a process running the unit tier alone holds triton or fla (it, its
    fixtures or its module imported them, or the collection did): such a test belongs in the cli or slow tier."""
    yield
    found = unit_tier_imports(request.session.items, list(sys.modules))
    _reported.update(found)
    assert not found, f"the unit tier imported {sorted(found)} (this test, its fixtures or its module, or the " \
                      "collection): a test that needs Triton or a kernel package belongs in the cli or slow tier"


@pytest.fixture(autouse=True)
def the_unit_tier_starts_no_worker(request):
    """Fails a unit test after which this process runs a fork server other than the one before it (the test, or a
    session it made, started check workers or their server): such a test belongs in the cli or slow tier.  That
    server is stopped, so that the next test is judged on its own; one an earlier test of another tier left is not
    blamed."""
    if request.node.path.parent.name != "unit":
        yield
        return
    from pathmdn_verify.run import runner
    before = runner._fork_server_pid()
    yield
    if runner._fork_server_pid() not in (None, before):
        runner._stop_fork_server()
        pytest.fail("this unit test left a fork server running (it started check workers or their server): such a "
                    "test belongs in the cli or slow tier")


@pytest.fixture(autouse=True)
def results_follow_the_schema(request):
    """Every verify result (JSON with a schema_version) that a test writes under tmp_path must follow its
    schema: verify/core/results.schema.json, or verify/report/report.schema.json for a `verify report`."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is None:
        return
    import json

    import jsonschema

    from pathmdn_verify.core import results
    from pathmdn_verify.report import document
    for path in tmp.rglob("*.json"):
        text = path.read_text()
        if '"schema_version"' not in text:
            continue
        doc = results.parse(text)
        if doc.get("tool") == "verify report":
            jsonschema.validate(doc, json.loads(document.SCHEMA_FILE.read_text()))
        else:
            results.validate(doc)
