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

from pathmdn_verify.layers.table import INSTALL, LAYER_PACKAGE, LAYERS, LayerCase, LayerRecord, add  # noqa: F401


def mutants() -> dict:
    """name -> Mutant, over every layer record (the built-in modules loaded first)."""
    return {m.name: m for r in load().values() for m in r.mutants}


def load() -> dict[str, LayerRecord]:
    """Import the built-in layer modules (cheap: none imports fla at import time) and return the table, ordered
    by layer name (not by which module some caller imported first: check and mutant order is the same in every
    process)."""
    from pathmdn_verify.layers import mdn_layers, path_layers  # noqa: F401  (imported for the records they add)
    return {name: LAYERS[name] for name in sorted(LAYERS)}
