"""layer.<impl>.<layer>.<variant>.<dtype>.<comparison>: the model layers users call (pathmdn_verify.layers records)
against float64 literals of the same layers.  Registration is cheap (no fla import); a check imports the layer
when it runs, after the interpreter fidelity layer is installed.  Without flash-linear-attention every check is
a skip whose message says how to install it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from pathmdn_verify import layers
from pathmdn_verify.core.registry import Context, Result, register
from pathmdn_verify.layers import calls, history
from pathmdn_verify.layers.table import INSTALL, LayerCase
from pathmdn_verify.layers.common import LayerLacks, LayerMissing, LayerRaised, LayerUnsupported
from pathmdn_verify.platform import setup


def run_layer(rec, variant: str, dtype: str, comparison: str, ctx: Context) -> Result:
    setup.prepare(ctx)
    if missing := _missing_package():
        return Result("skip", message=missing, kind="unsupported")
    case = LayerCase(ctx, rec, variant, dtype)
    try:
        if variant == "pairwise":
            res = calls.run(case, rec.calls, int(comparison))
        else:
            res = rec.comparisons[comparison][1](case)
    except (LayerMissing, LayerUnsupported, history.ConventionUnknown) as exc:
        res = Result("skip", message=str(exc), kind="unsupported")
    except LayerRaised as exc:
        res = Result("fail", message=f"the layer raised {exc}", kind="exception",
                     details={"exception": type(exc.__cause__).__name__})     # what an xfail entry names
    except LayerLacks as exc:
        res = Result("fail", message=str(exc), kind="over_budget")
    return explained(res, calls.explained(rec.calls, int(comparison)) if variant == "pairwise"
                     else rec.history(variant, dtype, comparison))


def explained(res: Result, names: tuple[str, ...]) -> Result:
    """The result with what the tree's place in fla's history says about it (pathmdn_verify.layers.history: the
    change a tree before it lacks) in details, and in the message where it did not pass: history explains a
    verdict, it never decides one."""
    notes = [n for n in (history.explain(name) for name in names) if n]
    if notes:
        res.details = {**res.details, "history": notes}
        if res.status != "pass":
            res.message += "; history: " + "; ".join(notes)
    return res


def _missing_package() -> str | None:
    """Why no layer can run here: fla's layers and models (flash-linear-attention, the `layers` extra) are not
    installed beside fla-core's ops; None when they are.  Looked up as folders of the fla that `import fla` would
    load, without importing it."""
    spec = importlib.util.find_spec("fla")
    if spec is None:
        return f"fla is not installed: {INSTALL}"
    for part in ("layers", "models"):
        if not any((Path(where) / part).is_dir() for where in spec.submodule_search_locations or ()):
            return f"fla.{part} is not installed: {INSTALL}"
    return None


def declare(rec) -> None:
    for cid, variant, dtype, comparison in rec.ids():
        desc = (f"{rec.cls} ({dtype}) called as: {calls.describe(calls.covering(rec.calls)[int(comparison)])}"
                if variant == "pairwise" else f"{rec.cls} ({variant}, {dtype}): {rec.comparisons[comparison][0]}")
        register(cid, desc, lambda ctx, r=rec, v=variant, d=dtype, c=comparison: run_layer(r, v, d, c, ctx))


for _rec in layers.load().values():
    declare(_rec)
