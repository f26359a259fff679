"""The layer table's types: a layer record, the case a comparison gets, and the table itself (filled by the
record modules through `add`; pathmdn_verify.layers.load imports them)."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import DTYPES, NAME, CheckId
from pathmdn_verify.core.registry import Context

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
LAYER_PACKAGE = "flash-linear-attention"
INSTALL = "pip install 'pathmdn-verify[layers]' (flash-linear-attention 0.6.0 with transformers 5)"


@dataclass(frozen=True)
class LayerCase:
    """What a comparison gets: the run's context and which layer, variant and dtype it checks (options: the
    constructor arguments of a pairwise case, pathmdn_verify.layers.calls, instead of a variant's)."""
    ctx: Context
    record: LayerRecord
    variant: str
    dtype: str
    options: dict | None = None

    @property
    def kwargs(self) -> dict:
        """The variant's constructor arguments (beyond the sizes the comparison chooses)."""
        return dict(self.options if self.options is not None else self.record.variants[self.variant])


@dataclass(frozen=True)
class LayerRecord:
    name: str                                   # the id word: path, fox, mdn, gdn
    module: str                                 # where the class lives in the kernel package: fla.layers.path_attn
    cls: str                                    # PaTHAttention
    description: str                            # one line: what the layer is
    variants: dict[str, dict]                   # variant word -> constructor kwargs
    comparisons: dict[str, tuple[str, Callable]]   # comparison word -> (one-line description, fn(LayerCase) -> Result)
    dtypes: tuple[str, ...] = ("bf16", "fp32")
    declared: Callable[[str, str, str], bool] = lambda variant, dtype, comparison: True   # which ids exist
    mutants: tuple = field(default=())          # pathmdn_verify.platform.mutation.Mutant, killers are layer ids
    calls: object = None                        # pathmdn_verify.layers.calls.Calls: every way the layer is called
    # (variant, dtype, comparison) -> the conventions of pathmdn_verify.layers.history that explain its verdict on
    # an older tree (added to the message of a result that did not pass)
    history: Callable[[str, str, str], tuple] = lambda variant, dtype, comparison: ()

    def __post_init__(self):
        """A bad record is refused when it is made, naming the field (as an op record, OpRecord, is)."""
        def bad(what: str):
            raise ValueError(f"layer record {self.name!r}: {what}")
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            bad("name must be lower-case letters, digits and _ (it is a word of check ids)")
        if not isinstance(self.module, str) or not _MODULE.fullmatch(self.module) or not self.cls.isidentifier():
            bad(f"module {self.module!r} and cls {self.cls!r} must name a class: a dotted module and an identifier")
        if not self.description:
            bad("description must say what the layer is")
        if not self.dtypes or not set(self.dtypes) <= set(DTYPES):
            bad(f"dtypes {self.dtypes} must be some of {DTYPES}")
        if not all(isinstance(k, dict) for k in self.variants.values()) or "pairwise" in self.variants:
            bad("variants map a word (not 'pairwise': the calls' cases) to constructor kwargs")
        if not all(isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str) and callable(c[1])
                   for c in self.comparisons.values()):
            bad("comparisons map a word to (a one-line description, fn(LayerCase) -> Result)")
        if not (self.variants and self.comparisons) and self.calls is None:
            bad("declares no check: it needs variants and comparisons, or calls")
        if not callable(self.declared) or not callable(self.history):
            bad("declared and history must be callable")
        for v in self.variants:
            for c in self.comparisons:
                try:
                    CheckId.of_layer("fla", self.name, v, self.dtypes[0], c)
                except UsageError as exc:
                    bad(f"variant {v!r} and comparison {c!r} must be words of a check id: {exc}")

    def ids(self, impl: str = "fla") -> list[tuple[str, str, str, str]]:
        """(check id, variant, dtype, comparison) of every check the record declares: its comparisons, then its
        pairwise cases (variant "pairwise", comparison the case's number: pathmdn_verify.layers.calls)."""
        ids = [(v, d, c) for v in self.variants for d in self.dtypes for c in self.comparisons if self.declared(v, d, c)]
        if self.calls is not None:
            ids += [("pairwise", self.calls.dtype, f"{i:02d}") for i in range(len(self.calls.cases()))]
        return [(str(CheckId.of_layer(impl, self.name, v, d, c)), v, d, c) for v, d, c in ids]


LAYERS: dict[str, LayerRecord] = {}


def add(record: LayerRecord) -> LayerRecord:
    if record.name in LAYERS:
        raise ValueError(f"layer {record.name!r} is already in the layer table")
    LAYERS[record.name] = record
    return record
