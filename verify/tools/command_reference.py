"""docs/commands.md, the command reference, generated from the argparse parsers of `verify`, so that the help and
the documentation cannot disagree (property_tests/unit/test_command_reference.py regenerates it and compares):

    python -m pathmdn_verify.tools.command_reference docs/commands.md           rewrite it
    python -m pathmdn_verify.tools.command_reference --check docs/commands.md   exit 1 if it is stale
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pathmdn_verify import cli

WIDTH = 110   # argparse wraps at $COLUMNS; fixed here so that the text does not depend on the terminal

HEADER = """# Command reference

Generated from `verify`'s own parsers by `python -m pathmdn_verify.tools.command_reference docs/commands.md`;
do not edit by hand (a unit test regenerates this file and fails when it differs). The user guide is
[guide.md](guide.md).
"""


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by name, in the order of `verify --help`."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in action.choices.items()}


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The reference: `verify --help`, then each subcommand's `--help`, verbatim."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        parser = parser or cli.build_parser()
        subs = subcommands(parser)
        parts = [HEADER, "Commands: " + ", ".join(f"[`{n}`](#verify-{n})" for n in subs) + ".\n",
                 "## verify\n", "```\n" + parser.format_help().rstrip() + "\n```\n"]
        for name, sub in subs.items():
            parts += [f"## verify {name}\n", "```\n" + sub.format_help().rstrip() + "\n```\n"]
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pathmdn_verify.tools.command_reference", description=__doc__)
    ap.add_argument("path", type=Path, help="the reference file (docs/commands.md)")
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 if it differs")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not args.path.exists() or args.path.read_text() != text:
            print(f"{args.path} is stale: run python -m pathmdn_verify.tools.command_reference {args.path}",
                  file=sys.stderr)
            return 1
        return 0
    args.path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
