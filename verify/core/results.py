"""Machine output: the JSON result document (described by verify/results.schema.json), JUnit XML, and
`verify merge` (shards, or reruns, combined into one result).

The JSON is strict (`allow_nan=False`): a non-finite number is written as null, and the check's `kind`
(non_finite, cuda_fatal, ...) says why its measurement is missing."""
from __future__ import annotations

import datetime
import json
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path

from verify.errors import UsageError

SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("results.schema.json")


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


def record_json(r) -> dict:
    """One check (a verify.runner.Record)."""
    res = r.result
    return finite({"id": r.id, "description": r.description, "status": res.status, "kind": res.kind,
                   "measure": res.measure, "measured": res.measured, "budget": res.budget,
                   "message": res.message, "repro": r.repro, "seed": r.seed,
                   "started": iso(r.started) if r.started else None, "seconds": round(r.seconds, 3),
                   "details": res.details})


def document(records: list, *, command: list[str], toolkit: dict, kernel_package: dict | None,
             environment: dict, started: float, wall_seconds: float, interrupted: bool) -> dict:
    checks = [record_json(r) for r in records]
    return {"schema_version": SCHEMA_VERSION, "command": command, "toolkit": toolkit,
            "kernel_package": kernel_package, "environment": finite(environment), "started": iso(started),
            "wall_seconds": round(wall_seconds, 3), "interrupted": interrupted, "checks": checks,
            "summary": summary(checks)}


def summary(checks: list[dict]) -> dict[str, int]:
    from verify.runner import status_counts
    return status_counts(c["status"] for c in checks)


def write_json(path: str, doc: dict) -> None:
    write_text_atomic(path, json.dumps(doc, indent=2, allow_nan=False))


def write_junit(path: str, checks: list[dict]) -> None:
    counts = summary(checks)
    suite = ET.Element("testsuite", name="verify", tests=str(len(checks)), failures=str(counts["fail"]),
                       errors=str(counts["error"]), skipped=str(counts["skip"] + counts["xfail"]))
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=c["id"].rsplit(".", 1)[0], name=c["id"],
                             time=f"{c['seconds']:.3f}")
        st = c["status"]
        if st in ("fail", "error"):
            el = ET.SubElement(case, "failure" if st == "fail" else "error", message=c["message"],
                               type=c["kind"] or st)
            el.text = f"reproduce: {c['repro']}"
        elif st in ("skip", "xfail"):
            ET.SubElement(case, "skipped", message=f"{st}: {c['message']}")
    tmp = Path(str(path) + ".tmp")
    ET.ElementTree(suite).write(tmp, encoding="utf-8", xml_declaration=True)
    tmp.replace(path)


def validate(doc: dict) -> None:
    """jsonschema.ValidationError unless doc follows verify/results.schema.json."""
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
    try:
        doc = parse(Path(path).read_text())
        validate(doc)
    except (OSError, ValueError) as exc:     # jsonschema.ValidationError is a ValueError too
        raise UsageError(f"{path}: not a verify --json result ({str(exc).splitlines()[0]})") from exc
    return doc


def merge(paths: list[str], command: list[str]) -> dict:
    """Shard or rerun results as one document.  For a check in several, the last record that ran (not a
    skip) wins, so a later rerun replaces an earlier result.  The results must come from the same kind of
    run (device, profile, fp32 dot, kernel package); checks are sorted by id."""
    docs = [load(p) for p in paths]
    first = docs[0]
    for path, doc in zip(paths[1:], docs[1:]):
        diff = [k for k in SAME_RUN if doc["environment"].get(k) != first["environment"].get(k)]
        if doc["kernel_package"] != first["kernel_package"]:
            diff.append("kernel_package")
        if diff:
            raise UsageError(f"{path}: a different run than {paths[0]} ({', '.join(diff)} differ)")
    by_id: dict[str, dict] = {}
    for doc in docs:
        for c in doc["checks"]:
            if c["status"] != "skip" or c["id"] not in by_id:
                by_id[c["id"]] = c
    checks = [by_id[k] for k in sorted(by_id)]
    from verify.environment import toolkit
    return {"schema_version": SCHEMA_VERSION, "command": command, "toolkit": toolkit(),
            "kernel_package": first["kernel_package"],
            "environment": {**first["environment"], "merged_from": list(paths)},
            "started": min(d["started"] for d in docs), "wall_seconds": max(d["wall_seconds"] for d in docs),
            "interrupted": any(d["interrupted"] for d in docs), "checks": checks, "summary": summary(checks)}


def add_merge_parser(sub) -> None:
    p = sub.add_parser("merge", help="combine --json results (shards, reruns) into one JSON / JUnit result",
                       description="Combine the --json results of `verify ... --shard K/N` runs (or reruns: the "
                                   "last record that ran wins) into one result; exit status as for a run.")
    p.add_argument("runs", nargs="+", metavar="RUN.json")
    p.add_argument("--json", metavar="PATH", help="write the merged result")
    p.add_argument("--junit", metavar="PATH", help="write the merged result as JUnit XML")
    p.add_argument("--debug", action="store_true")


def run_merge(args, command: list[str]) -> int:
    check_writable(args.json, "--json")
    check_writable(args.junit, "--junit")
    doc = merge(args.runs, command)
    if args.json:
        write_json(args.json, doc)
    if args.junit:
        write_junit(args.junit, doc["checks"])
    counts = ", ".join(f"{n} {s}" for s, n in doc["summary"].items())
    print(f"verify merge: {len(doc['checks'])} checks from {len(args.runs)} results: {counts}"
          + (" (interrupted: some checks were not run)" if doc["interrupted"] else ""))
    return exit_status(doc["checks"], doc["interrupted"])
