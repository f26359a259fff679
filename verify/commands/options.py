"""The options several commands share, each declared once: what it means, its default and its help."""
from __future__ import annotations

import argparse

from pathmdn_verify.core.registry import K_HELP, PROFILES


def keyword(p: argparse.ArgumentParser, what: str = "checks", default: str = "") -> None:
    """-k EXPR, repeatable (a union)."""
    p.add_argument("-k", dest="patterns", action="append", metavar="EXPR", help=K_HELP.format(what=what) + default)


def select(p: argparse.ArgumentParser, what: str = "check", default: str = "") -> None:
    """-k EXPR and --id ID, both repeatable (a union)."""
    keyword(p, default=default)
    p.add_argument("--id", dest="ids", action="append", metavar="ID", help=f"select one {what} by exact id; repeatable")


def device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where kernels and oracles run (default: cuda when available, else cpu)")


def profile(p: argparse.ArgumentParser, default: str = "ci", what: str = "check sizes") -> None:
    p.add_argument("--profile", choices=PROFILES, default=default,
                   help=f"{what} (default {default}): quick (seconds), ci (the CI budget on a CPU), full (GPU sizes)")


def seed(p: argparse.ArgumentParser, help_: str = "seed for every random draw (default 0)") -> None:
    p.add_argument("--seed", type=int, default=0, help=help_)


def fp32_dot(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fp32-dot", choices=("tf32", "ieee"), default="tf32",
                   help="CPU interpreter: emulate the GPU's TF32 fp32 dots (default) or run them in IEEE fp32")


def kernel_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel-root", metavar="PATH",
                   help="import the kernel package (fla) from this checkout instead of the installed one")


def examples(p: argparse.ArgumentParser) -> None:
    p.add_argument("--examples", type=int, metavar="N",
                   help="hypothesis examples per kernel check, after its boundary and regression cases "
                        "(default: quick 2, ci 2, full 5)")


def json_out(p: argparse.ArgumentParser, what: str = "the result") -> None:
    p.add_argument("--json", metavar="PATH", help=f"write {what} as JSON")


def debug(p: argparse.ArgumentParser, help_: str = "print tracebacks (of a usage error too) and the third-party "
                                                   "warnings the toolkit filters") -> None:
    p.add_argument("--debug", action="store_true", help=help_)


def impl(p: argparse.ArgumentParser, what: str = "kernel and layer checks run") -> None:
    p.add_argument("--impl", action="append", metavar="SPEC",
                   help=f"the implementation(s) whose {what} (default: fla, the installed package or --kernel-root): a "
                        "registered name (an installed plug-in's), module[:attr] or path/to/file.py[:attr] registering "
                        "one with pathmdn_verify.implement; repeatable, side by side")
