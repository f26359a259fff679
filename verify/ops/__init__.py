"""The op table: one declarative record per kernel op under test (`OpRecord`, verify/core/records.py;
PyTorch's OpInfo is the model), and the lookups every command makes through it.

A record says everything the checks, the commands and the report need about one op: the kernel adapter
(kernels/fla_ops.py) and its measured conventions, the float64 oracle (references/), the same-dtype
implementation that sets the budget (verify/same_dtype.py), dtypes and passes, output and gradient names,
the case type and its input builder, the regimes with their hypothesis strategies, budget factors,
input validation, regression cases, convention probes, localize's stages, its mutants and the report's
family.  Each family of ops is one module here (attention_ops.py: PaTH and FoX; mdn_ops.py; gdn_ops.py;
conv_ops.py and norm_ops.py: fla's modules).

Adding an op (docs/design.md, "Adding an op"): one op module with its record, one adapter, one mutant in
the record; built-in ops are listed in BUILT_IN below, an op defined elsewhere (a plug-in module named by
$VERIFY_EXTRA_CHECKS) calls the public `pathmdn_verify.declare_op(record)`, which adds it here and declares its
checks.
"""
from __future__ import annotations

import functools

from pathmdn_verify.core import boundaries
from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.records import OpRecord, as_tuple, scale_of
from pathmdn_verify.ops import impls
from pathmdn_verify.ops.attention_ops import FORGETTING_ATTN, PATH_ATTN
from pathmdn_verify.ops.conv_ops import SHORT_CONV, SHORT_CONV_UPDATE
from pathmdn_verify.ops.gdn_ops import GDN_CHUNK, GDN_RECURRENT
from pathmdn_verify.ops.mdn_ops import MDN_CHUNK_OPS, MDN_RECURRENT
from pathmdn_verify.ops.norm_ops import NORM_OPS

__all__ = ["OPS", "REPLAY", "OpRecord", "add", "as_tuple", "boundary_cases", "explicit_cases", "mutants", "record",
           "regression_cases", "scale_of"]

BUILT_IN = (PATH_ATTN, FORGETTING_ATTN, *MDN_CHUNK_OPS, MDN_RECURRENT, GDN_CHUNK, GDN_RECURRENT, SHORT_CONV,
            SHORT_CONV_UPDATE, *NORM_OPS)
OPS: dict[str, OpRecord] = {}


def add(op: OpRecord) -> OpRecord:
    """Put a record in the table (a name is taken once)."""
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} is already in the op table")
    OPS[op.name] = op
    return op


for _op in BUILT_IN:
    add(_op)


def mutants() -> dict:
    """name -> Mutant, over every record of the table."""
    return {m.name: m for op in OPS.values() for m in op.mutants}


def record(check_id: str | CheckId) -> OpRecord:
    """The record a kernel check id names; UsageError naming the known ops when it names none."""
    cid = check_id if isinstance(check_id, CheckId) else CheckId.parse(check_id)
    if not cid.is_kernel:
        raise UsageError(f"{cid}: not a kernel check (kernel.<impl>.<op>...), so it names no op")
    if cid.op not in OPS:
        raise UsageError(f"{cid}: no op {cid.op!r}; the ops are {', '.join(OPS)}")
    if cid.impl == impls.BUILT_IN:
        return OPS[cid.op]
    impl = impls.IMPLS.get((cid.impl, cid.op))
    if impl is None:
        raise UsageError(f"{cid}: no implementation {cid.impl!r} of {cid.op} is registered here (--impl SPEC loads one)")
    return impl.record


# check id -> cases to run first in this process, before the record's own regression cases: `verify bisect`
# replays here, at every commit, the failing examples it drew at the reference commit.
REPLAY: dict[str, list] = {}


@functools.lru_cache(maxsize=None)
def _assigned(op_name: str, pass_: str, profile: str) -> dict:
    op = OPS[op_name]
    regimes = {r: op.regimes[r] for r in op.decode.regimes} if pass_ == "decode" else op.regimes
    regimes = {r: f for r, f in regimes.items() if r not in op.structure.value_regimes}
    return boundaries.assign(op, pass_, profile, regimes)


def boundary_cases(check_id: str, profile: str) -> list:
    """The boundary cases (pathmdn_verify.core.boundaries) that the op's structure gives this check at the profile."""
    cid = CheckId.parse(check_id)
    if not cid.searched or cid.op not in OPS or OPS[cid.op].structure is None:
        return []
    return _assigned(cid.op, cid.pass_, profile).get((cid.dtype, cid.regime), [])


def explicit_cases(check_id: str, profile: str) -> list:
    """What a kernel check runs before its search: REPLAY, its regression cases, its boundary cases."""
    return regression_cases(check_id) + boundary_cases(check_id, profile)


def regression_cases(check_id: str) -> list:
    """The regression cases of a kernel check id (run first on every run of that check, whatever the seed,
    so a fix stays fixed and a listed failure is reproduced rather than left to the search's luck), after
    any REPLAY cases."""
    cid = CheckId.parse(check_id)
    own = OPS[cid.op].regression_cases.get(cid.key, []) if cid.searched and cid.op in OPS else []
    return REPLAY.get(check_id, []) + own
