"""Rewrite repro bundles (docs/repro/*) with this toolkit, each from its own bundle.json (its check, example, title
and GPU text), e.g. after a change to what a bundle holds:

    python -m pathmdn_verify.tools.repro_bundles docs/repro               every bundle of the folder
    python -m pathmdn_verify.tools.repro_bundles docs/repro/path_dv_offset

Each is written by `verify repro CHECK --case EXAMPLE ...` on the CPU into a fresh folder, which replaces the old
one only when the command succeeds.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pathmdn_verify.repro import bundle
from pathmdn_verify.repro.make import BF16_ON_CPU


def command(doc: dict, out: Path) -> list[str]:
    """The `verify repro` command that writes doc's bundle again into out."""
    argv = [sys.executable, "-m", "pathmdn_verify", "repro", doc["check"], "--case", doc["example"], "--seed",
            str(doc["seed"]), "--fp32-dot", doc["fp32_dot"], "--device", "cpu", "--title", doc["title"], "--out", str(out)]
    given = doc["needs_gpu"] not in (None, BF16_ON_CPU)      # BF16_ON_CPU: verify repro adds it itself
    return argv + (["--needs-gpu", doc["needs_gpu"]] if given else [])


def rewrite(folder: Path) -> int:
    doc = bundle.read(folder)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / folder.name
        done = subprocess.run(command(doc, out))
        if done.returncode == 0:
            shutil.rmtree(folder)
            shutil.copytree(out, folder)
    return done.returncode


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    top = Path(argv[0])
    folders = [top] if (top / "bundle.json").is_file() else sorted(p for p in top.iterdir() if (p / "bundle.json").is_file())
    failed = [f.name for f in folders if rewrite(f) != 0]
    print(f"{len(folders) - len(failed)} of {len(folders)} bundles rewritten" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
