"""The layer table: one declarative record per model layer under test (flash-linear-attention's fla.layers:
PaTHAttention, ForgettingAttention, MomentumDeltaNet, GatedDeltaNet), as pathmdn_verify.ops is for the kernel ops.

A layer computes its op's inputs from the hidden states (projections, gates, short convolutions,
normalisations), calls the op, and caches for generation; its record says how to build it (module, class,
the constructor arguments of each variant), and the comparisons run on it, each a function of a
`LayerCase` returning a Result.  The checks (verify/checks/layer_checks.py) are

    layer.<impl>.<layer>.<variant>.<dtype>.<comparison>

for every (variant, dtype, comparison) the record declares.  The truth is a float64 literal of the layer
built from the layer's own parameters (references/layers_*.py): the papers' gate formulas written once, the
op oracles of references/ for the recurrences; every way the layer departs from its paper is a declared
convention with its own comparison.  A record's `mutants` are planted bugs in a copy of the layer's
source (pathmdn_verify.platform.mutation; path relative to the fla package, e.g. "layers/path_attn.py").
"""
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

    def ids(self, impl: str = "fla") -> list[tuple[str, str, str, str]]:
        """(check id, variant, dtype, comparison) of every check the record declares: its comparisons, then its
        pairwise cases (variant "pairwise", comparison the case's number: pathmdn_verify.layers.calls)."""
        ids = [(f"layer.{impl}.{self.name}.{v}.{d}.{c}", v, d, c) for v in self.variants for d in self.dtypes
               for c in self.comparisons if self.declared(v, d, c)]
        if self.calls is not None:
            from pathmdn_verify.layers.calls import covering
            d = self.calls.dtype
            ids += [(f"layer.{impl}.{self.name}.pairwise.{d}.{i:02d}", "pairwise", d, f"{i:02d}")
                    for i in range(len(covering(self.calls)))]
        return ids


LAYERS: dict[str, LayerRecord] = {}


def add(record: LayerRecord) -> LayerRecord:
    if record.name in LAYERS:
        raise ValueError(f"layer {record.name!r} is already in the layer table")
    LAYERS[record.name] = record
    return record


def mutants() -> dict:
    """name -> Mutant, over every layer record (the built-in modules loaded first)."""
    return {m.name: m for r in load().values() for m in r.mutants}


def load() -> dict[str, LayerRecord]:
    """Import the built-in layer modules (cheap: none imports fla at import time) and return the table, ordered
    by layer name (not by which module some caller imported first: check and mutant order is the same in every
    process)."""
    from pathmdn_verify.layers import mdn_layers, path_layers  # noqa: F401  (imported for the records they add)
    return {name: LAYERS[name] for name in sorted(LAYERS)}
