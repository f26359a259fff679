"""Planted bugs: source patches applied to a temporary copy of the kernel package (fla), which the checks
then verify as a kernel root (--kernel-root) in fresh worker processes.  A mutant is killed when one of its
checks fails.

Each mutant is one real kind of mistake in these kernels, registered once here; adding one is a few lines.
A patch whose target text is not found exactly `count` times raises: the mutant is out of date, which is
an error, never a silent survivor.  Killers are checks that take seconds at the quick and ci profiles and
are green on the unmodified kernels; `verify mutants` (verify/commands/mutants.py) runs them and prints which
one killed each mutant.  A bug that hides while K == V needs a case with
D != Dv: the PaTH and FoX convention checks use D = 16, Dv = 32.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import NAME, CheckId, op_of


@dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    path: str                    # file inside the fla package, e.g. "ops/path_attn/parallel_path_fwd.py"
    old: str
    new: str
    killers: tuple[str, ...]     # check ids expected to turn red (an op's mutants name at least one: OpRecord)
    count: int = 1               # occurrences of `old` the patch replaces

    def __post_init__(self):
        """A bad mutant is refused when it is made, naming the field."""
        def bad(what: str):
            raise ValueError(f"mutant {self.name!r}: {what}")
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            bad("name must be lower-case letters, digits and _ (it is a word of its check id)")
        if not self.description or not self.path or Path(self.path).is_absolute() or ".." in Path(self.path).parts:
            bad("description and path (a file inside the kernel package, relative) must be given")
        if not self.old or self.old == self.new or not isinstance(self.count, int) or self.count < 1:
            bad("old must be replaced by a different new, count >= 1 times")
        if not isinstance(self.killers, tuple):     # empty: a patch built alone (a known fix), never run as a mutant
            bad("killers must be a tuple of the check ids expected to turn red")
        for k in self.killers:
            try:
                CheckId.parse(k)
            except UsageError as exc:
                bad(f"killer {exc}")

    @property
    def ops(self) -> set[str]:
        """The kernel ops (pathmdn_verify.ops.OPS names) whose checks kill this mutant."""
        return {op_of(k) for k in self.killers}




def fla_package_dir() -> Path:
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        raise RuntimeError("the fla package (fla-core) is not installed")
    return Path(spec.origin).parent


def materialize(mutant: Mutant, dest: Path, source: Path | None = None) -> Path:
    """The fla package at dest/fla with the mutant's patch applied; returns dest (a kernel root).  Every file is
    a hard link to the source's where the filesystem allows (else a copy): the patched file is written anew
    (unlinked first, so the source keeps its text), and Python replaces a stale bytecode file rather than writing
    into it, so nothing written in the copy reaches the source.  The bytecode caches come along (with their
    sources' times they stay valid; the patched file's is stale by its new time and size, so Python recompiles
    that file alone)."""
    source = source or fla_package_dir()
    shutil.copytree(source, dest / "fla", copy_function=_link_or_copy)
    target = dest / "fla" / mutant.path
    text = target.read_text()
    found = text.count(mutant.old)
    if found != mutant.count:
        raise RuntimeError(f"mutant {mutant.name}: expected {mutant.count} occurrence(s) of its target in "
                           f"{mutant.path}, found {found}; the kernel source changed, update the mutant")
    target.unlink()
    target.write_text(text.replace(mutant.old, mutant.new))
    return dest


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:                  # another filesystem, or one without hard links
        shutil.copy2(src, dst)
