"""The `verify` command: one entry point, one subcommand per check family and per tool.

This module is the top-level parser and the dispatch; each subcommand is a module of verify/commands/.

Exit status: 0 when nothing failed (expected failures allowed), 1 when a check failed or errored,
2 for usage or environment errors (one line on stderr; a traceback only with --debug), 130 / 143 when
interrupted by Ctrl-C / SIGTERM (the results of the checks that finished are still written).
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
import warnings
from pathlib import Path

from pathmdn_verify.platform import bytecode

# Before the commands import torch: where Python writes no bytecode and torch has none, keep it in a folder of ours
bytecode.enable()

from pathmdn_verify.commands import bisect, checks, compare, coverage, localize, manifest, merge, mutants, report, repro  # noqa: E402
from pathmdn_verify.commands import xfails as xfails_command  # noqa: E402
from pathmdn_verify.core.errors import KernelUnavailable, UsageError  # noqa: E402

# in the order of `verify --help`; each module's add_parser(sub) adds its subcommand(s), run(args[, command]) runs one
COMMANDS = (checks, mutants, compare, merge, localize, xfails_command, manifest, report, bisect, coverage, repro)

EPILOG = """examples:
  verify all                          every check, ci profile, cuda if available else cpu
  verify all --workers 1              one worker (the default, auto, runs up to 16 per GPU, one per core)
  verify oracles -k mdn --json out.json
  verify kernels --profile quick -k 'path_attn and not bwd'
  verify list -k 'spectra or fox'
  verify all --shard 1/3 --json s1.json   (and 2/3, 3/3 on other machines), then:
  verify merge s1.json s2.json s3.json --json all.json --junit all.xml
  verify mutants --json mutants.json  every planted bug must be caught by one of its killer checks
  verify kernels --profile quick --repeat 20 --seed-from 1      false-alarm hunt over 20 fresh seeds
  verify compare --op path_attn --inputs failing.pt             a repro on your own saved tensors
  verify repro kernel.fla.mdn_chunk16.fwd.bf16.logmu_floor --out b   a bundle that runs with torch and fla alone
  verify manifest check all.json .ci/manifests/cpu-ci.txt       exit 1 if any check's status or kind changed
exit status: 0 nothing failed (expected failures allowed), 1 a check failed, 2 usage/environment error,
130/143 interrupted (SIGINT/SIGTERM; the JSON says "interrupted": true), 141 the reader of its output went away
(`verify all | head`: a run stops as interrupted)"""


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the toolkit's and the kernel package's versions")

    def __call__(self, parser, namespace, values, option_string=None):
        import warnings

        from pathmdn_verify.platform import environment
        tk = environment.toolkit()
        print(f"verify ({tk['name']}) {tk['version']}" + (f", git {tk['git_commit'][:12]}" if tk["git_commit"] else "")
              + (" with uncommitted changes" if tk.get("git_dirty") else ""))
        with warnings.catch_warnings():
            for text in environment.CONTRADICTED_WARNINGS:
                warnings.filterwarnings("ignore", message=text)
            try:
                print(f"kernel package: {environment.describe_kernel_package(environment.kernel_package())}")
            except Exception as exc:
                print(f"kernel package: fla cannot be imported: {type(exc).__name__}: {exc}")
        parser.exit()


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an unrecognized argument is its own usage error (`verify all --bogus` prints
    `verify all`'s usage, not the top-level one)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return namespace, extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verify", description=__doc__.splitlines()[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_SubcommandParser)
    sub.required = True
    handlers = {}
    for module in COMMANDS:
        before = set(sub.choices)
        module.add_parser(sub)
        handlers.update(dict.fromkeys(set(sub.choices) - before, module))
    parser.set_defaults(_handlers=handlers)
    return parser


def quiet_known_warnings() -> None:
    """Filter the third-party warnings a user cannot act on (environment.CONTRADICTED_WARNINGS, e.g. fla's
    "roll back to CPU", and numpy's RuntimeWarnings from the interpreter's emulation in verify/platform/fidelity.py)
    in this process and, through PYTHONWARNINGS, in the processes it starts (bisect's steps, report's
    workers).  The check runs' workers filter the same (pathmdn_verify.run.runner); --debug shows them all."""
    from pathmdn_verify.platform import environment
    specs = [f"ignore:{text}" for text in environment.CONTRADICTED_WARNINGS if not set(text) & set(":,")]
    specs.append("ignore::RuntimeWarning:pathmdn_verify.platform.fidelity")
    for text in environment.CONTRADICTED_WARNINGS:
        warnings.filterwarnings("ignore", message=text)
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"pathmdn_verify\.platform\.fidelity")
    inherited = [w for w in os.environ.get("PYTHONWARNINGS", "").split(",") if w]
    os.environ["PYTHONWARNINGS"] = ",".join(inherited + [s for s in specs if s not in inherited])


def main(argv: list[str] | None = None) -> int:
    # hypothesis would create .hypothesis/ in the current directory; workers inherit this
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                          str(Path(tempfile.gettempdir()) / f"verify-hypothesis-{os.getuid()}"))
    args = build_parser().parse_args(argv)
    if not getattr(args, "debug", False):
        quiet_known_warnings()
    try:
        return _dispatch(args, [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)])
    except (UsageError, KernelUnavailable) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"verify: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader closed the pipe (`verify list | head -1`; a run of checks stops as interrupted instead:
        # commands/checks.py): stop quietly.
        from pathmdn_verify.run.runner import OUTPUT_GONE
        from pathmdn_verify.run.terminal import discard_stdout
        discard_stdout()
        return OUTPUT_GONE


def _dispatch(args, command: list[str]) -> int:
    module = args._handlers[args.command]
    if len(inspect.signature(module.run).parameters) > 1:
        return module.run(args, command)
    return module.run(args)
