"""Running a bundle's repro.py (pathmdn_verify.repro.bundle) against the kernel package of a folder: the step of
`verify bisect --bundle`.  Its exit status is the verdict: 1 the defect is present ("fails"), 0 it is gone
("passes"); 2 (the fla there cannot make the call, or this machine cannot run it), 77 (no GPU) and any other
status decide nothing ("skip")."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

VERDICTS = {0: "passes", 1: "fails"}
FLA_ORIGIN = "import importlib.util as u; s = u.find_spec('fla'); print(s.origin if s and s.origin else '')"


def environment(import_root: Path) -> dict:
    """The environment of a run: the folder's fla first on the import path, the current folder not on it."""
    path = [str(import_root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONSAFEPATH="1")


def run(folder: Path, python: str, import_root: Path) -> tuple[int | None, str]:
    """(repro.py's exit status, its output) with fla imported from import_root; (None, why) when python would
    import fla from elsewhere (the folder holds no package it can import)."""
    env = environment(import_root)
    found = subprocess.run([python, "-c", FLA_ORIGIN], env=env, capture_output=True, text=True)
    origin = found.stdout.strip()
    if not origin or not Path(origin).resolve().is_relative_to(import_root.resolve()):
        return None, f"{python} imports fla from {origin or 'nowhere'}, not from {import_root}"
    proc = subprocess.run([python, str(folder.resolve() / "repro.py")], env=env, cwd=import_root,
                          capture_output=True, text=True, errors="replace")
    return proc.returncode, proc.stdout + proc.stderr


def summary(output: str) -> str:
    """The lines of repro.py's output that carry its verdict (each tensor over budget, the failure or the
    reason it could not run), joined."""
    keys = ("EXCEEDS", "FAIL", "PASS", "cannot run", "needs an NVIDIA GPU")
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith(keys)]
    return "; ".join(lines) or (output.strip().splitlines() or ["no output"])[-1]


def judge(folder: Path, python: str, import_root: Path, check: str) -> tuple[str, str, dict]:
    """(fails | passes | skip, the reason in a few words, the step's outcome of the bundle's check: a results JSON's
    check)."""
    status, output = run(folder, python, import_root)
    verdict = VERDICTS.get(status, "skip")
    reason = output if status is None else f"repro.py exit {status}: {summary(output)}"
    outcome = {"id": check, "status": {"fails": "fail", "passes": "pass"}.get(verdict, "skip"), "measured": None,
               "budget": None, "message": reason, "failures": [], "cached": False}
    return verdict, reason, outcome
