"""`verify report --compare OLD/report.json NEW/report.json [--out DIR]`: what changed between two reports.

Regressions (exit status 1): a point whose error grew by more than GROWTH x (per tensor), a new non-finite
error, a point or a check whose status went from pass to fail (or error).  Also listed: improvements, other
status changes, points present in one report only.  Reports of different kinds (SAME_KIND: profile, device,
fp32 dot, kernel package) are refused (exit 2): their points share ids but not inputs or arithmetic.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.report.document import SCHEMA_VERSION, strict, value
from pathmdn_verify.run.xfail_list import identity

GROWTH = 2.0
BAD = ("fail", "error")
SAME_KIND = ("profile", "device", "fp32_dot")


def load(path: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--compare {path}: not readable as JSON ({exc})".splitlines()[0]) from exc
    if not isinstance(doc, dict) or doc.get("tool") != "verify report" or "points" not in doc:
        raise UsageError(f"--compare {path}: not a `verify report` report.json")
    if doc.get("schema_version") == 1:
        doc = from_schema_1(doc)
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"--compare {path}: schema_version {doc.get('schema_version')}, this verify reads {SCHEMA_VERSION}")
    return doc


def from_schema_1(doc: dict) -> dict:
    """Schema 1 (reports written before the same-dtype rename) named the same-dtype implementation's numbers
    tensors[].ref_rel and fraction.reference; schema 2 says same_dtype_rel and fraction.same_dtype."""
    for p in doc["points"]:
        for t in p.get("tensors") or []:
            if "ref_rel" in t:
                t["same_dtype_rel"] = t.pop("ref_rel")
        if isinstance(p.get("fraction"), dict) and "reference" in p["fraction"]:
            p["fraction"]["same_dtype"] = p["fraction"].pop("reference")
    return {**doc, "schema_version": 2}


def kernel_package(doc: dict) -> str | None:
    """The report's kernel package as "<name> <version>[@commit]" (None: a report that does not record it)."""
    return identity(doc.get("environment", {}).get("kernel_package"))


def refuse_other_kinds(old: dict, new: dict, old_path: str, new_path: str) -> str:
    """UsageError unless the two reports are of the same kind (SAME_KIND and the kernel package); the note
    for the first line when a report does not record its kernel package ("" otherwise)."""
    differ = [f"{k} {old.get(k)} vs {new.get(k)}" for k in SAME_KIND if old.get(k) != new.get(k)]
    a, b = kernel_package(old), kernel_package(new)
    if a and b and a != b:
        differ.append(f"kernel package {a} vs {b}")
    if differ:
        raise UsageError(f"--compare {old_path} {new_path}: reports of different kinds ({'; '.join(differ)}): "
                         "compare reports of one profile, device, fp32 dot and kernel package")
    unknown = [path for path, pkg in ((old_path, a), (new_path, b)) if pkg is None]
    return f" (kernel package not recorded in {' and '.join(unknown)}: not compared)" if unknown else ""


def changes(old: dict, new: dict) -> dict[str, list[dict]]:
    """{regressions, improvements, status, only_old, only_new}: one dict per finding (id, what, old, new)."""
    o_pts, n_pts = {p["id"]: p for p in old["points"]}, {p["id"]: p for p in new["points"]}
    out = {"regressions": [], "improvements": [], "status": [], "only_old": sorted(o_pts.keys() - n_pts.keys()),
           "only_new": sorted(n_pts.keys() - o_pts.keys())}
    for pid in sorted(o_pts.keys() & n_pts.keys()):
        a, b = o_pts[pid], n_pts[pid]
        a_t = {t["name"]: i for i, t in enumerate(a.get("tensors") or [])}
        for j, t in enumerate(b.get("tensors") or []):
            if t["name"] not in a_t:
                continue
            e0, e1 = value(a, f"tensors.{a_t[t['name']]}.err_rel"), value(b, f"tensors.{j}.err_rel")
            where = {"id": pid, "tensor": t["name"], "old": e0, "new": e1}
            if math.isfinite(e0) and not math.isfinite(e1):
                out["regressions"].append({**where, "what": "new non-finite error"})
            elif math.isfinite(e1) and e1 > GROWTH * e0:
                grew = f"{e1 / e0:.1f}x" if e0 > 0 else "from exactly 0"
                out["regressions"].append({**where, "what": f"error grew {grew}"})
            elif math.isfinite(e0) and e0 > GROWTH * e1:
                out["improvements"].append({**where, "what": f"error shrank {e0 / e1:.1f}x" if e1 > 0 else "now exact"})
        if a["status"] != b["status"]:
            _status(out, pid, "point", a["status"], b["status"])
    o_chk = {c["id"]: c["status"] for c in old.get("checks") or []}
    n_chk = {c["id"]: c["status"] for c in new.get("checks") or []}
    for cid in sorted(o_chk.keys() & n_chk.keys()):
        if o_chk[cid] != n_chk[cid]:
            _status(out, cid, "check", o_chk[cid], n_chk[cid])
    return out


def _status(out: dict, id_: str, kind: str, old: str, new: str) -> None:
    entry = {"id": id_, "what": f"{kind} status {old} -> {new}", "old": old, "new": new}
    out["regressions" if new in BAD and old not in BAD else "status"].append(entry)


def _line(c: dict) -> str:
    nums = ""
    if isinstance(c.get("old"), float):
        nums = f" ({c.get('tensor')}: {c['old']:.3e} -> {c['new']:.3e})"
    return f"{c['id']}: {c['what']}{nums}"


def text(found: dict, old_path: str, new_path: str, note: str = "") -> str:
    lines = [f"verify report --compare {old_path} {new_path}{note}"]
    titles = {"regressions": "REGRESSIONS", "status": "other status changes", "improvements": "improvements",
              "only_old": "points only in the old report", "only_new": "points only in the new report"}
    for key, title in titles.items():
        items = found[key]
        lines.append(f"{title}: {len(items)}")
        lines += [f"  {_line(c) if isinstance(c, dict) else c}" for c in items]
    return "\n".join(lines) + "\n"


def plot(old: dict, new: dict, found: dict, out: Path) -> str:
    """Old vs new error of every tensor of every common point (log-log), regressions in red."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pathmdn_verify.report.plots import DPI, sci_axis
    o_pts = {p["id"]: p for p in old["points"]}
    bad = {(c["id"], c.get("tensor")) for c in found["regressions"]}
    xy, red = [], []
    for b in new["points"]:
        a = o_pts.get(b["id"])
        for j, t in enumerate(b.get("tensors") or []):
            i = next((i for i, s in enumerate(a.get("tensors") or []) if s["name"] == t["name"]), None) if a else None
            if i is None:
                continue
            pair = (value(a, f"tensors.{i}.err_rel"), value(b, f"tensors.{j}.err_rel"))
            (red if (b["id"], t["name"]) in bad else xy).append(pair)
    fig, ax = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
    finite = [v for p in xy + red for v in p if 0 < v < math.inf]
    lo, hi = (min(finite) / 2, max(finite) * 2) if finite else (1e-8, 1)
    clip = lambda v: min(max(v, lo), hi) if not math.isnan(v) else hi   # noqa: E731  non-finite at the edge
    for pts, style, label in ((xy, "o", "unchanged within 2x / better"), (red, "rX", "regression")):
        ax.plot([clip(a) for a, _ in pts], [clip(b) for _, b in pts], style, ms=4, label=f"{label} ({len(pts)})")
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.5, label="new = old")
    ax.plot([lo, hi], [GROWTH * lo, GROWTH * hi], "k:", lw=0.5, label=f"new = {GROWTH:g} x old")
    ax.set(xscale="log", yscale="log", xlabel="old relative error", ylabel="new relative error",
           title=f"Which errors grew more than {GROWTH:g}x from the old report to the new?")
    sci_axis(ax.xaxis)
    sci_axis(ax.yaxis)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, frameon=False)
    fig.savefig(out / "compare.png", dpi=DPI)
    plt.close(fig)
    return "compare.png"


def run(old_path: str, new_path: str, out: str | None) -> int:
    old, new = load(old_path), load(new_path)
    note = refuse_other_kinds(old, new, old_path, new_path)
    found = changes(old, new)
    report = text(found, old_path, new_path, note)
    print(report, end="")
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        image = plot(old, new, found, folder)
        (folder / "compare.md").write_text(f"# Report diff\n\n![old vs new error]({image})\n\n```\n{report}```\n")
        nonfinite: dict[str, str] = {}
        doc = {**strict(found, "", nonfinite), "nonfinite": nonfinite}
        (folder / "compare.json").write_text(json.dumps(doc, indent=1, allow_nan=False))
    return 1 if found["regressions"] else 0
