"""The expected-failure list (verify/expected_failures.toml): which entries apply to a run, and what a listed
check's result becomes.

An entry applies to a scope: the kernel package identity (`packages`, required for kernel.* checks: "fla 0.6.0",
or "fla 0.6.0@<commit>" for a git checkout), the device class (`devices`: "cpu", "cuda" for every GPU, or
"cuda:<device name>") and the profile (`profiles`); a field left out means every value.  A listed check that
fails the known way (a failure kind in `kinds` and, where `ratios` records the spread for the run's
device/profile, a ratio error/budget within `bound`) becomes xfail; one that fails worse stays a failure
"WORSE THAN THE KNOWN DEFECT" with both numbers; one that passes stays a pass marked NOT REPRODUCED.

The runner calls `judge(check_id, result, scope)` for every result and `describe(scope)` once.
"""
from __future__ import annotations

import functools
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from verify import environment
from verify.errors import UsageError
from verify.registry import DEVICE_LOST, PROFILES, Result

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NOT_REPRODUCED = "NOT REPRODUCED"    # marks a listed expected failure that passed
WORSE = "WORSE THAN THE KNOWN DEFECT"
EXPECTED_FAILURES_FILE = Path(__file__).with_name("expected_failures.toml")
FAILURE_KINDS = ("over_budget", "non_finite", "exception", "cuda_fatal", "crashed", "timeout")  # failing KINDS
MIN_FACTOR = 10.0    # the bound is at least ten times the largest ratio measured (one decade)
FIELDS = {"id", "ids", "packages", "devices", "profiles", "kinds", "exception", "ratios", "compare_ratio",
          "regime", "measured", "cause"}


@dataclass(frozen=True)
class Scope:
    """What an entry must name to apply: kernel package identity, device class, profile."""
    package: str | None     # "fla 0.6.0", "fla 0.3.2@1a2b3c4d5e6f"; None when no kernel package is importable
    device: str             # "cpu" | "cuda:<device name>"
    profile: str

    @property
    def key(self) -> str:
        """Where an entry records its ratios for this scope: "<device class>/<profile>"."""
        return f"{self.device}/{self.profile}"

    def __str__(self) -> str:
        return f"{self.package or 'no kernel package'} on {self.device} at the {self.profile} profile"


@dataclass(frozen=True)
class Entry:
    ids: tuple[str, ...]
    kinds: tuple[str, ...]
    regime: str
    measured: str
    cause: str
    packages: tuple[str, ...] | None = None
    devices: tuple[str, ...] | None = None
    profiles: tuple[str, ...] | None = None
    exception: str | None = None      # the exception type, for kind "exception"
    ratios: dict = field(default_factory=dict)   # "<device>/<profile>" -> {min, max, seeds}
    compare_ratio: bool = True        # False: the check's measured/budget is not an error ratio

    def applies(self, scope: Scope) -> bool:
        dev = scope.device
        return ((self.packages is None or scope.package in self.packages)
                and (self.devices is None or dev in self.devices or dev.split(":")[0] in self.devices)
                and (self.profiles is None or scope.profile in self.profiles))

    def bound(self, scope: Scope) -> float | None:
        """The largest ratio that still counts as the known defect: max * max(MIN_FACTOR, max / min) over the
        recorded seeds (on a log scale: the largest ratio plus the measured spread); None when no spread is
        recorded for this device/profile (then only the kind is compared)."""
        r = self.ratios.get(scope.key)
        if r is None or not self.compare_ratio:
            return None
        return r["max"] * max(MIN_FACTOR, r["max"] / r["min"])


def load(path: Path | None = None) -> list[Entry]:
    """Every entry of the list, validated (a bad file is a one-line UsageError naming the entry)."""
    path = Path(path or EXPECTED_FAILURES_FILE)
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f).get("xfail", [])
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: {exc}") from None
    entries, seen = [], {}     # check id -> the device classes its entries so far name (None: every device)
    for e in raw:
        entry = _entry(e, path.name)
        for cid in entry.ids:     # a check may be listed again only for other, named devices (one finding each)
            if cid in seen and (seen[cid] is None or entry.devices is None or seen[cid] & set(entry.devices)):
                raise UsageError(f"{path.name}: {cid} is listed twice")
            seen[cid] = None if entry.devices is None else seen.get(cid, set()) | set(entry.devices)
        entries.append(entry)
    return entries


def _entry(e: dict, name: str) -> Entry:
    where = f"{name}: entry {e.get('id', e.get('ids', '?'))}"
    if set(e) - FIELDS:
        raise UsageError(f"{where}: unknown field(s) {sorted(set(e) - FIELDS)}")
    if ("id" in e) == ("ids" in e):
        raise UsageError(f"{where}: give exactly one of id and ids")
    missing = {"regime", "measured", "cause", "kinds"} - set(e)
    if missing:
        raise UsageError(f"{where} lacks {sorted(missing)}")
    ids = tuple(e.get("ids", [e.get("id")]))
    bad = [k for k in e["kinds"] if k not in FAILURE_KINDS]
    if bad or not e["kinds"]:
        raise UsageError(f"{where}: kinds {bad or '[]'} not among {FAILURE_KINDS}")
    if ("exception" in e) != ("exception" in e["kinds"]):
        raise UsageError(f"{where}: kind 'exception' and the field exception (its type) go together")
    if any(i.startswith("kernel.") for i in ids) != ("packages" in e):
        raise UsageError(f"{where}: kernel.* entries, and only they, name their kernel packages")
    for p in e.get("profiles", ()):
        if p not in PROFILES:
            raise UsageError(f"{where}: unknown profile {p!r}")
    for key, r in e.get("ratios", {}).items():
        if set(r) != {"min", "max", "seeds"} or not 0 < r["min"] <= r["max"] < math.inf:
            raise UsageError(f"{where}: ratios.{key} must be {{min, max, seeds}} with 0 < min <= max")
    tup = lambda k: tuple(e[k]) if k in e else None
    return Entry(ids, tuple(e["kinds"]), e["regime"], e["measured"], e["cause"], tup("packages"), tup("devices"),
                 tup("profiles"), e.get("exception"), dict(e.get("ratios", {})), e.get("compare_ratio", True))


def expected_failures(path: Path | None = None) -> dict[str, Entry]:
    """check id -> its entry, for every entry of the list whatever its scope."""
    return {cid: e for e in load(path) for cid in e.ids}


def applicable(scope: Scope, path: Path | None = None) -> dict[str, Entry]:
    """check id -> the entry that applies to this scope."""
    path = Path(path or EXPECTED_FAILURES_FILE)
    return _applicable(scope, path, path.stat().st_mtime_ns if path.exists() else 0)


@functools.lru_cache(maxsize=8)
def _applicable(scope: Scope, path: Path, mtime_ns: int) -> dict[str, Entry]:
    return {cid: e for e in load(path) if e.applies(scope) for cid in e.ids}


def describe(scope: Scope, path: Path | None = None) -> str:
    """One line for the run's header: which list applied to which scope."""
    path = Path(path or EXPECTED_FAILURES_FILE)
    n, total = len(applicable(scope, path)), len(expected_failures(path))
    return f"expected failures: {n} of the {total} checks listed in {path.name} apply to {scope}"


def scope_json(scope: Scope) -> dict:
    """The run's scope and which list applied, for the JSON environment (read back by `xfails --update`)."""
    return {"scope": {"package": scope.package, "device": scope.device, "profile": scope.profile},
            "applied": describe(scope)}


def judge(check_id: str, result: Result, scope: Scope, path: Path | None = None) -> Result:
    """A failure of a listed check that fails the known way becomes xfail; one that fails worse stays a
    failure saying so with both numbers; a listed pass is marked NOT REPRODUCED (marginal regimes pass on
    some draws).  Other results are returned unchanged."""
    entry = applicable(scope, path).get(check_id)
    if entry is None or result.status not in ("pass", "fail"):
        return result
    if result.status == "pass":
        result.message += f" [listed in expected_failures.toml but {NOT_REPRODUCED} in this run]"
        return result
    kind, exc_type = failure_kind(result)
    r, bound = ratio(result), entry.bound(scope)
    known = ", ".join(f"exception {entry.exception}" if k == "exception" else k for k in entry.kinds)
    listed = {"ids": list(entry.ids), "cause": entry.cause, "listed": entry.measured, "kinds": list(entry.kinds),
              "ratio": r, "bound": bound, "scope": str(scope)}
    if kind not in entry.kinds or (kind == "exception" and exc_type != entry.exception):
        result.message += (f" [{WORSE}: fails as {kind}{' ' + exc_type if exc_type else ''}, the list records "
                           f"{known}; ratio {r:.3g}]")
        result.details["expected_failure"] = {**listed, "verdict": "worse"}
    elif kind == "over_budget" and bound is not None and r > bound:
        result.message += (f" [{WORSE}: ratio {r:.3g} above the bound {bound:.3g} recorded for {scope.key} "
                           f"(ratios {_spread(entry.ratios[scope.key])})]")
        result.details["expected_failure"] = {**listed, "verdict": "worse"}
    else:
        within = ("kind only: no ratios recorded for " + scope.key if bound is None and entry.compare_ratio
                  else "kind only" if bound is None else f"ratio {r:.3g} within the bound {bound:.3g}")
        result.status = "xfail"
        result.message += f" [expected failure ({within}); listed with {entry.measured}; cause: {entry.cause}]"
        result.details["expected_failure"] = {**listed, "verdict": "known"}
    return result


def _spread(r: dict) -> str:
    return f"{r['min']:.3g}..{r['max']:.3g} over {r['seeds']} seeds"


def failure_kind(result: Result) -> tuple[str, str | None]:
    """(kind, exception type or None) of a failed result: its own kind when the check set one, else read
    from what it reports (a fatal device error, a kernel that raised, a non-finite or an excessive error)."""
    exc = result.details.get("exception")
    if exc is None:
        m = re.search(r"kernel raised (\w+)", result.message)
        exc = m.group(1) if m else None
    if result.kind is not None:
        return result.kind, exc if result.kind == "exception" else None
    if result.details.get(DEVICE_LOST):
        return "cuda_fatal", None
    if exc is not None:
        return "exception", exc
    return ("over_budget" if result.measured is not None and math.isfinite(result.measured) else "non_finite"), None


def ratio(result: Result) -> float:
    """error / budget of the worst example a check saw (details worst_ratio), else measured / budget."""
    worst = result.details.get("worst_ratio")
    if worst is not None:
        return float(worst)
    if result.measured is None or not result.budget:
        return math.inf
    return result.measured / result.budget


def identity(package: dict | None) -> str | None:
    """ "<name> <version>", plus "@<commit, 12 hex>" for a git checkout, of a kernel package described as
    {name, version, git_commit} (what the run's JSON records)."""
    if package is None:
        return None
    commit = package.get("git_commit")
    return f"{package['name']} {package['version']}" + (f"@{commit[:12]}" if commit else "")


def kernel_package(origin: str | None) -> dict | None:
    """{name, version, git_commit} of the package whose __init__.py is `origin`: its __version__, and the
    commit when that file is tracked in a git checkout."""
    if origin is None or not Path(origin).is_file():
        return None
    init = Path(origin)
    m = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", init.read_text(errors="replace"), re.M)
    return {"name": init.parent.name, "version": m.group(1) if m else None,
            "git_commit": environment.git_commit(init)}


def device_class(device: str, device_name: str | None = None) -> str:
    """'cpu', or 'cuda:<device name>' (the name torch reports, e.g. 'NVIDIA H200')."""
    return device if device != "cuda" else f"cuda:{device_name}"


@functools.lru_cache(maxsize=8)
def current_scope(device: str, profile: str) -> Scope:
    """The scope of a run in this process: the fla package that `import fla` would load."""
    import importlib.util
    spec = importlib.util.find_spec("fla")
    name = None
    if device == "cuda":
        import torch
        name = torch.cuda.get_device_name(0)
    return Scope(identity(kernel_package(spec.origin if spec else None)), device_class(device, name), profile)


# ------------------------------------------------------------------------------- `verify xfails`


def run_scope(doc: dict) -> Scope:
    """The scope a --json result was run in: as recorded, else from its kernel package and environment."""
    env = doc["environment"]
    recorded = (env.get("expected_failures") or {}).get("scope")
    if recorded:
        return Scope(**recorded)
    if not doc.get("kernel_package"):
        raise UsageError("the result names no kernel package (written by an older verify); rerun it")
    return Scope(identity(doc["kernel_package"]), device_class(env.get("device", "cpu"), env.get("device_name")),
                 env.get("profile", "ci"))


def measured_ratios(records: list[dict], entries: dict[str, Entry]) -> dict[int, list[float]]:
    """id(entry) -> finite error/budget ratios of its checks' records (every seed of a --repeat run)."""
    out: dict[int, list[float]] = {}
    for rec in records:
        entry = entries.get(rec["id"])
        if entry is None or rec["status"] not in ("pass", "fail", "xfail"):
            continue
        num = lambda x: math.inf if x is None else float(x)
        r = ratio(Result("fail", num(rec.get("measured")), num(rec.get("budget")) if rec.get("budget") else None,
                         details={k: num(v) for k, v in rec.get("details", {}).items() if k == "worst_ratio"}))
        if math.isfinite(r) and r > 0:
            out.setdefault(id(entry), []).append(r)
    return out


def update(run_json: str, path: Path | None = None) -> list[str]:
    """Rewrite the `ratios` line of every entry that applies to the run's scope and whose checks it ran,
    for that scope's key; ids, kinds, prose and every other line stay as they are.  Returns what changed."""
    import json
    path = Path(path or EXPECTED_FAILURES_FILE)
    try:
        doc = json.loads(Path(run_json).read_text())
        scope, records = run_scope(doc), doc["checks"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{run_json}: not a verify --json result ({exc})") from None
    entries = applicable(scope, path)
    found = measured_ratios(records, entries)
    blocks = re.split(r"(?m)^(?=\[\[xfail\]\])", path.read_text())
    changed = []
    for n, block in enumerate(blocks):
        if not block.startswith("[[xfail]]"):
            continue
        ids = _entry(tomllib.loads(block)["xfail"][0], path.name).ids
        entry = entries.get(ids[0])
        rs = found.get(id(entry)) if entry is not None else None
        if not rs or not entry.compare_ratio:
            continue
        ratios = {**entry.ratios, scope.key: {"min": min(rs), "max": max(rs), "seeds": len(rs)}}
        line = "ratios = {" + ", ".join(f'"{k}" = {{min = {r["min"]:.3g}, max = {r["max"]:.3g}, seeds = {r["seeds"]}}}'
                                        for k, r in sorted(ratios.items())) + "}"
        blocks[n] = (re.sub(r"(?m)^ratios = .*$", line, block) if re.search(r"(?m)^ratios = ", block)
                     else re.sub(r"(?m)^regime = ", line + "\nregime = ", block, count=1))
        changed.append(f"{', '.join(ids)}: {scope.key} ratios {_spread(ratios[scope.key])}")
    text = "".join(blocks)
    for e in tomllib.loads(text).get("xfail", []):     # the rewritten file must still load
        _entry(e, path.name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return changed


def add_parser(sub) -> None:
    p = sub.add_parser("xfails", help="list the expected failures that apply here, or update their measured ratios",
                       description="Without --update: the entries of verify/expected_failures.toml that apply to "
                                   "this kernel package, device and profile.  --update RUN.json: rewrite the "
                                   "measured ratios of the entries that RUN.json ran (for a maintainer after an "
                                   "intended change; ids, kinds and causes are never touched).")
    p.add_argument("--update", metavar="RUN.json", help="a `verify ... --json` result (a --repeat 20 run: one "
                                                         "spread over 20 seeds)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available, else cpu")
    p.add_argument("--profile", choices=PROFILES, default="ci")
    p.add_argument("--kernel-root", metavar="PATH", help="the kernel package (fla) in this checkout")
    p.add_argument("--file", metavar="TOML", help="another expected-failure file (default: the package's)")
    p.add_argument("--debug", action="store_true")


def run(args) -> int:
    path = Path(args.file) if args.file else EXPECTED_FAILURES_FILE
    if args.update:
        for line in update(args.update, path) or ["nothing to update: the run measured no listed check of its scope"]:
            print(line)
        return 0
    from verify import environment
    from verify.kernel_root import validate_kernel_root
    device = environment.resolve_device(args.device)
    scope = current_scope(device, args.profile)
    if args.kernel_root:
        init = Path(validate_kernel_root(args.kernel_root)) / "fla" / "__init__.py"
        scope = Scope(identity(kernel_package(str(init))), scope.device, scope.profile)
    print(describe(scope, path))
    for cid, e in applicable(scope, path).items():
        bound = e.bound(scope)
        how = (f"ratio <= {bound:.3g} ({_spread(e.ratios[scope.key])})" if bound is not None
               else "kind only" + ("" if not e.compare_ratio else f" (no ratios for {scope.key})"))
        kinds = ", ".join(f"exception {e.exception}" if k == "exception" else k for k in e.kinds)
        print(f"{cid}  {kinds}; {how}")
    return 0
