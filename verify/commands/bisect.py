"""`verify bisect`: the first commit of a kernel repository at which one failure of the selected checks appears
(or, with --fixed, disappears), found by `git bisect run` in a temporary `git worktree` of the repository.

The checks are kernel checks or layer checks (layer.*: a layer that raises is `exception:<Type>`, one whose output
or parameters are not the literal's `over_budget`; history explains a layer's verdict, it never decides it, so a
fix of a layer is bisected like a kernel's).  A failure is named by its signature (a check's distinct failures,
each with one: `exception:<Type>@<file>:<line>`, `over_budget:<tensor>[<structure>]`, `non_finite:...`; a run's
JSON lists them in details.failures): --signature
PATTERN (* and ? match any part), or the one failure the checks show at --bad (several: choose one).  Each commit
is judged by whether that signature appears, so another failure present at both ends (a defect that was never
fixed in the range) neither stops nor decides the bisect.  An exception's line is not compared (code moves
between commits): its type, file and kind are.

--good and --bad name where the signature is absent and where it appears.  Normally --good is an ancestor of
--bad; with --fixed, --bad is the older one and the result is the first commit where it is gone ("which commit
fixed this"; git bisect terms broken/fixed).  The repository's own working tree, index, branch and bisect
state are never touched; the worktree is removed afterwards, also on Ctrl-C, SIGTERM or an error.

Like for like at every step: the checks run once at --bad (fixed seed; the search is seeded, its example
database off), the example that showed the signature there is replayed first at every later step (an explicit
example of the check's own search, under its own budget), then the seeded search itself.  Each step runs in a
fresh interpreter (`python -m pathmdn_verify.commands.bisect step SPEC`) that imports the kernel package from the
worktree (--import-root for a package in a subfolder) and ignores the expected-failure list.  A step is bad when
the signature appears, good when no check shows it, and skipped (exit 125) when the package cannot be imported,
an entry point is missing, or a check errors or is skipped.

--bundle DIR judges each commit by a repro bundle instead (`verify repro`; pathmdn_verify.repro.run): its repro.py,
run by --python (default: this interpreter; it needs torch and triton, not this toolkit) with the worktree's fla
first on the import path, exits 1 (bad: the defect is present), 0 (good) or anything else (skipped: that fla
cannot make the call, or this machine cannot run it).  The same script a maintainer runs by hand decides.

Exit status: 0 the first bad (fixed) commit was found, 1 only skipped commits were left to decide it,
2 bad input (nothing touched), 130 interrupted (worktree removed).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.run import verdicts
from pathmdn_verify.run.xfail_list import failure_kind, signature_matches
from pathmdn_verify.commands import options

SKIP = 125
GIT = ("git", "-c", "core.hooksPath=/dev/null", "-c", "advice.detachedHead=false")


def add_parser(sub) -> None:
    p = sub.add_parser("bisect", help="find the commit of a kernel repository where selected checks started to "
                                      "fail (or, with --fixed, to pass), by git bisect run in a temporary worktree",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", required=True, metavar="PATH", help="the kernel repository (a clone of fla, the MDN fork)")
    p.add_argument("--good", required=True, metavar="REV", help="a revision where the selected checks pass")
    p.add_argument("--bad", required=True, metavar="REV", help="a revision where they fail")
    p.add_argument("--fixed", action="store_true",
                   help="--bad is the older revision: find the first commit where the failing checks pass")
    options.select(p)
    p.add_argument("--signature", metavar="PATTERN",
                   help="the failure to bisect, by its signature (* and ? match any part; default: the one failure "
                        "the checks show at --bad)")
    p.add_argument("--bundle", metavar="DIR",
                   help="judge each commit by a repro bundle's repro.py (verify repro): exit 1 bad, 0 good, else "
                        "skipped; instead of -k / --id / --signature")
    p.add_argument("--python", metavar="PATH",
                   help="--bundle: the interpreter that runs repro.py (default: this one); it needs torch and triton")
    p.add_argument("--import-root", default=".", metavar="SUBDIR",
                   help="folder of the repository that holds the fla package (default: its top)")
    options.device(p)
    options.profile(p)
    options.seed(p, "seed of every step's search (default 0)")
    options.examples(p)
    options.fp32_dot(p)
    p.add_argument("--cache-dir", metavar="DIR",
                   help="the verdict cache: a step reruns only the checks whose files differ from a commit already "
                        "judged (default: $VERIFY_CACHE_DIR, else beside Triton's cache)")
    p.add_argument("--no-cache", action="store_true", help="run every check at every step")
    options.json_out(p)
    options.debug(p)


# ------------------------------------------------------------------------------------------------ git


def git(repo, *args, check: bool = True) -> str:
    """Run git in repo (hooks off); its stdout stripped, or UsageError with git's first error line."""
    proc = subprocess.run([*GIT, "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode:
        raise UsageError(f"git {' '.join(args)}: {(proc.stderr.strip() or 'failed').splitlines()[0]}")
    return proc.stdout.strip()


def commit_info(repo, sha: str) -> dict:
    """sha, subject, author date and the files the commit changed (against its first parent)."""
    full, subject, date = git(repo, "show", "-s", "--format=%H%x00%s%x00%aI", sha).split("\0")
    files = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "-m", "--first-parent", "--root", full)
    return {"commit": full, "subject": subject, "date": date, "files": sorted(set(files.splitlines()))}


@dataclasses.dataclass
class Plan:
    repo: str
    good: str          # full shas
    bad: str
    ids: list[str]
    dirty: bool


def validate(args) -> Plan:
    """Every bad input as a UsageError before anything is created."""
    from pathmdn_verify.core import results
    results.check_writable(args.json, "--json")
    if not Path(args.repo).is_dir():
        raise UsageError(f"--repo {args.repo}: no such directory")
    probe = subprocess.run([*GIT, "-C", args.repo, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if probe.returncode:
        raise UsageError(f"--repo {args.repo}: not a git repository")
    repo = probe.stdout.strip()
    shas = {}
    for flag, rev in (("--good", args.good), ("--bad", args.bad)):
        out = subprocess.run([*GIT, "-C", repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                             capture_output=True, text=True)
        if out.returncode:
            raise UsageError(f"{flag} {rev}: unknown revision in {repo}")
        shas[flag] = out.stdout.strip()
    good, bad = shas["--good"], shas["--bad"]
    if good == bad:
        raise UsageError(f"--good {args.good} and --bad {args.bad} are the same commit {good[:12]}")
    old, new = (bad, good) if args.fixed else (good, bad)
    if subprocess.run([*GIT, "-C", repo, "merge-base", "--is-ancestor", old, new]).returncode:
        order = "--bad is not an ancestor of --good (with --fixed the failing commit is the older one)" if args.fixed \
            else "--good is not an ancestor of --bad (for a fix, give --fixed)"
        raise UsageError(f"{order}: {old[:12]} .. {new[:12]}")
    if Path(repo, git(repo, "rev-parse", "--git-path", "BISECT_START")).exists():
        raise UsageError(f"--repo {repo}: a git bisect is in progress there; finish it (git bisect reset) first, "
                         "it is left alone")
    if git(repo, "cat-file", "-t", f"{bad}:{_package(args.import_root)}/__init__.py", check=False) != "blob":
        raise UsageError(f"--import-root {args.import_root}: no fla/__init__.py there at --bad {args.bad}")
    if args.examples is not None and args.examples < 1:
        raise UsageError(f"--examples {args.examples}: must be at least 1")
    chosen = _bundle_check(args) if args.bundle else _selected(args)
    dirty = bool(git(repo, "status", "--porcelain", "--untracked-files=no"))
    return Plan(repo, good, bad, chosen, dirty)


def _selected(args) -> list[str]:
    from pathmdn_verify import checks
    from pathmdn_verify.core.registry import select
    if args.python:
        raise UsageError("--python runs a bundle's repro.py: give --bundle DIR")
    if not (args.patterns or args.ids):
        raise UsageError("select the checks to bisect with -k PATTERN or --id ID, or give --bundle DIR")
    checks.load_all()
    chosen = [c.id for c in select(args.patterns, args.ids, ("kernel.", "layer."))]
    if not chosen:
        raise UsageError(f"no kernel or layer check matches {args.patterns or args.ids}; see `verify list -k kernel.`")
    return chosen


def _bundle_check(args) -> list[str]:
    """The check of the bundle (the step runs its repro.py, not the check)."""
    from pathmdn_verify.repro import bundle
    if args.patterns or args.ids or args.signature:
        raise UsageError("--bundle DIR judges each commit by the bundle's repro.py: leave out -k, --id and --signature")
    if args.python and not (Path(args.python).is_file() and os.access(args.python, os.X_OK)):
        raise UsageError(f"--python {args.python}: not an executable file")
    try:
        return [bundle.read(Path(args.bundle))["check"]]
    except (ValueError, OSError) as exc:
        raise UsageError(f"--bundle {args.bundle}: {exc}".splitlines()[0]) from exc


def _package(import_root: str) -> str:
    return str(Path(import_root) / "fla").lstrip("./") or "fla"


# --------------------------------------------------------------------------------- worktree and steps


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def worktree(repo: str, commit: str):
    """A detached worktree of repo at commit in a fresh temporary folder; removed on exit, also when
    interrupted (SIGINT, SIGTERM, SIGHUP all end in the same cleanup; SIGINT's handler is installed too, as
    `verify all` does, since a process started with SIGINT ignored, such as a background job of a script, gets
    no KeyboardInterrupt from Python)."""
    tmp = Path(tempfile.mkdtemp(prefix="verify-bisect-"))
    path = tmp / "worktree"
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
        yield path, tmp
    finally:
        git(repo, "worktree", "remove", "--force", "--force", str(path), check=False)
        git(repo, "worktree", "prune", check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        for s, handler in previous.items():
            signal.signal(s, handler)


def call(cmd: list[str], cwd, echo: bool = True) -> tuple[int, str]:
    """Run cmd in its own process group (so that an interrupt can end it and everything it started);
    stream its output when echo; (exit status, output)."""
    env = dict(os.environ, PYTHONSAFEPATH="1")     # the kernel repository's top folder is not on sys.path
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if echo:
                print(line, end="", flush=True)
        return proc.wait(), "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def step_command(spec: Path) -> list[str]:
    return [sys.executable, "-m", "pathmdn_verify.commands.bisect", "step", str(spec)]


def run_step(wt: Path, sha: str, spec: dict, tmp: Path, name: str) -> dict:
    """Check out sha in the worktree and run one step there; its record (see step())."""
    git(wt, "checkout", "--quiet", "--detach", sha)
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(spec))
    call(step_command(path), wt)
    return load_record(tmp, sha)


def load_record(tmp: Path, sha: str) -> dict | None:
    path = tmp / "steps" / f"{sha}.json"
    return json.loads(path.read_text()) if path.exists() else None


# ----------------------------------------------------------------------------------------------- run


def run(args) -> int:
    plan = validate(args)
    from pathmdn_verify.platform import environment
    device = environment.resolve_device(args.device)
    if plan.dirty:
        print(f"note: {plan.repo} has uncommitted changes; they are left as they are (bisect runs in a separate "
              "worktree on committed revisions)")
    old_term, new_term = ("broken", "fixed") if args.fixed else ("good", "bad")
    spec = {"import_root": args.import_root, "ids": plan.ids, "device": device, "profile": args.profile,
            "seed": args.seed, "examples": args.examples, "fp32_dot": args.fp32_dot, "fixed": args.fixed,
            "replay": {}, "signature": args.signature and _loose(args.signature),
            "bundle": args.bundle and str(Path(args.bundle).resolve()), "python": args.python or sys.executable,
            "cache": None if args.no_cache else str(Path(args.cache_dir) if args.cache_dir else verdicts.default_dir())}
    try:
        with worktree(plan.repo, plan.bad) as (wt, tmp):
            spec["records"] = str(tmp / "steps")
            if args.bundle:
                print(f"verify bisect: {args.bundle}/repro.py at --bad {plan.bad[:12]}")
                _require(run_step(wt, plan.bad, spec, tmp, "bad"), "fails", f"--bad {args.bad}")
            else:
                _draw(wt, plan, spec, tmp, args)
            print(f"verify bisect: checking --good {plan.good[:12]}")
            _require(run_step(wt, plan.good, spec, tmp, "good"), "passes", f"--good {args.good}")
            (tmp / "spec.json").write_text(json.dumps(spec))
            new, old = (plan.good, plan.bad) if args.fixed else (plan.bad, plan.good)
            git(wt, "bisect", "start", f"--term-old={old_term}", f"--term-new={new_term}", new, old)
            status, output = call([*GIT, "bisect", "run", *step_command(tmp / "spec.json")], wt)
            log = git(wt, "bisect", "log")
            git(wt, "bisect", "reset")
            result = summarize(plan, args, log, output, tmp, wt, spec, new_term)
            result["bisect_run_status"] = status
    except KeyboardInterrupt as exc:
        print(f"verify bisect: interrupted ({exc or 'SIGINT'}); the temporary worktree was removed", file=sys.stderr)
        return 130
    report(result, args, old_term, new_term)
    if args.json:
        from pathmdn_verify.core import results
        results.write_text_atomic(args.json, json.dumps(result, indent=2))
    return 0 if result["first"] else 1


def _draw(wt: Path, plan: Plan, spec: dict, tmp: Path, args) -> None:
    """The checks once at --bad: the signature to bisect (the one failure there, unless given), the checks that
    show it and the example of each that showed it, replayed first at every later step."""
    print(f"verify bisect: {len(plan.ids)} check(s) at --bad {plan.bad[:12]} (draws the inputs to replay)")
    at_bad = run_step(wt, plan.bad, spec, tmp, "draw")
    if at_bad is not None and spec["signature"] is None:
        spec["signature"] = _only_signature(at_bad, args.bad)
    _require(at_bad, "fails", f"--bad {args.bad}")
    showing = [r for r in at_bad["checks"] if _showing(r, spec["signature"])]
    spec["ids"] = [r["id"] for r in showing]
    spec["replay"] = {r["id"]: [f["example"] for f in r["failures"] if f["example"] is not None
                                and signature_matches(f["signature"], spec["signature"])][:1]
                      for r in showing}       # a layer check draws no example: it runs as it is
    others = sorted({f["signature"] for r in at_bad["checks"] for f in r["failures"]
                     if not signature_matches(f["signature"], spec["signature"])})
    print(f"verify bisect: signature {spec['signature']} in {len(showing)} check(s) at --bad"
          + (f" (other failures there: {', '.join(others)})" if others else "") + f"; replaying {spec['replay']}")


def _require(record: dict | None, verdict: str, where: str) -> None:
    if record is None:
        raise UsageError(f"{where}: the step wrote no record (see the output above)")
    if record["verdict"] != verdict:
        what = {"fails": "shows the signature", "passes": "does not show the signature",
                "skip": "cannot be run"}[record["verdict"]]
        raise UsageError(f"{where}: the selection {what} there; nothing to bisect ({record['reason']})")


def _only_signature(record: dict, where: str) -> str:
    """The one failure signature of the checks at --bad, or a usage error listing them."""
    found = sorted({f["signature"] for r in record["checks"] for f in r["failures"]})
    if len(found) != 1:
        raise UsageError(f"--bad {where}: " + (f"{len(found)} distinct failures ({'; '.join(found)}): name one with "
                                                "--signature" if found else "no check fails there; nothing to bisect"))
    return _loose(found[0])


def _loose(sig: str) -> str:
    """An exception signature without its line (code moves between commits); others as they are."""
    return re.sub(r"^(exception:[^@]*@.*):\d+$", r"\1:*", sig)


def _showing(record: dict, pattern: str) -> bool:
    return any(signature_matches(f["signature"], pattern) for f in record["failures"])


def summarize(plan: Plan, args, log: str, output: str, tmp: Path, wt: Path, spec: dict, new_term: str) -> dict:
    """The result document: first new-term commit, measurements before and at it, skipped commits, log."""
    found = re.search(rf"^# first {new_term} commit: \[([0-9a-f]+)\]", log, re.M)
    skipped = re.findall(r"^git bisect skip ([0-9a-f]+)", log, re.M)
    steps = len(re.findall(r"^git bisect (?!start|reset)\w+ [0-9a-f]+", log, re.M))
    result = {"repo": plan.repo, "good": plan.good, "bad": plan.bad, "fixed": args.fixed, "signature": spec["signature"],
              "bundle": spec["bundle"],
              "checks": spec["ids"], "replayed": spec["replay"], "profile": args.profile, "seed": args.seed,
              "device": spec["device"], "dirty_tree": plan.dirty, "first": None, "parent": None,
              "candidates": [], "skipped": [], "steps": steps, "log": log}
    result["judged"] = judged(tmp)
    for sha in skipped:
        rec = load_record(tmp, sha)
        result["skipped"].append({**commit_info(plan.repo, sha), "reason": rec["reason"] if rec else "no record"})
    if not found:
        block = output.split("could be any of:", 1)
        result["candidates"] = re.findall(r"^([0-9a-f]{40})$", block[1], re.M) if len(block) > 1 else []
        return result
    first = found.group(1)
    parent = git(plan.repo, "rev-parse", f"{first}^1")
    before = load_record(tmp, parent) or run_step(wt, parent, spec, tmp, "parent")
    result["first"] = {**commit_info(plan.repo, first), "checks": load_record(tmp, first)["checks"]}
    result["parent"] = {**commit_info(plan.repo, parent), "checks": before["checks"] if before else []}
    result["judged"] = judged(tmp)
    return result


def judged(tmp: Path) -> list[dict]:
    """Every commit a step judged, in the order judged: its verdict and how many of its checks ran and how many
    verdicts it reused from the verdict cache (those whose files equal a commit's already judged)."""
    paths = sorted((tmp / "steps").glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    out = []
    for p in paths:
        rec = json.loads(p.read_text())
        reused = sum(r.get("cached", False) for r in rec["checks"])
        out.append({"commit": rec["commit"], "verdict": rec["verdict"], "ran": len(rec["checks"]) - reused,
                    "reused": reused})
    return out


def report(result: dict, args, old_term: str, new_term: str) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console(highlight=False)
    if not console.is_terminal:     # logs and pipes: wide enough that tables keep check ids whole
        console.width = 200
    console.print()
    console.print(f"bundle: {result['bundle']} (repro.py's exit status)" if result["bundle"] else
                  f"signature: {result['signature']}")
    first = result["first"]
    if not first:
        console.print(f"[red]not decided[/]: only skipped commits were left; the first {new_term} commit is one "
                      f"of {', '.join(c[:12] for c in result['candidates']) or '(see the log)'}")
    else:
        console.print(f"first {new_term} commit: [bold]{first['commit'][:12]}[/] {first['subject']} "
                      f"({first['date']})")
        console.print(f"  files: {', '.join(first['files'])}")
        table = Table(title=f"measured / budget, last {old_term} vs first {new_term}")
        for col in ("check", f"{result['parent']['commit'][:12]} ({old_term})", f"{first['commit'][:12]} ({new_term})"):
            table.add_column(col)
        before = {r["id"]: r for r in result["parent"]["checks"]}
        for r in first["checks"]:
            table.add_row(r["id"], _cell(before.get(r["id"])), _cell(r))
        console.print(table)
    console.print(f"{result['steps']} step(s); skipped: "
                  + (", ".join(f"{s['commit'][:12]} ({s['reason']})" for s in result["skipped"]) or "none"))
    console.print("git bisect log:\n" + result["log"], markup=False)


def _cell(rec: dict | None) -> str:
    if rec is None:
        return "-"
    sigs = ", ".join(f["signature"] for f in rec.get("failures", ()))
    if rec["measured"] is None:
        return f"{rec['status']}: {sigs or rec['message'][:60]}"
    return f"{rec['status']} {_g(rec['measured'])} / {_g(rec['budget'])}" + (f" ({sigs})" if sigs else "")


def _g(x) -> str:
    return x if isinstance(x, str) else f"{x:.3g}"


# ------------------------------------------------------------------------------ one step (child process)


def failures(outcome) -> list[dict]:
    """A check's distinct failures, each {signature, example}: a searched check's own, else the check as one."""
    r = outcome.result
    if r.status != "fail":
        return []
    if r.details.get("failures"):
        return [{"signature": f["signature"], "example": f["example"]} for f in r.details["failures"]]
    kind, exc = failure_kind(r)
    return [{"signature": kind + (f":{exc}" if exc else ""), "example": r.details.get("failing_example")}]


def case_from_label(check_id: str, label: str):
    """The case a check printed (pathmdn_verify.core.inputs.case_label), of its op's case type."""
    from pathmdn_verify import ops
    from pathmdn_verify.core.examples import case_from_label as parse
    return parse(type(ops.record(check_id).sample_case), label)


def step(spec_path: str) -> int:
    """Run the spec's checks on the fla package of the current checkout; write its record; return
    0/1/125 in git bisect run's terms."""
    from pathmdn_verify.platform import reads
    spec = json.loads(Path(spec_path).read_text())    # the step's spec keys its verdicts (ids, replay): no input
    reads.install()                   # what the step's checks read from here on: the verdict cache's inputs
    sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    spec["commit"] = sha
    try:
        verdict, reason, records = _bundle_step(spec) if spec.get("bundle") else _step(spec)
    except BaseException as exc:      # anything that stops the checks from running: not a verdict
        verdict, reason, records = "skip", f"{type(exc).__name__}: {exc}".splitlines()[0], []
    out = Path(spec["records"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{sha}.json").write_text(json.dumps({"commit": sha, "verdict": verdict, "reason": reason,
                                                  "checks": records}))
    reused = sum(r.get("cached", False) for r in records)
    print(f"  {sha[:12]}: {verdict} ({reason})" + (f" [{reused} of {len(records)} verdicts reused from the cache]"
                                                   if reused else ""), flush=True)
    if verdict == "skip":
        return SKIP
    return int((verdict == "fails") != spec["fixed"])   # normal: fails -> bad (1); --fixed: passes -> fixed (1)


def _bundle_step(spec: dict) -> tuple[str, str, list[dict]]:
    """The bundle's repro.py on the fla of the current checkout (pathmdn_verify.repro.run)."""
    from pathmdn_verify.repro import run as repro_run
    verdict, reason, record = repro_run.judge(Path(spec["bundle"]), spec["python"],
                                              Path(spec["import_root"]).resolve(), spec["ids"][0])
    return verdict, reason, [record]


def _step(spec: dict) -> tuple[str, str, list[dict]]:
    from pathmdn_verify import ops
    from pathmdn_verify.platform.setup import prepare
    from pathmdn_verify.platform.kernel_root import activate
    from pathmdn_verify.core.registry import REGISTRY, Context

    from pathmdn_verify.run import runner
    from pathmdn_verify.run import load_checks
    load_checks()                                      # the toolkit's modules first, then the kernel package
    # the verdict cache keyed before the tree joins PYTHONPATH: where the tree lies is no input (its files are)
    kept = verdicts.VerdictCache(Path(spec["cache"]), spec["device"]) if spec.get("cache") else None
    root = activate(str(Path(spec["import_root"]).resolve()))   # import path and, for old trees, the import shim
    ctx = Context(device=spec["device"], profile=spec["profile"], seed=spec["seed"], fp32_dot=spec["fp32_dot"],
                  kernel_root=root, examples=spec["examples"])
    prepare(ctx)
    try:
        named = {ops.record(cid).name: ops.record(cid) for cid in spec["ids"] if cid.startswith("kernel.")}
        # the ops' own modules first (a layer check imports its layer when it runs)
        for module in sorted({m for op in named.values() for m in op.package}):
            importlib.import_module(module)
    except BaseException as exc:
        return "skip", f"cannot import: {type(exc).__name__}: {exc}".splitlines()[0], []
    origin = importlib.util.find_spec("fla").origin
    if not origin.startswith(root + os.sep):
        return "skip", f"fla was imported from {origin}, not from {root}", []
    for cid, labels in spec["replay"].items():   # the cases drawn at the reference commit run first
        ops.REPLAY[cid] = [case_from_label(cid, lb) for lb in labels]
    records, read = [], set()           # every file this process read, so far
    for cid in spec["ids"]:
        extra = {"replay": spec["replay"].get(cid, [])}     # what the step runs first decides its verdict too
        rec = kept and kept.get(cid, ctx, Path(root), extra)   # the same files as a commit already judged
        if rec is None:
            try:
                rec = runner.execute(REGISTRY[cid], ctx)        # raw verdicts: no expected-failure list
            except UsageError as exc:                            # an entry point the package does not offer
                return "skip", str(exc), records
            read.update(rec.reads[1])
            if kept is not None:
                kept.put(rec, ctx, spec["commit"], read, Path(root), extra)
        records.append({"id": cid, "status": rec.result.status, "measured": _num(rec.result.measured),
                        "budget": _num(rec.result.budget), "message": rec.result.message,
                        "failures": failures(rec), "cached": "cached" in rec.result.details})
    pattern = spec["signature"]
    showing = [r for r in records if pattern is None and r["failures"] or pattern and _showing(r, pattern)]
    if showing:
        return "fails", "; ".join(f"{r['id']}: {_how(r, pattern)}" for r in showing), records
    unjudged = next((r for r in records if r["status"] not in ("pass", "fail")), None)
    if unjudged is not None:
        return "skip", f"{unjudged['id']}: {unjudged['status']}: {unjudged['message']}".splitlines()[0][:300], records
    others = sorted({f["signature"] for r in records for f in r["failures"]})
    return "passes", "; ".join(f"{r['id']} {_ratio(r)}" for r in records) + (
        f" (other failures: {', '.join(others)})" if others else ""), records


def _num(x):
    import math
    return None if x is None else (x if math.isfinite(x) else str(x))


def _how(r: dict, pattern: str | None) -> str:
    """A record showing the signature, in a few words: the signatures it matched, and measured / budget."""
    sigs = [f["signature"] for f in r["failures"] if pattern is None or signature_matches(f["signature"], pattern)]
    return f"{', '.join(sigs)} {_ratio(r)}"


def _ratio(r: dict) -> str:
    return f"{_g(r['measured'])} / {_g(r['budget'])}" if r["measured"] is not None else ""


if __name__ == "__main__":
    if sys.argv[1:2] != ["step"] or len(sys.argv) != 3:
        sys.exit("usage: python -m pathmdn_verify.commands.bisect step SPEC.json (run by `verify bisect`)")
    sys.exit(step(sys.argv[2]))
