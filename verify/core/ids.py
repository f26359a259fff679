"""Check ids: the one grammar, parsed and formatted here and nowhere else.

An id is dotted words (letters, digits, _ and -), the first, lower-case, naming the family:

    kernel.<impl>.<op>.<pass>.<dtype>.<regime>    pass fwd | bwd | decode: a search over the regime's cases
    kernel.<impl>.<op>.convention.<name>          a declared convention of the op, measured
    kernel.<impl>.<op>.<name>.<dtype>             another check of one op (state_tracking)
    layer.<impl>.<layer>.<variant>.<dtype>.<comparison>   a model layer (pathmdn_verify.layers) against its literal
    oracle.<...>, symbolic.<...>, env.<...>, mutant.<name>

`<op>` names a record of pathmdn_verify.ops (`pathmdn_verify.ops.record(check_id)` resolves it); `<impl>` is the kernel
package (fla).  The group of an id (`group`) is kernel.<impl>.<op> for a kernel check, the checks that share
the op's compiled kernels (layer.<impl>.<layer> likewise), and its section, <family>.<first word>, otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pathmdn_verify.core.errors import UsageError

PASSES = ("fwd", "bwd", "decode")      # the passes whose checks search over cases
DTYPES = ("bf16", "fp32")
_WORD = re.compile(r"[\w-]+")
NAME = re.compile(r"[a-z][a-z0-9_]*")       # an op's, a layer's or an implementation's name: a word of check ids
_FAMILY = re.compile(r"[a-z]+")


@dataclass(frozen=True)
class CheckId:
    family: str
    parts: tuple[str, ...]              # the words after the family

    @classmethod
    def parse(cls, text: str) -> CheckId:
        words = text.split(".")
        if len(words) < 2 or not _FAMILY.fullmatch(words[0]) or not all(_WORD.fullmatch(w) for w in words):
            raise UsageError(f"{text!r}: not a check id (a lower-case family, then dotted words, e.g. kernel.fla.path_attn.fwd.bf16."
                             "beta_uniform); see `verify list`")
        cid = cls(words[0], tuple(words[1:]))
        if cid.family == "kernel" and (len(words) < 5 or (cid.pass_ in PASSES and len(words) != 6)
                                       or (cid.dtype is not None and cid.dtype not in DTYPES)):
            raise UsageError(f"{text!r}: a kernel check id reads kernel.<impl>.<op>.<fwd|bwd|decode>.<bf16|fp32>."
                             "<regime>, kernel.<impl>.<op>.convention.<name> or kernel.<impl>.<op>.<name>.<dtype>")
        if cid.family == "layer" and (len(words) != 6 or words[4] not in DTYPES):
            raise UsageError(f"{text!r}: a layer check id reads layer.<impl>.<layer>.<variant>.<bf16|fp32>.<comparison>")
        return cid

    @classmethod
    def kernel(cls, impl: str, op: str, pass_: str, *rest: str) -> CheckId:
        return cls.parse(".".join(("kernel", impl, op, pass_, *rest)))

    @classmethod
    def of_layer(cls, impl: str, layer: str, variant: str, dtype: str, comparison: str) -> CheckId:
        """layer.<impl>.<layer>.<variant>.<dtype>.<comparison>; UsageError when a word is not one (so that the id
        round-trips)."""
        return cls.parse(".".join(("layer", impl, layer, variant, dtype, comparison)))

    def __str__(self) -> str:
        return ".".join((self.family, *self.parts))

    @property
    def is_kernel(self) -> bool:
        return self.family == "kernel"

    @property
    def impl(self) -> str | None:
        return self.parts[0] if self.is_kernel or self.is_layer else None

    @property
    def op(self) -> str | None:
        """The op record's name (kernel checks only)."""
        return self.parts[1] if self.is_kernel else None

    @property
    def pass_(self) -> str | None:
        """fwd | bwd | decode, convention, or an op check's name (kernel checks only)."""
        return self.parts[2] if self.is_kernel else None

    @property
    def searched(self) -> bool:
        """A kernel check that searches over cases and reports its example (fwd, bwd, decode)."""
        return self.is_kernel and self.pass_ in PASSES

    @property
    def is_layer(self) -> bool:
        return self.family == "layer"

    @property
    def layer(self) -> str | None:
        """The layer record's name (layer checks only)."""
        return self.parts[1] if self.is_layer else None

    @property
    def variant(self) -> str | None:
        """The layer record's variant, or "pairwise" for a case of its calls (layer checks only)."""
        return self.parts[2] if self.is_layer else None

    @property
    def comparison(self) -> str | None:
        """The layer record's comparison, or a pairwise case's number (layer checks only)."""
        return self.parts[4] if self.is_layer else None

    @property
    def dtype(self) -> str | None:
        if self.is_layer:
            return self.parts[3]
        if not self.is_kernel or self.pass_ == "convention":
            return None
        return self.parts[3]

    @property
    def regime(self) -> str | None:
        return self.parts[4] if self.searched else None

    @property
    def key(self) -> str | None:
        """<pass>.<dtype>.<regime> of a searched check: the key of the op record's regression cases."""
        return ".".join(self.parts[2:]) if self.searched else None

    @property
    def group(self) -> str:
        return ".".join((self.family, *self.parts[:2])) if self.is_kernel or self.is_layer else self.section

    @property
    def section(self) -> str:
        """<family>.<first word>: the rows of the run's summary (kernel.fla, oracle.path, mutant.<name>...)."""
        return f"{self.family}.{self.parts[0]}"


def op_of(text: str) -> str | None:
    """The op a check id names (None for a check of no op)."""
    return CheckId.parse(text).op
