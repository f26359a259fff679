"""The layer table's types: a layer record, the case a comparison gets, and the table itself (filled by the
record modules through `add`; pathmdn_verify.layers.load imports them)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pathmdn_verify.core.registry import Context

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

    def ids(self, impl: str = "fla") -> list[tuple[str, str, str, str]]:
        """(check id, variant, dtype, comparison) of every check the record declares: its comparisons, then its
        pairwise cases (variant "pairwise", comparison the case's number: pathmdn_verify.layers.calls)."""
        ids = [(f"layer.{impl}.{self.name}.{v}.{d}.{c}", v, d, c) for v in self.variants for d in self.dtypes
               for c in self.comparisons if self.declared(v, d, c)]
        if self.calls is not None:
            d = self.calls.dtype
            ids += [(f"layer.{impl}.{self.name}.pairwise.{d}.{i:02d}", "pairwise", d, f"{i:02d}")
                    for i in range(len(self.calls.cases()))]
        return ids


LAYERS: dict[str, LayerRecord] = {}


def add(record: LayerRecord) -> LayerRecord:
    if record.name in LAYERS:
        raise ValueError(f"layer {record.name!r} is already in the layer table")
    LAYERS[record.name] = record
    return record
