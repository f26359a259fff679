"""The expected-failure list (verify/run/expected_failures.toml): which entries apply to a run, and what a listed
check's result becomes.

An entry applies to a scope: the implementation's identity (`packages`, required for kernel.* and layer.* checks:
"fla 0.6.0" names every tree whose fla/__init__.py says __version__ 0.6.0, the installed fla-core 0.6.0 and any
--kernel-root checkout or copy of it alike; "fla >=0.6.0" every version in a PEP 440 range, so that a known upstream
defect follows a maintainer's newer tree until it is fixed (then NOT REPRODUCED); "fla 0.6.0@<commit prefix>" one git
checkout; "my_impl" every version of a registered implementation, which an entry names by its check ids'
`kernel.<impl>.` word), optionally narrowed by
`commits` (ranges "<sha>..<sha>", both ends included, either end may be left out: a git checkout applies only
when its HEAD lies in one; a tree without git is judged by its version alone) and `trees` (content hashes, see
:func:`tree_hash`: the tree must be one of them, git or not), the device class (`devices`: "cpu", "cuda" for every GPU, or
"cuda:<device name>") and the profile (`profiles`); a field left out means every value.  A listed check that
fails the known way (a failure kind in `kinds` and, where `ratios` records the spread for the run's
device/profile, a ratio error/budget within `bound`) becomes xfail; one that fails worse stays a failure
"WORSE THAN THE KNOWN DEFECT" with both numbers; one that passes stays a pass.  A pass is news (marked NOT
REPRODUCED, and recapped in the run's summary) only where the entry says the defect reproduces: `reproduces`
(device classes, or "<device class>/<profile>" keys), else the keys of `ratios` whose smallest ratio exceeds 1
(measured failing on every seed); elsewhere in its scope the entry keeps the exit status the same on every
machine, and a pass there (a marginal regime, a smaller profile, another CPU's rounding) is only noted in the
check's message.

The runner calls `apply(check_id, result, scope)` for every result and `describe(scope)` once.  They read the
built-in list (EXPECTED_FAILURES_FILE) and the lists a run adds (`--xfails FILE`), or only the lists it names
(`--xfails-only FILE`): :func:`use`; given a path, that list alone.
"""
from __future__ import annotations

import functools
import hashlib
import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pathmdn_verify.platform import environment
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import DEVICE_LOST, PROFILES, Result

import tomllib

NOT_REPRODUCED = "NOT REPRODUCED"    # marks a listed expected failure that passed
WORSE = "WORSE THAN THE KNOWN DEFECT"
EXPECTED_FAILURES_FILE = Path(__file__).with_name("expected_failures.toml")
FAILURE_KINDS = ("over_budget", "non_finite", "exception", "cuda_fatal", "crashed", "timeout")  # failing KINDS
MIN_FACTOR = 10.0    # the bound is at least ten times the largest ratio measured (one decade)
FIELDS = {"id", "ids", "packages", "devices", "profiles", "kinds", "exception", "ratios", "compare_ratio",
          "reproduces", "regime", "measured", "cause", "commits", "trees", "fault", "signatures"}
COMMIT_RANGE = re.compile(r"(?:[0-9a-f]{7,40})?(?:\.\.(?:[0-9a-f]{7,40})?)?")   # "a..b", "a..", "..b", "a"


def chosen(added=(), only=()) -> tuple[Path, ...]:
    """The lists a run reads: the built-in list and `added` (--xfails FILE...), or `only` (--xfails-only FILE...);
    validated together (a malformed file, or a check listed twice for one device, profile and packages across
    them, is a one-line UsageError)."""
    paths = tuple(Path(p) for p in only) or (EXPECTED_FAILURES_FILE, *(Path(p) for p in added))
    _entries(paths)
    return paths


def lists(scope: "Scope", path: str | Path | None = None) -> tuple[Path, ...]:
    """The lists to read: `path` alone, else the scope's (its run's), else the built-in list."""
    return (Path(path),) if path else scope.lists or (EXPECTED_FAILURES_FILE,)


@dataclass(frozen=True)
class Scope:
    """What an entry must name to apply: the implementations' identities, device class, profile."""
    package: str | None     # fla's: "fla 0.6.0", "fla 0.3.2@1a2b3c4d5e6f"; None when fla is not importable
    device: str             # "cpu" | "cuda:<device name>"
    profile: str
    root: str | None = None   # the kernel package's directory (.../fla): where `commits` and `trees` are looked up
    impls: tuple[tuple[str, str], ...] = ()   # (name, identity "<name> <version>" or "<name>") of the others
    lists: tuple[Path, ...] = ()    # the expected-failure lists of the run (`chosen`); empty: the built-in list

    def identity(self, impl: str | None) -> str | None:
        """The identity an entry's `packages` is matched against for checks of implementation `impl`."""
        return self.package if impl in (None, "fla") else dict(self.impls).get(impl, impl)

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
    reproduces: tuple[str, ...] | None = None   # where a pass is news (None: the ratios keys failing on every seed)
    commits: tuple[str, ...] | None = None      # git checkouts: HEAD within one of these "<sha>..<sha>" ranges
    trees: tuple[str, ...] | None = None        # content hashes (tree_hash) of the trees it applies to
    fault: str | None = None          # kind cuda_fatal: text of the listed fault's CUDA error (not replayed)
    source: str = ""                  # the list it came from (a file name)
    signatures: tuple[str, ...] | None = None   # the failure signatures it covers (fnmatch patterns); None: any
    #                                             failure of its kinds

    def covers(self, failure: dict) -> bool:
        """Whether a failure (failures_of) is this entry's known defect: one of its kinds (an exception of its
        type) and, where it lists signatures, one of them."""
        if failure["kind"] not in self.kinds or (failure["kind"] == "exception" and failure["exception"] != self.exception):
            return False
        return self.signatures is None or any(signature_matches(failure["signature"], s) for s in self.signatures)

    @property
    def impl(self) -> str | None:
        """The implementation its checks belong to (None for checks of no implementation)."""
        return CheckId.parse(self.ids[0]).impl

    def applies(self, scope: Scope) -> bool:
        dev = scope.device
        return ((self.packages is None or (any(package_matches(p, scope.identity(self.impl)) for p in self.packages)
                                           and (self.impl != "fla" or self.tree_matches(scope))))
                and (self.devices is None or dev in self.devices or dev.split(":")[0] in self.devices)
                and (self.profiles is None or scope.profile in self.profiles))

    def tree_matches(self, scope: Scope) -> bool:
        """`commits`: a git checkout's HEAD lies in one of the ranges (a tree without git, the installed package
        included, is judged by its version alone); `trees`: the tree's content hash is one of them."""
        commit = _split(scope.package)[2] if scope.package else None
        if self.commits is not None and commit is not None and (
                scope.root is None or not any(in_range(scope.root, commit, r) for r in self.commits)):
            return False
        if self.trees is not None:
            h = tree_hash(scope.root) if scope.root else None
            if h is None or not any(h.startswith(t) for t in self.trees):
                return False
        return True

    def reproduces_in(self) -> tuple[str, ...]:
        """Where the entry says the defect reproduces: `reproduces` as written, else the "<device>/<profile>"
        keys of `ratios` whose smallest ratio is above 1 (it failed at every recorded seed there)."""
        if self.reproduces is not None:
            return self.reproduces
        return tuple(k for k, r in self.ratios.items() if r["min"] > 1)

    def expected_to_reproduce(self, scope: Scope) -> bool:
        """Whether a pass of a listed check in this scope is news (NOT REPRODUCED) rather than a known margin."""
        dev, cls = scope.device, scope.device.split(":")[0]
        return any(w in (dev, cls, scope.key, f"{cls}/{scope.profile}") for w in self.reproduces_in())

    def bound(self, scope: Scope) -> float | None:
        """The largest ratio that still counts as the known defect: max * max(MIN_FACTOR, max / min) over the
        recorded seeds (on a log scale: the largest ratio plus the measured spread); None when no spread is
        recorded for this device/profile (then only the kind is compared)."""
        r = self.ratios.get(scope.key)
        if r is None or not self.compare_ratio:
            return None
        return r["max"] * max(MIN_FACTOR, r["max"] / r["min"])


def load(path: Path | None = None) -> list[Entry]:
    """Every entry of `path`, else of the built-in list, validated (a bad file is a one-line UsageError naming the
    entry)."""
    return _entries((Path(path),) if path else (EXPECTED_FAILURES_FILE,))


def _entries(paths: tuple[Path, ...]) -> list[Entry]:
    entries, seen = [], {}     # check id -> (devices, profiles, source) of its entries so far (None: every one)
    for path in paths:
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f).get("xfail", [])
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"{path}: {exc}".splitlines()[0]) from None
        if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
            raise UsageError(f"{path}: xfail must be an array of tables ([[xfail]] entries)")
        name = path.name if path == EXPECTED_FAILURES_FILE else str(path)
        for e in raw:
            entry = _entry(e, name)
            for cid in entry.ids:     # a check may be listed again only for other devices, profiles or versions
                for d, p, src in seen.get(cid, []):
                    if _overlap(d, entry.devices) and _overlap(p, entry.profiles) and src[1] == entry.packages:
                        raise UsageError(f"{name}: {cid} is listed twice for the same device, profile and "
                                         f"packages" + (f" (also in {src[0]})" if src[0] != name else ""))
                seen.setdefault(cid, []).append((entry.devices, entry.profiles, (name, entry.packages)))
            entries.append(entry)
    return entries


def _overlap(a, b) -> bool:
    """Whether two scopes (a list of names, or None for every one) share a member."""
    return a is None or b is None or bool(set(a) & set(b))


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
    if "fault" in e and ("cuda_fatal" not in e["kinds"] or not isinstance(e["fault"], str) or not e["fault"]):
        raise UsageError(f"{where}: fault (the text of the listed CUDA error) goes with kind 'cuda_fatal'")
    if any(i.startswith(("kernel.", "layer.")) for i in ids) != ("packages" in e):
        raise UsageError(f"{where}: kernel.* and layer.* entries, and only they, name their kernel packages")
    for p in e.get("profiles", ()):
        if p not in PROFILES:
            raise UsageError(f"{where}: unknown profile {p!r}")
    if "reproduces" in e and not (isinstance(e["reproduces"], list)
                                  and all(isinstance(w, str) and w for w in e["reproduces"])):
        raise UsageError(f"{where}: reproduces must be a list of device classes or \"<device>/<profile>\" keys")
    if "signatures" in e and not (isinstance(e["signatures"], list) and e["signatures"]
                                  and all(isinstance(s, str) and ":" in s for s in e["signatures"])):
        raise UsageError(f"{where}: signatures must be a non-empty list of failure signatures (kind:..., as a run's "
                         "JSON names them in details.failures; * and ? match any part)")
    for f in ("commits", "trees"):
        if f in e and "packages" not in e:
            raise UsageError(f"{where}: {f} narrows packages: give packages too")
        if f in e and not (isinstance(e[f], list) and e[f] and all(isinstance(w, str) and w for w in e[f])):
            raise UsageError(f"{where}: {f} must be a non-empty list of strings")
    for r in e.get("commits", ()):
        if r in ("", "..") or not COMMIT_RANGE.fullmatch(r):
            raise UsageError(f"{where}: commits {r!r} is not \"<sha>..<sha>\" (7 to 40 lowercase hex digits each)")
    for t in e.get("trees", ()):
        if not re.fullmatch(r"sha256:[0-9a-f]{12,64}", t):
            raise UsageError(f"{where}: trees {t!r} is not \"sha256:<12 to 64 hex digits>\" (see `verify xfails`)")
    for p in e.get("packages", ()):
        try:
            _package_spec(p)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: packages {p!r} is not \"<name>\", \"<name> <version>\", \"<name> "
                             "<version>@<commit>\" or \"<name> <PEP 440 range>\" (e.g. \"fla >=0.6.0\")") from None
    for key, r in e.get("ratios", {}).items():
        if set(r) != {"min", "max", "seeds"} or not 0 < r["min"] <= r["max"] < math.inf:
            raise UsageError(f"{where}: ratios.{key} must be {{min, max, seeds}} with 0 < min <= max")
    tup = lambda k: tuple(e[k]) if k in e else None
    return Entry(ids, tuple(e["kinds"]), e["regime"], e["measured"], e["cause"], tup("packages"), tup("devices"),
                 tup("profiles"), e.get("exception"), dict(e.get("ratios", {})), e.get("compare_ratio", True),
                 tup("reproduces"), tup("commits"), tup("trees"), e.get("fault"), name, tup("signatures"))


def expected_failures(path: Path | None = None) -> dict[str, Entry]:
    """check id -> its entry, for every entry of the list whatever its scope."""
    return {cid: e for e in load(path) for cid in e.ids}


def applicable(scope: Scope, path: Path | None = None) -> dict[str, Entry]:
    """check id -> the entry that applies to this scope (of two, the later list's)."""
    paths = lists(scope, path)
    return _applicable(scope, paths, tuple(p.stat().st_mtime_ns if p.exists() else 0 for p in paths))


@functools.lru_cache(maxsize=8)
def _applicable(scope: Scope, paths: tuple[Path, ...], mtimes: tuple[int, ...]) -> dict[str, Entry]:
    return {cid: e for e in _entries(paths) if e.applies(scope) for cid in e.ids}


def describe(scope: Scope, path: Path | None = None) -> str:
    """One line for the run's header: how many entries of which lists apply to which scope, and which packages
    the lists were measured on."""
    paths = lists(scope, path)
    entries = _entries(paths)
    n = len({id(e) for e in applicable(scope, path).values()})
    measured = sorted({p for e in entries for p in e.packages or ()})
    others = [str(p) for p in paths if p != EXPECTED_FAILURES_FILE]
    where = ("" if not others else f" (from {', '.join(others)}"
             + (", and the built-in list)" if EXPECTED_FAILURES_FILE in paths else " only)"))
    return (f"expected failures: {n} of {len(entries)} entries apply to {scope} (measured on "
            f"{', '.join(measured) or 'no kernel package'}){where}")


def scope_json(scope: Scope) -> dict:
    """The run's scope and which lists applied, for the JSON environment (read back by `xfails --update`)."""
    return {"scope": {"package": scope.package, "device": scope.device, "profile": scope.profile,
                      "root": scope.root, "impls": [list(i) for i in scope.impls]},
            "applied": describe(scope), "files": [str(p) for p in lists(scope)]}


def apply(check_id: str, result: Result, scope: Scope, path: Path | None = None) -> Result:
    """A failure of a listed check that fails the known way becomes xfail; one that fails worse stays a
    failure saying so with both numbers.  A listed pass is marked NOT REPRODUCED where the entry says the
    defect reproduces (Entry.expected_to_reproduce); elsewhere its message only notes that the listed defect
    did not show at this device/profile.  Other results are returned unchanged."""
    entry = applicable(scope, path).get(check_id)
    name = entry.source if entry is not None else ""
    if entry is None or result.status not in ("pass", "fail"):
        return result
    if result.status == "pass":
        expected = entry.expected_to_reproduce(scope)
        where = entry.reproduces_in()
        if expected:
            result.message += (f" [expected failure {NOT_REPRODUCED} at {scope.key}, where {name} "
                               f"records it failing" + (f" (ratios {spread(entry.ratios[scope.key])})"
                                                        if scope.key in entry.ratios else "") + "]")
        else:
            result.message += (f" [listed in {name}; not reproduced at {scope.key}, which the entry "
                               "allows: " + (f"it reproduces at {', '.join(where)}]" if where else
                                             "it records no device/profile where it always reproduces]"))
        result.details["expected_failure"] = {"ids": list(entry.ids), "cause": entry.cause, "listed": entry.measured,
                                              "scope": str(scope), "verdict": "not_reproduced", "list": entry.source,
                                              "expected_here": expected}
        return result
    bound = entry.bound(scope)
    known = ", ".join(f"exception {entry.exception}" if k == "exception" else k for k in entry.kinds)
    failures = failures_of(result)
    r = max(f["ratio"] for f in failures)
    listed = {"ids": list(entry.ids), "cause": entry.cause, "listed": entry.measured, "kinds": list(entry.kinds),
              "ratio": r, "bound": bound, "scope": str(scope), "list": entry.source,
              **({"signatures": list(entry.signatures)} if entry.signatures else {})}
    other = [f for f in failures if not entry.covers(f)]
    if other:
        what = "; ".join(f"{f['signature']}" + (f" ratio {f['ratio']:.3g}" if math.isfinite(f["ratio"]) else "")
                         for f in other)
        result.message += (f" [{WORSE}: fails as {what}, which {name} does not list (it records {known}"
                           + (f" for {', '.join(entry.signatures)}" if entry.signatures else "") + ")]")
        result.details["expected_failure"] = {**listed, "verdict": "worse", "not_listed": [f["signature"] for f in other]}
        return result
    over = [f for f in failures if f["kind"] == "over_budget" and bound is not None and f["ratio"] > bound]
    if over:
        result.message += (f" [{WORSE}: ratio {max(f['ratio'] for f in over):.3g} above the bound {bound:.3g} "
                           f"recorded for {scope.key} (ratios {spread(entry.ratios[scope.key])})]")
        result.details["expected_failure"] = {**listed, "verdict": "worse"}
        return result
    within = ("kind only: no ratios recorded for " + scope.key if bound is None and entry.compare_ratio
              else "kind only" if bound is None else f"ratio {r:.3g} within the bound {bound:.3g}")
    result.status = "xfail"
    result.message += f" [expected failure ({within}); listed with {entry.measured}; cause: {entry.cause}]"
    result.details["expected_failure"] = {**listed, "verdict": "known"}
    return result


def signature_matches(signature: str, pattern: str) -> bool:
    """Whether a failure signature matches a listed one, where * and ? match any part (brackets are literal:
    signatures name tensors as o[varlen])."""
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, signature) is not None


def failures_of(result: Result) -> list[dict]:
    """The distinct failures of a failed result, each {signature, kind, exception, ratio}: a searched check's
    (details failures: its signatures, with each one's worst ratio), else the result as one failure."""
    out = []
    for f in result.details.get("failures") or ():
        r = f.get("worst_ratio", f.get("ratio"))
        exc = f["signature"].split(":", 1)[1].split("@")[0] if f["kind"] == "exception" else None
        out.append({"signature": f["signature"], "kind": f["kind"], "exception": exc,
                    "ratio": math.inf if r is None else float(r)})
    if not out:
        kind, exc = failure_kind(result)
        out.append({"signature": kind + (f":{exc}" if exc else ""), "kind": kind, "exception": exc,
                    "ratio": ratio(result)})
    return out


def spread(r: dict) -> str:
    return f"{r['min']:.3g}..{r['max']:.3g} over {r['seeds']} seeds"


def failure_kind(result: Result) -> tuple[str, str | None]:
    """(kind, exception type or None) of a failed result: its own kind when the check set one, else read
    from what it reports (a fatal device error, a kernel that raised, a non-finite or an excessive error)."""
    exc = result.details.get("exception")
    if exc is None:
        # the interpreter wraps a kernel's own exception: InterpreterError: OutOfBoundsAccess(...) names the latter
        m = re.search(r"kernel raised (?:InterpreterError: )?(\w+)", result.message)
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


def _split(package: str) -> tuple[str, str, str | None]:
    """ "fla 0.6.0@1a2b3c" -> ("fla", "0.6.0", "1a2b3c"); the commit is None for a tree without git."""
    name, _, rest = package.partition(" ")
    version, _, commit = rest.partition("@")
    return name, version, commit or None


def _package_spec(listed: str) -> tuple[str, SpecifierSet | None, str | None, str | None]:
    """An entry's package: (name, a version range or None, an exact version or None, a commit prefix or None)."""
    if not isinstance(listed, str) or not re.fullmatch(r"[\w.-]+( \S.*)?", listed):
        raise ValueError(listed)
    name, version, commit = _split(listed)
    if commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise ValueError(listed)
    if version and version[0] in "<>=!~":
        return name, SpecifierSet(version), None, commit
    if version:
        Version(version)
    return name, None, version or None, commit


def package_matches(listed: str, package: str | None) -> bool:
    """Whether an entry's package names the run's identity of an implementation ("fla 0.6.0@1a2b3c4d5e6f",
    "my_impl 1.2", "my_impl"): the same name, and its version equal to the entry's or in its range (a name alone:
    any version), and where the entry names a commit, a checkout at that commit."""
    if package is None:
        return False
    (n, spec, v, c), (pn, pv, pc) = _package_spec(listed), _split(package)
    if n != pn:
        return False
    if spec is not None:
        try:
            if Version(pv) not in spec:
                return False
        except InvalidVersion:
            return False
    elif v is not None and v != pv:
        return False
    return c is None or (pc is not None and (pc.startswith(c) or c.startswith(pc)))


@functools.lru_cache(maxsize=256)
def in_range(root: str, commit: str, span: str) -> bool:
    """Whether `commit` of the git checkout holding `root` lies in `span` ("a..b": a descendant of a, or a itself,
    and an ancestor of b, or b itself; "a": that commit).  A commit git cannot resolve there (a shallow clone,
    another repository) is not in the range."""
    lo, dots, hi = span.partition("..")
    if not dots:
        lo = hi = span

    def git(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", root, *a], capture_output=True, text=True, timeout=30,
                              check=False)
    try:
        return all(git("merge-base", "--is-ancestor", a, b).returncode == 0
                   for a, b in ((lo, commit), (commit, hi)) if a and b)
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=16)
def tree_hash(root: str) -> str | None:
    """ "sha256:<hex>" over the relative path and bytes of every .py file of the kernel package at `root` (its
    fla/ directory), in sorted order: the same for a copy of the same code wherever it lies, git or not."""
    base = Path(root)
    if not base.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts):
        rel = f.relative_to(base).as_posix().encode()
        h.update(len(rel).to_bytes(4, "little") + rel)
        data = f.read_bytes()
        h.update(len(data).to_bytes(8, "little") + data)
    return "sha256:" + h.hexdigest()


def package_of(origin: str | None) -> dict | None:
    """environment.package_at of the __init__.py `origin` (None where there is no such file)."""
    return environment.package_at(Path(origin)) if origin and Path(origin).is_file() else None


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
    pkg = package_of(spec.origin if spec else None)
    return Scope(identity(pkg), device_class(device, name), profile, pkg and pkg["path"])


# ------------------------------------------------- `verify xfails` (the command: verify/commands/xfails.py)


def run_scope(doc: dict) -> Scope:
    """The scope a --json result was run in: as recorded, else from its kernel package and environment."""
    env = doc["environment"]
    recorded = (env.get("expected_failures") or {}).get("scope")
    if recorded:
        return Scope(**{**recorded, "impls": tuple(tuple(i) for i in recorded.get("impls", ()))})
    if not doc.get("kernel_package"):
        raise UsageError("the result names no kernel package (written by an older verify); rerun it")
    return Scope(identity(doc["kernel_package"]), device_class(env.get("device", "cpu"), env.get("device_name")),
                 env.get("profile", "ci"), doc["kernel_package"].get("path"))


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
        changed.append(f"{', '.join(ids)}: {scope.key} ratios {spread(ratios[scope.key])}")
    text = "".join(blocks)
    for e in tomllib.loads(text).get("xfail", []):     # the rewritten file must still load
        _entry(e, path.name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return changed
