"""The pytest plugin (entry point pytest11): a kernel repository runs this toolkit's checks of its implementation
inside its own pytest suite, one pytest item per check.

Inert unless asked: `pytest --verify-impl NAME` (a registered implementation, or module[:attr] / file.py[:attr],
as `verify all --impl`; repeatable) adds the implementation's kernel checks as items named by their check ids.
The first such item runs them all at once in the toolkit's worker processes (a crash costs only its check);
under pytest-xdist each item runs its own check.  A check's verdict becomes the item's: pass; fail or error
(the message and the command that reproduces it); xfail (a listed expected failure); skip (a variant the
implementation does not offer, an interpreter gap).  Each item carries measured, budget, kind and repro as
properties, which pytest's JUnit XML writes.  This module imports only pytest until an item runs.
"""
from __future__ import annotations

from pathlib import Path

import pytest

_OUTCOMES = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("pathmdn-verify", "verify a kernel implementation with pathmdn-verify")
    group.addoption("--verify-impl", action="append", default=[], metavar="SPEC",
                    help="add one item per check of this implementation (a registered name, module[:attr] or "
                         "path/to/file.py[:attr]); repeatable")
    group.addoption("--verify-profile", default="quick", choices=("quick", "ci", "full"),
                    help="the checks' profile (default quick)")
    group.addoption("--verify-device", default=None, choices=("cpu", "cuda"),
                    help="where kernels and oracles run (default: cuda when available, else cpu)")
    group.addoption("--verify-k", default=None, metavar="EXPR", help="only checks whose id matches this -k expression")
    group.addoption("--verify-seed", type=int, default=0, help="the checks' seed (default 0)")
    group.addoption("--verify-workers", default="auto", metavar="N|auto",
                    help="worker processes of the batch run (default auto)")


def pytest_collection_modifyitems(session, config, items):
    specs = config.getoption("verify_impl")
    if not specs:
        return
    from pathmdn_verify.core.errors import UsageError
    from pathmdn_verify.core.ids import CheckId
    from pathmdn_verify.core.registry import select
    from pathmdn_verify.run.session import implementations
    try:
        names = implementations(tuple(specs))
    except UsageError as exc:          # a plug-in that cannot be loaded: pytest's own usage error, one line
        raise pytest.UsageError(str(exc)) from None
    expr = config.getoption("verify_k")
    chosen = [c.id for c in select([expr] if expr else None, None, tuple(f"kernel.{n}." for n in names))
              if CheckId.parse(c.id).impl in names]
    if not chosen:
        raise pytest.UsageError(f"--verify-impl {' '.join(specs)}: no check of {', '.join(names)} matches "
                                f"{expr or 'the selection'}")
    parent = VerifyChecks.from_parent(session, name="pathmdn_verify")
    items.extend(VerifyItem.from_parent(parent, name=cid, check_id=cid) for cid in chosen)
    config.stash[_OUTCOMES] = {}


class VerifyChecks(pytest.Collector):
    """The parent of the check items (they are made at collection, not collected from files)."""

    def collect(self):
        return []


class VerifyFailed(Exception):
    """A check failed or errored: its message and the command that reproduces it."""


class VerifyItem(pytest.Item):
    def __init__(self, *, check_id: str, **kwargs):
        super().__init__(**kwargs)
        self.check_id = check_id

    def runtest(self):
        outcomes = self.config.stash[_OUTCOMES]
        if self.check_id not in outcomes:
            batch = [] if hasattr(self.config, "workerinput") else [
                i.check_id for i in self.session.items if isinstance(i, VerifyItem)]
            outcomes.update(_run(self.config, batch or [self.check_id]))
        c = outcomes.get(self.check_id)
        if c is None:
            raise VerifyFailed(f"{self.check_id}: the run wrote no result for this check")
        for key in ("status", "kind", "measured", "budget", "repro"):
            self.user_properties.append((key, c.get(key)))
        if c["status"] in ("fail", "error"):
            raise VerifyFailed(f"{c['status']} ({c['kind']}): {c['message']}\nreproduce: {c['repro']}")
        if c["status"] == "xfail":
            pytest.xfail(c["message"])
        if c["status"] == "skip":
            pytest.skip(f"{c['kind']}: {c['message']}")

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, VerifyFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return Path("pathmdn_verify"), None, self.check_id


def _run(config, ids: list[str]) -> dict[str, dict]:
    """Run the checks ids as `verify kernels` does (a library Session: its workers, the verdict cache, the
    expected-failure list); check id -> its outcome, as the JSON result holds it.  A usage error of the run (an
    implementation that breaks its op's return contract) ends the session as pytest's usage error, in one line."""
    from pathmdn_verify.core.errors import UsageError
    from pathmdn_verify.core.results import outcome_json
    from pathmdn_verify.run.session import RunOptions, Session
    try:
        result = Session(RunOptions(
            prefixes=("kernel.",), ids=tuple(ids), impls=tuple(config.getoption("verify_impl")),
            device=config.getoption("verify_device"), profile=config.getoption("verify_profile"),
            seeds=(config.getoption("verify_seed"),), workers=config.getoption("verify_workers"))).run()
    except UsageError as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    return {o.id: outcome_json(o) for o in result.outcomes}
