"""Merge `verify ... --json` results into one error-bound report (markdown table and merged JSON).

    python -m verify.report RUN.json [RUN.json ...] --markdown OUT.md [--json OUT.json]

Runs are read in order; for a check present in several, the last record that ran (not a skip) wins, so a
later rerun of some checks replaces their earlier result.  A recorded failure that the expected-failure
list covers now (for the run's device and profile) is shown as xfail, marked 'listed after the run'.
"""
from __future__ import annotations

import argparse
import json
import sys

from verify.errors import UsageError
from verify.runner import status_counts, write_text_atomic
from verify.xfails import applies, expected_failures


def merge(paths: list[str]) -> tuple[dict, list[dict]]:
    """(environment of the last run, merged check records sorted by id)."""
    by_id: dict[str, dict] = {}
    env = {}
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
            env, checks = doc["environment"], doc["checks"]
        except (OSError, ValueError, KeyError) as exc:
            raise UsageError(f"{path}: not a verify --json result ({exc})") from exc
        for c in checks:
            if c["status"] != "skip" or c["id"] not in by_id:
                by_id[c["id"]] = {**c, "source": path}
    xfails = expected_failures()
    for c in by_id.values():
        entry = xfails.get(c["id"])
        if c["status"] == "fail" and entry and applies(entry, env.get("device"), env.get("profile")):
            c["status"], c["listed_after_run"] = "xfail", True
    return env, [by_id[k] for k in sorted(by_id)]


def _num(x) -> str:
    return "-" if x is None else (f"{x:.2e}" if isinstance(x, float) else str(x))


def markdown(env: dict, records: list[dict]) -> str:
    lines = [f"# verify report: {env.get('device_name')} ({env.get('device')}), profile {env.get('profile')}",
             "",
             f"torch {env.get('torch')}, triton {env.get('triton')}, fla {env.get('fla')}; "
             + ", ".join(f"{n} {s}" for s, n in status_counts(r["status"] for r in records).items()),
             "",
             "| check | status | measured | budget | example | what decided |",
             "|---|---|---|---|---|---|"]
    for r in records:
        d = r.get("details") or {}
        example = d.get("minimal_example") or d.get("worst_example") or d.get("failing_example") or ""
        status = r["status"] + (" (listed after the run)" if r.get("listed_after_run") else "")
        what = r["message"].split("]: ", 1)[-1].split(" [expected failure")[0]
        lines.append(f"| `{r['id']}` | {status} | {_num(r['measured'])} | {_num(r['budget'])} | {example} | "
                     f"{what.replace('|', '/')} |")
    missing = not_measured(records)
    if missing:
        lines += ["", f"Not measured in these runs ({len(missing)}): " + ", ".join(f"`{m}`" for m in missing)]
    return "\n".join(lines) + "\n"


def not_measured(records: list[dict]) -> list[str]:
    """Registered checks of the families present (kernel.fla, ...) with no record that ran."""
    from verify import checks
    from verify.registry import REGISTRY
    checks.load_all()
    ran = {r["id"] for r in records if r["status"] != "skip"}
    families = {".".join(r["id"].split(".")[:2]) for r in records}
    return [cid for cid in REGISTRY if ".".join(cid.split(".")[:2]) in families and cid not in ran]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m verify.report", description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="RUN.json")
    p.add_argument("--markdown", metavar="PATH", required=True)
    p.add_argument("--json", metavar="PATH", help="also write the merged records")
    args = p.parse_args(argv)
    try:
        env, records = merge(args.runs)
    except UsageError as exc:
        print(f"verify.report: error: {exc}", file=sys.stderr)
        return 2
    write_text_atomic(args.markdown, markdown(env, records))
    if args.json:
        write_text_atomic(args.json, json.dumps({"environment": env, "checks": records,
                                                 "summary": status_counts(r["status"] for r in records)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
