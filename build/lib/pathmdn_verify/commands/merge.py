"""`verify merge`: the --json results of shards (`verify ... --shard K/N`) or reruns combined into one JSON /
JUnit result (pathmdn_verify.core.results.merge: the last record that ran wins); exit status as for a run."""
from __future__ import annotations

from pathmdn_verify.core import results


def add_parser(sub) -> None:
    p = sub.add_parser("merge", help="combine --json results (shards, reruns) into one JSON / JUnit result",
                       description="Combine the --json results of `verify ... --shard K/N` runs (or reruns: the "
                                   "last record that ran wins) into one result; exit status as for a run.")
    p.add_argument("runs", nargs="+", metavar="RUN.json",
                   help="a result written by `verify ... --json` (shards of one run, or reruns of the same kind "
                        "of run: same device, profile, fp32 dot and kernel package); later files win")
    p.add_argument("--json", metavar="PATH", help="write the merged result")
    p.add_argument("--junit", metavar="PATH", help="write the merged result as JUnit XML")
    p.add_argument("--debug", action="store_true", help="print a traceback on a usage error")


def run(args, command: list[str]) -> int:
    results.check_writable(args.json, "--json")
    results.check_writable(args.junit, "--junit")
    from pathmdn_verify.platform.environment import toolkit
    doc = results.merge(args.runs, command, toolkit())
    if args.json:
        results.write_json(args.json, doc)
    if args.junit:
        results.write_junit(args.junit, doc["checks"], interrupted=doc["interrupted"])
    counts = ", ".join(f"{n} {s}" for s, n in doc["summary"].items())
    print(f"verify merge: {len(doc['checks'])} checks from {len(args.runs)} results: {counts}"
          + (" (interrupted: some checks were not run)" if doc["interrupted"] else ""))
    return results.exit_status(doc["checks"], doc["interrupted"])
