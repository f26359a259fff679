"""`verify mutants`: the mutation self-test.  Each planted bug of an op or layer record (its `mutants`,
pathmdn_verify.platform.mutation.Mutant) must turn at least one of its killer checks red.

The killers first run on the unmodified kernels (the installed package or --kernel-root), in the run's workers:
a killer must be green there (pass, or xfail: a listed check that only the expected-failure ratchet turns red
when it fails worse), or a red killer proves nothing and the mutant is an error.  Then, for each mutant, the
kernel package is copied with the mutant's patch into a temporary directory and its killers run against that
copy as a kernel root, in a fresh one-worker pool of the runner (a mutant that crashes its worker costs only
itself), in the registry's order, none started after the first that kills it (as under --exitfirst); up to
--workers mutants at once.  Every outcome is `mutant.<name>`: pass (killed, by which check), fail (SURVIVED),
error, or skip (no killer runs here).

Exit status: 0 every mutant killed (or skipped), 1 one survived or errored, 2 a usage error, 130 / 143
interrupted.
"""
from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from pathmdn_verify.commands import checks, options
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.registry import Check, matcher
from pathmdn_verify.run.mutants import MutantRun, every

DESCRIPTION = "mutation self-test: planted bugs in a copy of the kernels, each must turn one of its killer checks red"


def add_parser(sub) -> None:
    p = sub.add_parser("mutants", help=DESCRIPTION + " (minutes)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    options.select(p, "mutant (mutant.<name>)")
    checks.run_options(p)
    p.add_argument("--list", action="store_true", help="print the selected mutants and their killers, run nothing")


def _selection(args) -> list[Check]:
    """The selected mutants as checks of the run's presentation (not registered: a mutant is judged by this
    command, not run as a check)."""
    tests = [matcher(p) for p in args.patterns or ()]
    ids = {i if i.startswith("mutant.") else f"mutant.{i}" for i in args.ids or ()}
    chosen = [Check(f"mutant.{name}", f"planted bug is caught: {m.description}", run=None)
              for name, m in every().items()
              if not (tests or ids) or f"mutant.{name}" in ids or any(t(f"mutant.{name}") for t in tests)]
    if not chosen:
        raise UsageError(f"no mutant matches {args.patterns or args.ids}; see `verify mutants --list`")
    return chosen


def run(args, command: list[str]) -> int:
    from pathmdn_verify.run import load_checks
    load_checks()
    if args.list:
        for c in _selection(args):
            m = every()[c.id.removeprefix("mutant.")]
            print(f"{c.id}  {m.description}\n    killers: {', '.join(m.killers)}")
        return 0
    others = [s for s in args.impl or () if s != "fla"]
    if others:
        raise UsageError(f"verify mutants: not supported for implementation {', '.join(others)}: the mutants are "
                         "planted bugs in fla's kernel package")
    run = MutantRun(checks.options_of(args, prefixes=None), _selection(args))
    return checks.execute(run, args, command, lambda outcomes, console: console.print(table(outcomes)))


def table(outcomes) -> Table:
    """The mutants table: mutant, what it changes, which check killed it, measured vs budget."""
    t = Table(title="mutation self-test")
    for col in ("mutant", "what it changes", "killed by", "measured vs budget"):
        t.add_column(col)
    mutants = every()
    for o in outcomes:
        res = o.result
        killer = res.details.get("killed_by", {"fail": "SURVIVED", "error": "ERROR"}.get(res.status, res.status))
        numbers = f"{res.measured:.3g} vs {res.budget:.3g}" if res.measured is not None and res.budget is not None else ""
        name = o.id.removeprefix("mutant.")
        t.add_row(name, escape(mutants[name].description if name in mutants else ""), escape(killer), numbers)
    return t
