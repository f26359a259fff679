"""One declarative record per kernel op under test (PyTorch's OpInfo is the model), and the registry `OPS`.

A `KernelOp` (verify/ops/record.py) says everything the checks, `verify compare`, the device comparison, the
search and the mutants need about one op: the kernel adapter (kernels/fla_ops.py) and its measured
conventions, the float64 oracle (references/), the same-dtype implementation that sets the budget
(verify/same_dtype.py), the dtypes and passes, the output and gradient names, the case type and its input
builder, the regimes with their hypothesis strategies, the budget factors c, input validation, the summed
terms of cancelling outputs, regression cases, convention probes and the device-comparison cases.  Each
family of ops is one module here that owns all of that (attention.py: PaTH and FoX; mdn.py; gdn.py);
adding an op is one such module, its line in OPS below, and one adapter.

The functions of verify/same_dtype.py and the MDN oracle are looked up when called, so a test may substitute them.
"""
from __future__ import annotations

from verify.ops.attention import FORGETTING_ATTN, PATH_ATTN
from verify.ops.gdn import GDN_CHUNK, GDN_RECURRENT
from verify.ops.mdn import MDN_CHUNK_OPS, MDN_RECURRENT
from verify.ops.record import KernelOp, as_tuple, scale_of

__all__ = ["OPS", "REPLAY", "KernelOp", "as_tuple", "regression_cases", "scale_of"]

OPS: dict[str, KernelOp] = {op.name: op for op in
                            [PATH_ATTN, FORGETTING_ATTN, *MDN_CHUNK_OPS, MDN_RECURRENT, GDN_CHUNK, GDN_RECURRENT]}


# check id -> cases to run first in this process, before the record's own regression cases: `verify bisect`
# replays here, at every commit, the failing examples it drew at the reference commit.
REPLAY: dict[str, list] = {}


def regression_cases(check_id: str) -> list:
    """The regression cases of a kernel check id (run first on every run of that check, whatever the seed,
    so a fix stays fixed and a listed failure is reproduced rather than left to the search's luck), after
    any REPLAY cases."""
    parts = check_id.split(".")
    op = OPS.get(parts[2]) if len(parts) == 6 and check_id.startswith("kernel.fla.") else None
    return REPLAY.get(check_id, []) + (op.regression_cases.get(".".join(parts[3:]), []) if op else [])
