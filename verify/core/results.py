"""Machine output: the JSON result document (described by verify/core/results.schema.json), JUnit XML, and
merging shard (or rerun) results into one (the `verify merge` command is verify/commands/merge.py).

The JSON is strict (`allow_nan=False`): a non-finite number is written as null, and the check's `kind`
(non_finite, cuda_fatal, ...) says why its measurement is missing."""
from __future__ import annotations

import datetime
import json
import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import STATUSES, Result

SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("results.schema.json")


@dataclass
class Outcome:
    id: str
    description: str
    result: Result
    seconds: float
    repro: str
    started: float = 0.0     # time.time() when the check started (0: it never started)
    seed: int = 0
    reads: tuple | None = None   # (n, files its worker read since its (n-1)-th check: pathmdn_verify.platform.reads)


def run_compilations(details: list[dict]) -> dict:
    """Over a run's outcomes (their details; a verdict reused from the verdict cache compiled nothing in this run):
    compiled (Triton compilations), distinct (cache keys), duplicates (compiled - distinct: should be 0),
    cache_loads, compile_seconds."""
    details = [d for d in details if "cached" not in d]
    keys = [k for d in details for k in d.get("seconds_in", {}).get("compiled", ())]
    return {"compiled": len(keys), "distinct": len(set(keys)), "duplicates": len(keys) - len(set(keys)),
            "cache_loads": sum(d.get("seconds_in", {}).get("cache_loads", 0) for d in details),
            "compile_seconds": round(sum(d.get("seconds_in", {}).get("compile", 0.0) for d in details), 1)}


def status_counts(statuses) -> dict[str, int]:
    """How many of each status (every status present, zero or not)."""
    statuses = list(statuses)
    return {s: statuses.count(s) for s in STATUSES}


def summary_counts(outcomes: list[Outcome]) -> dict[str, int]:
    return status_counts(o.result.status for o in outcomes)


def check_writable(path: str | None, flag: str) -> None:
    """Fail before any work when an output path cannot be written."""
    if path is None:
        return
    if Path(path).is_dir():
        raise UsageError(f"{flag} {path}: is a directory")
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (Path(path).exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable")


def write_text_atomic(path: str, text: str) -> None:
    """Write through a temporary file, so that a reader never sees a partial result."""
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def finite(x):
    """x with every non-finite float (also inside dicts and lists) replaced by None."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="milliseconds")


def outcome_json(r) -> dict:
    """One check (a Outcome)."""
    res = r.result
    return finite({"id": r.id, "description": r.description, "status": res.status, "kind": res.kind,
                   "measure": res.measure, "measured": res.measured, "budget": res.budget,
                   "message": res.message, "repro": r.repro, "seed": r.seed,
                   "started": iso(r.started) if r.started else None, "seconds": round(r.seconds, 3),
                   "details": res.details})


def document(outcomes: list, *, command: list[str], toolkit: dict, kernel_package: dict | None,
             environment: dict, started: float, wall_seconds: float, interrupted: bool) -> dict:
    checks = [outcome_json(o) for o in outcomes]
    return {"schema_version": SCHEMA_VERSION, "command": command, "toolkit": toolkit,
            "kernel_package": kernel_package, "environment": finite(environment), "started": iso(started),
            "wall_seconds": round(wall_seconds, 3), "interrupted": interrupted, "checks": checks,
            "summary": summary(checks), "compilations": run_compilations([c["details"] for c in checks])}


def summary(checks: list[dict]) -> dict[str, int]:
    return status_counts(c["status"] for c in checks)


def write_json(path: str, doc: dict) -> None:
    write_text_atomic(path, json.dumps(doc, indent=2, allow_nan=False))


INTERRUPTED_JUNIT = "not run: the run was interrupted"


def write_junit(path: str, checks: list[dict], interrupted: bool = False) -> None:
    """JUnit XML of the checks.  Of an interrupted run (the JSON's "interrupted": true), the suite carries the
    property interrupted=true and every check left unstarted is <skipped type="interrupted"
    message="not run: the run was interrupted"/>, distinct from a skip on its merits or one of --time-limit."""
    counts = summary(checks)
    suite = ET.Element("testsuite", name="verify", tests=str(len(checks)), failures=str(counts["fail"]),
                       errors=str(counts["error"]), skipped=str(counts["skip"] + counts["xfail"]))
    cut = [c for c in checks if interrupted and cut_short(c)]
    if interrupted:
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="interrupted", value="true")
        ET.SubElement(props, "property", name="not_run", value=str(len(cut)))
    cut_ids = {id(c) for c in cut}
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=c["id"].rsplit(".", 1)[0], name=c["id"],
                             time=f"{c['seconds']:.3f}")
        st = c["status"]
        if st in ("fail", "error"):
            el = ET.SubElement(case, "failure" if st == "fail" else "error", message=c["message"],
                               type=c["kind"] or st)
            el.text = f"reproduce: {c['repro']}"
        elif id(c) in cut_ids:
            ET.SubElement(case, "skipped", type="interrupted", message=INTERRUPTED_JUNIT)
        elif st in ("skip", "xfail"):
            ET.SubElement(case, "skipped", message=f"{st}: {c['message']}")
    tmp = Path(str(path) + ".tmp")
    ET.ElementTree(suite).write(tmp, encoding="utf-8", xml_declaration=True)
    tmp.replace(path)


def cut_short(check: dict) -> bool:
    """Whether a check of a result was left unstarted because its run was interrupted."""
    return check["kind"] == "not_run" and "interrupted" in (check["message"] or "")


def validate(doc: dict) -> None:
    """jsonschema.ValidationError unless doc follows verify/core/results.schema.json."""
    import jsonschema
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))


def exit_status(checks: list[dict], interrupted: bool = False) -> int:
    """0 nothing failed (expected failures allowed), 1 a check failed or errored or checks were not run
    because a run was interrupted."""
    counts = summary(checks)
    return 1 if counts["fail"] or counts["error"] or interrupted else 0


# ------------------------------------------------------------------------------------------------ merge

SAME_RUN = ("device", "profile", "fp32_dot")


def _non_finite(constant: str):
    raise ValueError(f"non-finite number {constant} (strict JSON has none)")


def parse(text: str) -> dict:
    """A result document, strictly: NaN and Infinity are refused."""
    return json.loads(text, parse_constant=_non_finite)


def load(path: str) -> dict:
    from jsonschema import ValidationError
    try:
        doc = parse(Path(path).read_text())
        validate(doc)
    except (OSError, ValueError, ValidationError) as exc:     # ValidationError is no ValueError (jsonschema 4.26)
        raise UsageError(f"{path}: not a verify --json result ({str(exc).splitlines()[0]})") from exc
    return doc


def merge(paths: list[str], command: list[str], toolkit: dict) -> dict:
    """Shard or rerun results as one document.  For a check in several, the last one that ran and was not a
    skip wins, so a later rerun replaces an earlier result; else the first skip that ran (on its merits:
    unsupported, an interpreter gap); a check not run (kind not_run) only where no result ran it.  The merged
    result is interrupted only if a check is still left unstarted by an interruption (every result that holds
    it was interrupted before it ran).  The results must come from the same kind of run (device, profile, fp32
    dot, kernel package); checks are sorted by id."""
    docs = [load(p) for p in paths]
    first = docs[0]
    for path, doc in zip(paths[1:], docs[1:]):
        diff = [k for k in SAME_RUN if doc["environment"].get(k) != first["environment"].get(k)]
        if doc["kernel_package"] != first["kernel_package"]:
            diff.append("kernel_package")
        if diff:
            raise UsageError(f"{path}: a different run than {paths[0]} ({', '.join(diff)} differ)")
    rank = lambda c: 0 if c["kind"] == "not_run" else 1 if c["status"] == "skip" else 2    # noqa: E731
    by_id: dict[str, dict] = {}
    for doc in docs:
        for c in doc["checks"]:
            if c["id"] not in by_id or rank(c) == 2 or rank(c) > rank(by_id[c["id"]]):
                by_id[c["id"]] = c
    checks = [by_id[k] for k in sorted(by_id)]
    return {"schema_version": SCHEMA_VERSION, "command": command, "toolkit": toolkit,
            "kernel_package": first["kernel_package"],
            "environment": {**first["environment"], "merged_from": list(paths)},
            "started": min(d["started"] for d in docs), "wall_seconds": max(d["wall_seconds"] for d in docs),
            "interrupted": any(cut_short(c) for c in checks), "checks": checks, "summary": summary(checks),
            "compilations": run_compilations([c["details"] for c in checks])}
