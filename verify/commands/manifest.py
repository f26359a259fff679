"""`verify manifest`: the (id, status, kind) of every check of a run, written to a manifest file and compared with
one, so that a change in any check's status or kind (a new failure, an expected failure that passes, a check
added, removed or skipped) stops CI even when the exit status stays 0.

A manifest is a text file: comment lines (#), the run's scope (`package = fla 0.6.0`, `device = cpu`,
`profile = quick`), then one line per check, sorted by id: `<id> <status>` and, where the check has one,
` <kind>`.  Written from several runs of one scope (e.g. one GPU model on different days), a check whose verdict
differed between them has each one seen, `<id> xfail cuda_fatal | pass`: a defect whose outcome depends on the
memory it reads (fla's listed out-of-bounds reads); a run matches such a line with any of them.  `check` exits 1
and prints each difference, 0 when there is none; 2 for a file that is not a result or a manifest.
"""
from __future__ import annotations

from pathlib import Path

from pathmdn_verify.core import results
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.run.xfail_list import device_class, identity

SCOPE = ("package", "device", "profile")
HEADER = ("# verify manifest: the id, status and kind of every check of one run (a | b: verdicts seen in different\n"
          "# runs of its scope).  Compare a run with it:\n"
          "#   verify manifest check RUN.json THIS_FILE   (exit 1 on any difference)\n"
          "# and after an intended change rewrite it: verify manifest write RUN.json [RUN.json ...] THIS_FILE\n")
STATUSES = ("pass", "fail", "xfail", "skip", "error")


def add_parser(sub) -> None:
    p = sub.add_parser("manifest", help="write or check the (id, status, kind) of every check of a run",
                       description="write: record the id, status and kind of every check of RUN.json, and its "
                                   "scope (kernel package, device class, profile), in MANIFEST.  check: compare "
                                   "RUN.json with MANIFEST, print each difference, exit 1 if there is one.")
    p.add_argument("action", choices=("check", "write"),
                   help="check: compare RUN.json with MANIFEST (exit 1 on a difference); write: (re)write MANIFEST")
    p.add_argument("run_json", metavar="RUN.json", nargs="+",
                   help="a result written by `verify ... --json`; write: one or more runs of one scope (each verdict "
                        "seen is kept), check: one")
    p.add_argument("manifest", metavar="MANIFEST", help="the manifest file")
    p.add_argument("--all-cached", action="store_true",
                   help="check: also require that RUN.json reused every verdict from the verdict cache (an unchanged "
                        "rerun: the cache's own end-to-end test in CI); each check that ran again is a difference")
    p.add_argument("--debug", action="store_true", help="print a traceback on a usage error")


def run(args) -> int:
    if args.action == "write":
        scope, checks = merged(args.run_json)
        Path(args.manifest).write_text(render(scope, checks))
        print(f"verify manifest: {len(checks)} checks of {', '.join(args.run_json)} written to {args.manifest}")
        return 0
    if len(args.run_json) != 1:
        raise UsageError(f"manifest check compares one run, not {len(args.run_json)}")
    run_json = args.run_json[0]
    scope, checks = of_run(run_json)
    found = differences(read(args.manifest), (scope, checks))
    if args.all_cached:
        found += [f"{cid}: ran again, not reused from the verdict cache" for cid in ran(run_json)]
    for line in found:
        print(line)
    print(f"verify manifest: {run_json} " + (f"differs from {args.manifest}: {len(found)} difference(s)"
                                             if found else f"matches {args.manifest} ({len(checks)} checks)"))
    return 1 if found else 0


def merged(paths: list[str]) -> tuple[dict, dict]:
    """(scope, id -> the verdicts seen, joined by " | ") of complete runs of one scope and one set of checks."""
    scope, seen = None, {}
    for path in paths:
        s, checks = of_run(path)
        if "interrupted" in s:
            raise UsageError(f"{path}: an interrupted run (some checks were not run); write a complete one")
        if scope is not None and (s != scope or checks.keys() != seen.keys()):
            raise UsageError(f"{path}: not a run of {paths[0]}'s scope and checks; a manifest holds one selection")
        scope = s
        for cid, verdict in checks.items():
            seen.setdefault(cid, set()).add(verdict)
    return scope, {cid: " | ".join(sorted(v)) for cid, v in seen.items()}


def of_run(path: str) -> tuple[dict, dict]:
    """(scope, id -> "status[ kind]") of a --json result."""
    doc = results.load(path)
    env = doc["environment"]
    checks: dict[str, str] = {}
    for c in doc["checks"]:
        if c["id"] in checks:
            raise UsageError(f"{path}: {c['id']} ran more than once (a --repeat run); a manifest holds one run")
        checks[c["id"]] = " ".join(x for x in (c["status"], c["kind"]) if x)
    scope = {"package": identity(doc["kernel_package"]) or "none",
             "device": device_class(env["device"], env.get("device_name")), "profile": env["profile"]}
    if doc["interrupted"]:
        scope["interrupted"] = "true"
    return scope, checks


def ran(path: str) -> list[str]:
    """The checks of a --json result whose verdict was computed in that run (not reused from the verdict cache)."""
    return [c["id"] for c in results.load(path)["checks"] if "cached" not in c["details"]]


def render(scope: dict, checks: dict) -> str:
    return HEADER + "".join(f"{k} = {v}\n" for k, v in scope.items()) + "".join(
        f"{cid} {checks[cid]}\n" for cid in sorted(checks))


def read(path: str) -> tuple[dict, dict]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the manifest ({exc.strerror})") from None
    scope, checks = {}, {}
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        key, eq, value = line.partition(" = ")
        words = line.split()
        if eq and key in SCOPE:
            scope[key] = value.strip()
        elif len(words) > 1 and all(len(v) in (1, 2) and v[0] in STATUSES
                                    for v in (a.split() for a in " ".join(words[1:]).split(" | "))):
            checks[words[0]] = " ".join(words[1:])
        else:
            raise UsageError(f"{path}:{n}: not a manifest line: {line!r}")
    if set(scope) != set(SCOPE):
        raise UsageError(f"{path}: not a manifest (it names no {', '.join(k for k in SCOPE if k not in scope)})")
    return scope, checks


def differences(manifest: tuple[dict, dict], run: tuple[dict, dict]) -> list[str]:
    """One line per difference: the scope, then each check whose status or kind differs, missing or new."""
    (want_scope, want), (got_scope, got) = manifest, run
    out = [f"{k}: manifest {want_scope.get(k, '-')}, run {got_scope.get(k, '-')}"
           for k in (*SCOPE, "interrupted") if want_scope.get(k) != got_scope.get(k)]
    for cid in sorted(want.keys() | got.keys()):
        if cid not in got:
            out.append(f"{cid}: manifest {want[cid]}, not in the run")
        elif cid not in want:
            out.append(f"{cid}: not in the manifest, run {got[cid]}")
        elif got[cid] not in want[cid].split(" | "):
            out.append(f"{cid}: manifest {want[cid]}, run {got[cid]}")
    return out
