"""`verify xfails`: the entries of verify/run/expected_failures.toml that apply to this kernel package, device
and profile, or (--update RUN.json) their measured ratios rewritten from a run (the list's logic is
verify/run/xfail_list.py)."""
from __future__ import annotations

from pathlib import Path

from pathmdn_verify.commands import options
from pathmdn_verify.run.xfail_list import (
    EXPECTED_FAILURES_FILE,
    Scope,
    applicable,
    current_scope,
    describe,
    identity,
    load,
    package_of,
    spread,
    tree_hash,
    update,
)


def add_parser(sub) -> None:
    p = sub.add_parser("xfails", help="list the expected failures that apply here, or update their measured ratios",
                       description="Without --update: the entries of verify/run/expected_failures.toml that apply to "
                                   "this kernel package, device and profile.  --update RUN.json: rewrite the "
                                   "measured ratios of the entries that RUN.json ran (for a maintainer after an "
                                   "intended change; ids, kinds and causes are never touched).")
    p.add_argument("--update", metavar="RUN.json", help="a `verify ... --json` result (a --repeat 20 run: one "
                                                         "spread over 20 seeds)")
    options.device(p)
    options.profile(p, what="list the entries that apply at this profile (entries may name profiles)")
    options.kernel_root(p)
    p.add_argument("--file", "--xfails", dest="file", metavar="FILE",
                   help="another expected-failure file, in the format of verify/run/expected_failures.toml "
                        "(default: that built-in list); a malformed FILE is exit status 2")
    options.debug(p)


def run(args) -> int:
    path = Path(args.file) if args.file else EXPECTED_FAILURES_FILE
    load(path)      # a malformed list: one line naming the file and the problem (exit 2)
    if args.update:
        for line in update(args.update, path) or ["nothing to update: the run measured no listed check of its scope"]:
            print(line)
        return 0
    from pathmdn_verify.platform import environment
    from pathmdn_verify.platform.kernel_root import validate_kernel_root
    device = environment.resolve_device(args.device)
    scope = current_scope(device, args.profile)
    if args.kernel_root:
        pkg = package_of(str(Path(validate_kernel_root(args.kernel_root)) / "fla" / "__init__.py"))
        scope = Scope(identity(pkg), scope.device, scope.profile, pkg["path"])
    print(describe(scope, path))
    if scope.root:      # what an entry's `commits` / `trees` would name to narrow itself to this tree
        print(f"kernel package at {scope.root}: content hash {tree_hash(scope.root)}")
    for cid, e in applicable(scope, path).items():
        bound = e.bound(scope)
        how = (f"ratio <= {bound:.3g} ({spread(e.ratios[scope.key])})" if bound is not None
               else "kind only" + ("" if not e.compare_ratio else f" (no ratios for {scope.key})"))
        kinds = ", ".join(f"exception {e.exception}" if k == "exception" else k for k in e.kinds)
        news = "a pass is NOT REPRODUCED" if e.expected_to_reproduce(scope) else "may pass here"
        print(f"{cid}  {kinds}; {how}; {news}")
    return 0
