"""The expected-failure list (verify/expected_failures.toml): which listed findings apply to a run, and what a
listed check's result becomes.  The runner calls only `expected_failures` and `applies` (and, once entries are
ratcheted, the function that turns a result into xfail or "worse than the known defect")."""
from __future__ import annotations

import sys
from pathlib import Path

from verify.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NOT_REPRODUCED = "NOT REPRODUCED"    # marks a listed expected failure that passed
EXPECTED_FAILURES_FILE = Path(__file__).with_name("expected_failures.toml")


def expected_failures(path: Path = EXPECTED_FAILURES_FILE) -> dict[str, dict]:
    """id -> entry (regime, measured, cause) from the one expected-failure file; an entry names one
    check (`id`) or, for one finding that fails several checks, a list (`ids`)."""
    with open(path, "rb") as f:
        entries = tomllib.load(f).get("xfail", [])
    out = {}
    for e in entries:
        missing = {"regime", "measured", "cause"} - set(e) | ({"id"} if "id" not in e and "ids" not in e else set())
        if missing:
            raise UsageError(f"{path.name}: entry {e.get('id', e.get('ids', '?'))} lacks {sorted(missing)}")
        for cid in e.get("ids", [e.get("id")]):     # `ids`: one finding that fails several checks
            if cid in out:
                raise UsageError(f"{path.name}: {cid} is listed twice")
            out[cid] = e
    return out


def applies(entry: dict, device: str, profile: str) -> bool:
    """Whether an expected-failure entry covers a run (its `devices` / `profiles` limit it, if given)."""
    return device in entry.get("devices", [device]) and profile in entry.get("profiles", [profile])
