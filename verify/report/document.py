"""report.json (strict JSON: every non-finite number is null, its kind named in the point's `nonfinite`, dotted
path -> inf | -inf | nan; schema in report.schema.json) and report.md (the plots, the bounds in words, the worst
cases found by search, the expected failures, the environment)."""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from pathmdn_verify.core.precision import UNIT_ROUNDOFF
from pathmdn_verify.report import bounds
from pathmdn_verify.report.plots import (
    MIN_FIT_POINTS,
    READING,
    growth_exponent,
    label,
    largest_correct,
    map_panels,
)

SCHEMA_VERSION = 2
SCHEMA_FILE = Path(__file__).with_name("report.schema.json")
WORST_CASES = 12


def strict(obj, path: str = "", nonfinite: dict | None = None):
    """obj with every non-finite float replaced by None and recorded in nonfinite[path] (inf, -inf or nan)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        nonfinite[path] = "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
        return None
    if isinstance(obj, dict):
        return {k: strict(v, f"{path}.{k}" if path else str(k), nonfinite) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v, f"{path}.{i}" if path else str(i), nonfinite) for i, v in enumerate(obj)]
    return obj


def point_json(measurement: dict) -> dict:
    nonfinite: dict[str, str] = {}
    out = strict(measurement, "", nonfinite)
    out["nonfinite"] = nonfinite
    return out


def value(point: dict, path: str) -> float:
    """A number of a report.json point back as a float (inf / nan where the JSON holds null)."""
    obj = point
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    if obj is None:
        return {"inf": math.inf, "-inf": -math.inf}.get(point.get("nonfinite", {}).get(path), math.nan)
    return float(obj)


def checks_of(results: dict | None) -> list[dict]:
    """The kernel checks of a `verify ... --json` result, worst error/budget first."""
    if results is None:
        return []

    def ratio(c):     # a non-finite measurement is a string ("inf") in older results, null in newer ones
        m, b = c.get("measured"), c.get("budget")
        if isinstance(m, str) or (m is None and c["status"] in ("fail", "xfail", "error")):
            return math.inf
        return m / b if isinstance(m, (int, float)) and isinstance(b, (int, float)) and b > 0 else -1.0
    keep = [{"id": c["id"], "status": c["status"], "measured": c.get("measured"), "budget": c.get("budget"),
             "example": (c.get("details") or {}).get("minimal_example") or (c.get("details") or {}).get("worst_example"),
             "repro": c.get("repro"), "ratio": ratio(c)} for c in results["checks"] if c["id"].startswith("kernel.")]
    return sorted(keep, key=lambda c: -c["ratio"])


def decode_by_length(results: dict | None) -> list[dict]:
    """The layer checks' decode error against generated length, from a `verify ... --json` result: per
    layer.*.generation check, [generated tokens (each bucket's last), normwise relative error] and the growth
    (last bucket / first).  PaTH's and FoX's checks keep equal buckets (details
    decode_rel_err_by_generated_length, "1-32": err), MDN's and GDN's doubling ones (details buckets)."""
    num = lambda v: float(v) if isinstance(v, str) else v      # older results: "inf" as a string
    out = []
    for c in (results or {}).get("checks", []):
        d = c.get("details") or {}
        if not (c["id"].startswith("layer.") and c["id"].endswith(".generation")):
            continue
        if "decode_rel_err_by_generated_length" in d:
            pts = [[int(k.split("-")[1]), num(v)] for k, v in d["decode_rel_err_by_generated_length"].items()]
        else:
            pts = [[int(b["tokens"].split("-")[1]), num(b["err_rel"])] for b in d.get("buckets", [])]
        if pts:
            out.append({"id": c["id"], "status": c["status"], "points": pts, "growth": num(d.get("growth"))})
    return out


def build(measurements: list[dict], meta: dict, plots: dict[str, str], results: dict | None, xfails: dict) -> dict:
    causes = {}
    for cid, e in xfails.items():
        entry = causes.setdefault(e.cause, {"cause": e.cause, "ids": [], "measured": e.measured, "regime": e.regime,
                                            "devices": e.devices and list(e.devices),
                                            "profiles": e.profiles and list(e.profiles)})
        entry["ids"].append(cid)
    return {"schema_version": SCHEMA_VERSION, "tool": "verify report", **meta,
            "unit_roundoffs": {k: v for k, v in UNIT_ROUNDOFF.items() if k != "fp64"},
            "bounds": {k: {"formula": f, "source": s} for k, (f, s) in bounds.BOUNDS.items()},
            "plots": [{"file": f, "caption": c} for f, c in plots.items()],
            "points": [point_json(m) for m in measurements],
            "checks": None if results is None else strict(checks_of(results), "", {}),
            "decode_by_length": None if results is None else strict(decode_by_length(results), "", {}),
            "expected_failures": list(causes.values())}


def write_json(doc: dict, path: Path) -> None:
    path.write_text(json.dumps(doc, indent=1, allow_nan=False))


# ------------------------------------------------------------------------------------------- markdown

NONFINITE = {"inf": "non-finite (+inf)", "-inf": "non-finite (-inf)", "nan": "non-finite (NaN)"}


def _fmt(x) -> str:
    """A number for the reader: 3 significant digits; a non-finite one named as such, with its kind."""
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isfinite(x):
            return f"{x:.2e}"
        return NONFINITE["nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")]
    return str(x)


def _x(p: dict) -> str:
    x = value(p, "x")
    return f"{x:.3g}" if math.isfinite(x) else _fmt(x)


def _text(v) -> str:
    """A dict / list / value of report.json as readable text (no Python or JSON syntax)."""
    if v is None:
        return "-"
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_text(x)}" for k, x in v.items()) if v else "-"
    if isinstance(v, (list, tuple)):
        return ", ".join(_text(x) for x in v) if v else "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return _fmt(v)


def _fractions(p: dict) -> str:
    f = p["fraction"]
    n = f"{p['sequences']} sequences, " if p.get("sequences") else ""
    return (f"{n}decided correctly by the kernel {f['kernel']:.0%}, the same-dtype implementation "
            f"{f['same_dtype']:.0%}, the float64 oracle {f['oracle']:.0%}")


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a | inside (|x|, ||A||) would end the cell."""
    return str(text).replace("|", "\\|")


def _worst_tensor(p: dict) -> tuple[str, float | None]:
    """(name, error) of the point's worst tensor; ("-", None) for a point without tensors."""
    ts = [(t["name"], value(p, f"tensors.{i}.err_rel")) for i, t in enumerate(p.get("tensors") or [])]
    return max(ts, key=lambda t: t[1] if not math.isnan(t[1]) else math.inf, default=("-", None))


def bound_table(points: list[dict]) -> list[str]:
    """One table row per op / pass / dtype / plot: at how many points each bound is vacuous, where the kernel
    exceeds a bound, and the verdict in words."""
    groups = defaultdict(list)
    for p in points:
        if p.get("bound"):
            groups[(p["plot"], p["op"], p["pass"], p["dtype"])].append(p)
    if not groups:
        return ["No point has an a-priori bound."]
    lines = ["| op | pass | dtype | plot | deterministic bound vacuous | probabilistic bound vacuous | kernel above "
             "a bound (x: tensor error > bound) | verdict |", "|---|---|---|---|---|---|---|---|"]
    for (plot, op, pass_, dtype), ps in groups.items():
        vac = [p for p in ps if p["bound"]["vacuous"]]
        pvac = [p for p in ps if not value(p, "bound.probabilistic") <= 1]
        over = [(p, *_worst_tensor(p)) for p in ps if not p["bound"]["vacuous"]]
        over = [(p, n, e) for p, n, e in over if not e <= value(p, "bound.deterministic")]
        pover = [(p, *_worst_tensor(p)) for p in ps if value(p, "bound.probabilistic") <= 1]
        pover = [(p, n, e) for p, n, e in pover if not e <= value(p, "bound.probabilistic")]
        above = [f"deterministic at {_x(p)}: {n} {_fmt(e)} > {_fmt(value(p, 'bound.deterministic'))}"
                 for p, n, e in over]
        above += [f"probabilistic at {_x(p)}: {n} {_fmt(e)} > {_fmt(value(p, 'bound.probabilistic'))}"
                  for p, n, e in pover]
        if over:
            verdict = "EXCEEDS the deterministic bound"
        elif pover:
            verdict = "exceeds the probabilistic bound only"
        elif len(vac) == len(pvac) == len(ps):
            verdict = "no bound says anything: certified by measurement only"
        else:
            verdict = "below every bound that is not vacuous"
        lines.append(f"| {label(op)} | {pass_} | {dtype} | {plot} | {len(vac)} of {len(ps)} | {len(pvac)} of {len(ps)} "
                     f"| {_cell('; '.join(above)) or '-'} | {verdict} |")
    lines += ["", "Vacuous: some n u >= 1 (gamma_n undefined) or the bound is above 1 relative."]
    return lines


def markdown(doc: dict) -> str:
    pts = doc["points"]
    workers = "" if doc["workers"] == 1 else f", {doc['workers']} workers"
    out = [f"# Error-bound report: {doc['device']}, profile {doc['profile']}", "",
           f"`{doc['command']}`; created {doc['created']}; {len(pts)} points in {doc['wall_seconds']:.0f} s wall "
           f"({doc['cpu_seconds']:.0f} s CPU in this process{workers}); seed {doc['seed']}.", "",
           "Every point: the kernel against the float64 oracle (`references/`), next to the plain PyTorch "
           "implementation in the same dtype (`verify/same_dtype.py`, the budget basis of the checks: the larger of its "
           "error, the output's rounding and the storage unit roundoff) and the a-priori bounds below. Errors are "
           "normwise relative (`verify/core/metrics.py`). All numbers are in `report.json`.", ""]
    out += ["## Plots", "", READING, ""]
    for p in doc["plots"]:
        out += [f"![{p['caption']}]({p['file']})", "", f"*{p['caption']}.*", ""]
    out += ["## What the plots say", ""] + findings(pts) + [""]
    out += ["## A-priori bounds", "", "| bound | formula | source |", "|---|---|---|"]
    out += [f"| {k} | {_cell(b['formula'])} | {_cell(b['source'])} |" for k, b in doc["bounds"].items()]
    out += ["", "Unit roundoffs: " + ", ".join(f"{k} {v:.3g}" for k, v in doc["unit_roundoffs"].items()) + ".", "",
            "### Kernels against the bounds", ""] + bound_table(pts) + [""]
    out += ["## Worst cases found by the targeted search", ""]
    if doc["checks"] is None:
        out += ["No check results were given (`--results FILE`), so this report ran no search: run "
                "`verify kernels --json R.json` and pass `--results R.json` to list the worst cases here.", ""]
    else:
        out += [f"From `{doc['results_file']}` (kernel checks, worst measured/budget first).", "",
                "| check | status | measured / budget | example | reproduce |", "|---|---|---|---|---|"]
        out += [f"| `{c['id']}` | {c['status']} | {_fmt(c['measured'])} / {_fmt(c['budget'])} | {_cell(c['example'] or '-')} "
                f"| `{c['repro']}` |" for c in doc["checks"][:WORST_CASES]]
        out += [""]
    if doc.get("decode_by_length"):
        out += ["## Decode error against generated length (the layer checks)", "",
                f"From `{doc['results_file']}`: each `layer.*.generation` check's decoded outputs against the float64 "
                "literal, normwise relative error per bucket of generated tokens (the last token of each bucket).", "",
                "| check | status | growth (last / first bucket) | error by generated tokens |", "|---|---|---|---|"]
        out += [f"| `{g['id']}` | {g['status']} | {_fmt(g['growth'])} | "
                + ", ".join(f"{n}: {_fmt(e)}" for n, e in g["points"]) + " |" for g in doc["decode_by_length"]]
        out += [""]
    out += ["## Expected failures (verify/run/expected_failures.toml)", "", "| checks | measured (first listed) | cause |",
            "|---|---|---|"]
    for e in doc["expected_failures"]:
        ids = e["ids"]
        shown = ", ".join(f"`{i}`" for i in ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        scope = "".join(f" ({k}: {', '.join(e[k])})" for k in ("devices", "profiles") if e.get(k))
        out += [f"| {shown}{scope} | {_cell(e['measured'])} | {_cell(e['cause'])} |"]
    env = doc["environment"]
    out += ["", "## Environment", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_cell(_text(v))} |" for k, v in env.items()]
    out += ["", "## Points", "",
            "| id | x | worst tensor | error | same-dtype | budget ratio | bound (det / prob) | status |",
            "|---|---|---|---|---|---|---|---|"]
    for p in pts:
        name, err = _worst_tensor(p)
        same = max((value(p, f"tensors.{i}.same_dtype_rel") for i, t in enumerate(p.get("tensors") or [])
                    if "same_dtype_rel" in t), default=None)
        ratio = max((value(p, f"tensors.{i}.ratio") for i, t in enumerate(p.get("tensors") or []) if "ratio" in t),
                    default=None)
        b = p.get("bound")
        bnd = f"{_fmt(value(p, 'bound.deterministic'))} / {_fmt(value(p, 'bound.probabilistic'))}" if b else "-"
        extra = f": {_fractions(p)}" if p.get("fraction") else (f" ({p['message']})" if p.get("message") else "")
        out += [f"| `{p['id']}` | {_x(p)} | {name} | {_fmt(err)} | {_fmt(same)} | {_fmt(ratio)} | {bnd} | "
                f"{_cell(p['status'] + extra)} |"]
    return "\n".join(out) + "\n"


def findings(pts: list[dict]) -> list[str]:
    """Fitted growth exponents, the state-tracking reach, the MDN map's extremes, the points over budget."""
    lines = []
    groups = defaultdict(list)
    for p in pts:
        if p["plot"] == "T" and p.get("tensors"):
            groups[(p["op"], p["pass"], p["dtype"])].append(p)
    if groups:
        lines += [f"Fitted growth exponents p of error ~ T^p (least squares over the finite points; '-': fewer than "
                  f"{MIN_FIT_POINTS} finite points, no exponent fitted):", "",
                  "| op | pass | dtype | T | exponent p per tensor |", "|---|---|---|---|---|"]
        for (op, pass_, dtype), ps in groups.items():
            names = [t["name"] for t in ps[0]["tensors"]]
            fits = []
            for i, n in enumerate(names):
                p_ = growth_exponent([p["x"] for p in ps], [value(p, f"tensors.{i}.err_rel") for p in ps])
                fits.append(f"{n} {round(p_, 2) + 0.0:.2f}" if p_ is not None else f"{n} -")
            Ts = ", ".join(f"{p['x']:g}" for p in sorted(ps, key=lambda p: p["x"]))
            lines.append(f"| {label(op)} | {pass_} | {dtype} | {Ts} | {', '.join(fits)} |")
        lines.append("")
    for op in dict.fromkeys(p["op"] for p in pts if p["plot"] == "state"):
        for dtype in ("bf16", "fp32"):
            st = [p for p in pts if p["plot"] == "state" and p["op"] == op and p["dtype"] == dtype and p.get("fraction")]
            if st:
                wrong = ", ".join(f"{p['x']:g} ({p['fraction']['kernel']:.0%} correct; same-dtype implementation "
                                  f"{p['fraction']['same_dtype']:.0%})" for p in st if p["fraction"]["kernel"] < 1)
                tried = max(p["x"] for p in st)
                best = largest_correct(st)
                upto = f"up to n = {best:g}" if best else f"at no n tried (smallest: {min(p['x'] for p in st):g})"
                lines.append(f"- State tracking, {label(op)} {dtype}: every sequence decided correctly {upto}"
                             + (f"; wrong at n = {wrong}" if wrong else f" (largest n tried: {tried:g})"))
    maps = [p for p in pts if p["plot"] == "mdn_map" and p.get("tensors")]
    for what, ops in map_panels(p["op"] for p in maps):
        mine = [(p, value(p, "tensors.0.err_rel")) for p in maps if p["op"] in ops]
        worst = max(mine, key=lambda m: m[1] if not math.isnan(m[1]) else math.inf)
        nonfin = [p for p, e in mine if not math.isfinite(e)]
        lines.append(f"- MDN map, {what}: worst output error {_fmt(worst[1])} at log mu = {worst[0]['nominal']:g} "
                     f"({worst[0]['op']})" + (f"; non-finite at {len(nonfin)} of {len(mine)} cells" if nonfin else ""))
    over = [p["id"] for p in pts if p["status"] == "fail"]
    lines += ["", f"{len(over)} of {len(pts)} points exceed the checks' budget or fail outright"
              + (": " + ", ".join(f"`{i}`" for i in over) if over else "") + "."]
    return lines
