"""The report's plots (matplotlib, Agg): each measured error next to the same-dtype implementation's error and the
a-priori bounds.  Every function takes the point records of one plot family and writes PNGs into a folder,
returning {file name: caption}; ops are named by their records (pathmdn_verify.report.sweeps.label), never here.
Non-finite errors are drawn at the top edge (red ^), exact zeros at the bottom edge (v), vacuous bounds
(gamma_n undefined, or above 1 relative) above the non-finite errors (grey x).  Every PNG is DPI dots per
inch, every legend outside the data area.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

DPI = 150                    # every PNG (a reader's screen; the PNG's pHYs chunk records it)
FONT = {"title": 11, "panel": 10, "label": 9, "tick": 8, "legend": 8, "note": 7.5}
MIN_FIT_POINTS = 3           # a slope through two points is no measured growth exponent
PANEL = (4.4, 3.2)           # inches of one panel's data area; its legend goes to the right of it
LEGEND = 2.9                 # inches beside each panel for its legend


def label(op: str) -> str:
    """A point's op in the report's words (from the op's record: pathmdn_verify.report.sweeps)."""
    from pathmdn_verify.report.sweeps import label as op_label
    return op_label(op)


def _num(v) -> float:
    return math.inf if v is None else float(v)


def _vacuous(bound: float) -> float:
    """A bound above 1 (relative) says nothing: drawn as vacuous (inf), like an undefined gamma_n."""
    return bound if bound <= 1 else math.inf


def growth_exponent(xs, ys) -> float | None:
    """Least-squares slope of log y on log x over the finite positive points (None with fewer than
    MIN_FIT_POINTS distinct x)."""
    pts = [(x, y) for x, y in zip(xs, ys) if x > 0 and 0 < y < math.inf]
    if len({p[0] for p in pts}) < MIN_FIT_POINTS:
        return None
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(lx, ly, 1)[0])


def _draw(ax, xs, ys, label, style, edge, colour=None) -> None:
    """ys with inf (non-finite; for a bound: vacuous) at the top edge and 0 at the bottom edge, the rest as a
    line.  edge: (bottom, non-finite errors, vacuous bounds), so a vacuous bound never covers a non-finite
    error.  Each legend entry is made only where something is drawn: a bound with no finite point has no
    line, so no line entry (only its 'vacuous' markers)."""
    lo, hi, top = edge
    fin = [(x, y) for x, y in zip(xs, ys) if 0 < y < math.inf]
    if fin:
        ax.plot([p[0] for p in fin], [p[1] for p in fin], style, label=label, ms=5, color=colour)
    inf = [x for x, y in zip(xs, ys) if not y < math.inf]
    zero = [x for x, y in zip(xs, ys) if y == 0]
    if inf:
        bound = "bound" in label
        marker = ("+" if "probabilistic" in label else "x") if bound else "^"   # x and + overlaid stay apart
        ax.plot(inf, [top if bound else hi] * len(inf), marker, color="0.45" if bound else "red",
                ms=8, ls="none", label=f"{label}: {'vacuous' if bound else 'non-finite'}")
    if zero:
        ax.plot(zero, [lo] * len(zero), "v", color=colour, ms=7, ls="none", label=f"{label}: exactly 0")


def _legend(ax) -> None:
    """The panel's legend outside its data area (to the right), one entry per label."""
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    if seen:
        ax.legend(seen.values(), seen.keys(), fontsize=FONT["legend"], loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0, frameon=False)


def error_panel(ax, recs: list[dict], xlabel: str, fit: bool) -> None:
    """One op / pass / dtype: every tensor's error (colour per tensor, solid), the same-dtype implementation's
    (dashed, same colour), and the a-priori bounds of the forward model (black solid, dotted)."""
    recs = sorted((r for r in recs if r.get("tensors")), key=lambda r: r["x"])
    if not recs:
        ax.set_visible(False)
        return
    xs = [r["x"] for r in recs]
    names = list(dict.fromkeys(t["name"] for r in recs for t in r["tensors"]))

    def err(key, name):
        return [_num(next((t.get(key) for t in r["tensors"] if t["name"] == name), math.nan)) for r in recs]
    errs = {n: err("err_rel", n) for n in names}
    same = {n: err("same_dtype_rel", n) for n in names} if "same_dtype_rel" in recs[0]["tensors"][0] else {}
    det, prob = ([_vacuous(_num(r["bound"][k])) for r in recs] for k in ("deterministic", "probabilistic"))
    finite = [y for ys in [*errs.values(), *same.values(), det, prob] for y in ys if 0 < y < math.inf]
    lo, hi = (min(finite) / 3, max(finite) * 3) if finite else (1e-8, 1.0)
    edge = (lo, hi, hi * 3)
    for i, n in enumerate(names):
        colour = f"C{i % 10}"
        p = growth_exponent(xs, errs[n]) if fit else None
        _draw(ax, xs, errs[n], n + (f" (T^{round(p, 2) + 0.0:.2f})" if p is not None else ""), "o-", edge, colour)
        if n in same:
            _draw(ax, xs, same[n], f"{n} same-dtype", "--", edge, colour)
    _draw(ax, xs, det, "a-priori bound", ".-", edge, "black")      # a marker: a lone finite bound shows too
    _draw(ax, xs, prob, "probabilistic bound", ".:", edge, "black")
    ax.set_yscale("log")
    ax.set_ylim(lo / 1.8, edge[2] * 1.8)
    ax.set_xlabel(xlabel, fontsize=FONT["label"])
    ax.set_ylabel("normwise relative error", fontsize=FONT["label"])
    ax.tick_params(labelsize=FONT["tick"])
    ax.grid(True, which="major", lw=0.4, alpha=0.4)
    _legend(ax)


def _log_ticks(ax, xs) -> None:
    """Ticks at the measured x values, plainly labelled (no minor ticks)."""
    ticks = sorted(set(xs))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xticks(ticks, [f"{t:.4g}" for t in ticks], fontsize=FONT["tick"], rotation=30 if len(ticks) > 4 else 0)


def _figure(rows: int, cols: int, legend: bool = True):
    """A constrained-layout grid of panels, each with room to its right for its legend."""
    width = (PANEL[0] + (LEGEND if legend else 0)) * cols
    return plt.subplots(rows, cols, figsize=(width, PANEL[1] * rows + 0.6), squeeze=False, layout="constrained")


def _save(fig, out: Path, name: str) -> str:
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    return name


def versus_T(records: list[dict], out: Path) -> dict[str, str]:
    """Per op: error vs T (log-log); rows forward / backward, columns dtypes; every output and every gradient,
    with its fitted growth exponent in the legend."""
    made = {}
    for op in dict.fromkeys(r["op"] for r in records):
        mine = [r for r in records if r["op"] == op]
        dtypes = list(dict.fromkeys(r["dtype"] for r in mine))
        passes = list(dict.fromkeys(r["pass"] for r in mine))
        fig, axes = _figure(len(passes), len(dtypes))
        fig.suptitle(f"{label(op)}: error vs sequence length T", fontsize=FONT["title"])
        for i, pass_ in enumerate(passes):
            for j, dtype in enumerate(dtypes):
                recs = [r for r in mine if r["pass"] == pass_ and r["dtype"] == dtype]
                error_panel(axes[i][j], recs, "T", fit=True)
                axes[i][j].set_xscale("log")
                _log_ticks(axes[i][j], [r["x"] for r in recs])
                axes[i][j].set_title(f"{'forward' if pass_ == 'fwd' else 'gradients'}, {dtype}", fontsize=FONT["panel"])
        made[_save(fig, out, f"T_{op}.png")] = (
            f"{label(op)}: normwise relative error vs T (log-log) of the forward output(s) and of each "
            f"gradient, per dtype, with the same-dtype implementation (dashed) and the a-priori bounds (black); "
            f"growth exponent fitted over {MIN_FIT_POINTS} or more finite points in the legend")
    return made


def _by_op_dtype(records: list[dict], out: Path, name: str, title: str, xlabel: str, caption: str, beta_axis=False,
                 annotate: str | None = None):
    """One row per op, one column per dtype, error of o vs the point's x; annotate: a magnitudes key written
    beside each kernel point."""
    ops = list(dict.fromkeys(r["op"] for r in records))
    dtypes = list(dict.fromkeys(r["dtype"] for r in records))
    if not ops:
        return {}
    fig, axes = _figure(len(ops), len(dtypes))
    fig.suptitle(title, fontsize=FONT["title"])
    for i, op in enumerate(ops):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            recs = [r for r in records if r["op"] == op and r["dtype"] == dtype]
            if beta_axis:     # beta = 2 exactly: drawn at the axis end, a decade below the smallest gap
                gaps = [r["x"] for r in recs if r["x"] > 0]
                end = min(gaps) / 10 if gaps else 1e-8
                recs = [{**r, "x": r["x"] if r["x"] > 0 else end} for r in recs]
            error_panel(ax, recs, xlabel, fit=False)
            ax.set_xscale("log")
            _log_ticks(ax, [r["x"] for r in recs])
            for r in recs if annotate else ():
                err = _num(r["tensors"][0]["err_rel"]) if r.get("tensors") else math.inf
                if 0 < err < math.inf:
                    ax.annotate(f"{r['magnitudes'][annotate]:.2f}", (r["x"], err), fontsize=FONT["note"],
                                xytext=(3, -11), textcoords="offset points")
            if beta_axis and recs:
                ticks = sorted({r["x"] for r in recs})
                ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
                ax.set_xticks(ticks, [("beta = 2" if t == end else f"{t:.0e}") for t in ticks], fontsize=FONT["tick"],
                              rotation=30)
                ax.invert_xaxis()
            ax.set_title(f"{label(op)}, {dtype}", fontsize=FONT["panel"])
    return {_save(fig, out, name): caption}


def _joined(ops) -> str:
    words = [label(o) for o in ops]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def regimes(records: list[dict], out: Path) -> dict[str, str]:
    """Per op of the beta and alignment sweeps (the PaTH family's: pathmdn_verify.report.sweeps.points): error vs
    2 - beta and vs the UT system's condition; every op of the gate and magnitude sweeps: error vs gate
    strength and vs the largest |q|, |k|."""
    made = {}
    by = {p: [r for r in records if r["plot"] == p and r.get("tensors")] for p in ("beta", "align", "gate", "magnitude")}
    for op in dict.fromkeys(r["op"] for r in by["beta"]):
        made |= _by_op_dtype([r for r in by["beta"] if r["op"] == op], out, f"beta_{op}.png",
                             f"{label(op)}: error vs 2 - beta (beta -> 2 to the right)",
                             "2 - beta (fp32 as stored; right end: beta = 2 exactly)",
                             f"{label(op)} forward error vs 2 - beta on a log axis down to beta = 2 exactly (the "
                             f"axis end)", beta_axis=True)
    for op in dict.fromkeys(r["op"] for r in by["align"]):
        made |= _by_op_dtype([r for r in by["align"] if r["op"] == op], out, f"align_{op}.png",
                             f"{label(op)}: error vs the UT system's condition (consecutive w aligned, beta = 2)",
                             "cond(I + strictLower(diag(beta) W W^T)), largest 64-block",
                             f"{label(op)} forward error vs the measured condition number of the UT system, swept "
                             f"by the alignment of consecutive w (beta = 2; mean |w_t . w_t+1| beside each point)",
                             annotate="alignment")
    if by["gate"]:
        ops = _joined(dict.fromkeys(r["op"] for r in by["gate"]))
        made |= _by_op_dtype(by["gate"], out, "gate.png", f"{ops}: error vs gate strength",
                             "gate strength: -mean log f",
                             f"{ops} forward error vs gate strength (minus the mean log forget gate)")
    if by["magnitude"]:
        ops = _joined(dict.fromkeys(r["op"] for r in by["magnitude"]))
        made |= _by_op_dtype(by["magnitude"], out, "magnitude.png", "Large inputs: error vs the largest |q|, |k|",
                             "max |q|, |k|", f"{ops} forward error vs the largest |q|, |k| (inputs scaled up "
                             "to 1e6); a lost range shows as a step to non-finite (red ^)")
    return made


def map_panels(ops) -> list[tuple[str, list[str]]]:
    """The MDN map's panels from the points' ops, in their order: one per kind of implementation (a
    family's chunked kernels together, each unchunked kernel alone, each reference form), columns by chunk
    size: [(title, [op, ...])]."""
    from pathmdn_verify.report.sweeps import FAMILIES, FORMS, measured
    known = measured()
    panels: dict[tuple, tuple[str, list[str]]] = {}
    for op in dict.fromkeys(ops):
        o = known.get(op)
        if o is None:
            key, title = ("?", op), op
        elif o.family == "form":
            key, title = ("form", o.name), f"{FORMS[o.name]} ({o.dtypes[0]})"
        elif o.chunk is not None:
            key, title = (o.family, "chunked"), f"{o.record.impl} chunked {FAMILIES[o.family]} ({o.dtypes[0]})"
        else:
            key, title = (o.family, op), f"{o.record.impl} {op} ({o.dtypes[0]})"
        panels.setdefault(key, (title, []))[1].append(op)
    return [(title, sorted(cols, key=lambda c: known[c].chunk or 0 if c in known else 0))
            for title, cols in panels.values()]


def _chunk_of(op: str) -> str:
    from pathmdn_verify.report.sweeps import measured
    o = measured().get(op)
    return "-" if o is None or o.chunk is None else str(o.chunk)


def mdn_map(records: list[dict], out: Path) -> dict[str, str]:
    """Heat maps of the output's error over log mu x chunk size: fla's chunk path, the fused recurrent kernel,
    the stable and the log-domain chunk forms in fp32 (references/mdn_oracle.py), one colour scale."""
    if not records:
        return {}
    floors = sorted({r["nominal"] for r in records}, reverse=True)

    def err(r):
        t = next((t for t in r.get("tensors", []) if t["name"] == "o"), None)
        return math.nan if t is None else _num(t["err_rel"])

    grids = []
    for title, cols in map_panels(r["op"] for r in records):
        grid = np.array([[next((err(r) for r in records if r["op"] == c and r["nominal"] == f), math.nan)
                          for c in cols] for f in floors])
        grids.append((title, cols, grid))
    finite = np.concatenate([g[np.isfinite(g) & (g > 0)] for _, _, g in grids])
    norm = LogNorm(vmin=max(finite.min(), 1e-9), vmax=max(finite.max(), 1e-8)) if finite.size else LogNorm(1e-8, 1)
    widths = [max(len(c), 1) + 0.8 for _, c, _ in grids]
    fig, axes = plt.subplots(1, len(grids), figsize=(1.15 * sum(widths) + 2.5, 0.42 * len(floors) + 2.4),
                             squeeze=False, gridspec_kw={"width_ratios": widths}, layout="constrained")
    fig.suptitle("MDN: output error over log mu x chunk size (one colour scale; grey: non-finite)",
                 fontsize=FONT["title"])
    for ax, (title, cols, grid) in zip(axes[0], grids):
        shown = np.where(np.isfinite(grid) & (grid > 0), grid, np.nan)
        im = ax.imshow(shown, norm=norm, cmap="viridis", aspect="auto")
        ax.set_facecolor("0.7")
        for (i, j), v in np.ndenumerate(grid):
            dark = np.isfinite(v) and v < (norm.vmax * norm.vmin) ** 0.5
            text = "inf" if v == math.inf else ("nan" if math.isnan(v) else f"{v:.0e}")
            ax.text(j, i, text, ha="center", va="center", fontsize=FONT["tick"], color="white" if dark else "black")
        ax.set_xticks(range(len(cols)), [_chunk_of(c) for c in cols], fontsize=FONT["tick"])
        ax.set_yticks(range(len(floors)), [f"{f:g}" for f in floors], fontsize=FONT["tick"])
        ax.set_xlabel("chunk size" if any(_chunk_of(c) != "-" for c in cols) else "(no chunks)",
                      fontsize=FONT["label"])
        ax.set_ylabel("log mu", fontsize=FONT["label"])
        ax.set_title(textwrap.fill(title, 8 + 9 * max(len(cols), 1)), fontsize=FONT["label"])
    bar = fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9)
    bar.set_label("relative error of o", fontsize=FONT["label"])
    bar.ax.tick_params(labelsize=FONT["tick"])
    fig.savefig(out / "mdn_map.png", dpi=DPI)
    plt.close(fig)
    return {"mdn_map.png": "MDN: heat maps of the output's relative error over log mu (rows) x chunk size (columns) "
                           "for " + ", ".join(t for t, _, _ in grids) + ", one colour scale"}


def largest_correct(records: list[dict]) -> float:
    """The largest n at which the kernel decides every sequence correctly, and at every smaller n tried
    (0 if it fails at the smallest): the rule of verify/checks/state_tracking.py."""
    best = 0.0
    for r in sorted(records, key=lambda r: r["x"]):
        if r["fraction"]["kernel"] < 1:
            break
        best = r["x"]
    return best


def state_tracking(records: list[dict], out: Path) -> dict[str, str]:
    """Fraction of sequences decided correctly vs n (Theorem 2.1's construction), per implementation and dtype,
    with the largest n at which the kernel decides every sequence correctly marked."""
    recs = sorted((r for r in records if r.get("fraction")), key=lambda r: r["x"])
    if not recs:
        return {}
    ops = list(dict.fromkeys(r["op"] for r in recs))
    fig, axes = _figure(1, 1)
    ax = axes[0][0]
    for op in ops:
        who_op = "" if len(ops) == 1 else f" {op}"
        for dtype, marker, ms in (("bf16", "o", 10), ("fp32", "s", 5)):    # bf16 hollow and larger: an fp32
            mine = [r for r in recs if r["dtype"] == dtype and r["op"] == op]  # point on it stays visible
            if not mine:
                continue
            for who, style in (("kernel", "-"), ("same_dtype", "--")):
                ax.plot([r["x"] for r in mine], [r["fraction"][who] for r in mine], marker + style, ms=ms,
                        fillstyle="none" if dtype == "bf16" else "full", lw=2.2 if dtype == "bf16" else 1.2,
                        label=f"kernel{who_op} {dtype}" if who == "kernel" else f"same-dtype{who_op} {dtype}")
            best = largest_correct(mine)
            if best:
                ax.axvline(best, ls=":", lw=2 if dtype == "bf16" else 1, color=ax.lines[-2].get_color(),
                           label=f"largest n decided correctly, kernel{who_op} {dtype}: {best:g}")
    ax.plot([r["x"] for r in recs], [r["fraction"]["oracle"] for r in recs], "k+", label="float64 oracle", ms=9,
            ls="none")
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("n (swaps per sequence)", fontsize=FONT["label"])
    ax.set_ylabel("fraction decided correctly", fontsize=FONT["label"])
    ax.tick_params(labelsize=FONT["tick"])
    ax.grid(True, lw=0.4, alpha=0.4)
    fig.suptitle(f"{_joined(ops)}, Theorem 2.1: identity permutation told from the others", fontsize=FONT["title"])
    _legend(ax)
    return {_save(fig, out, "state_tracking.png"): f"Theorem 2.1 state tracking ({_joined(ops)}): fraction of "
            "sequences decided correctly vs n, per dtype (kernel, same-dtype implementation, float64 oracle); dotted "
            "line: the largest n at which the kernel decides every sequence correctly"}


def decode_by_length(rows: list[dict], out: Path) -> dict[str, str]:
    """One panel: each layer generation check's decode error against generated length (pathmdn_verify.report.document
    .decode_by_length of a --results run), log-log."""
    rows = [r for r in rows if any(e is not None and e > 0 for _, e in r["points"])]
    if not rows:
        return {}
    fig, axes = _figure(1, 1)
    ax = axes[0][0]
    colours = plt.cm.tab20.colors
    for i, r in enumerate(rows):
        pts = [(n, e) for n, e in r["points"] if e is not None and e > 0]
        ax.plot([n for n, _ in pts], [e for _, e in pts], marker="o", color=colours[i % len(colours)],
                label=r["id"].removeprefix("layer.fla."))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("normwise relative error of the decoded outputs")
    _legend(ax)
    return {_save(fig, out, "decode_by_length.png"): "decode error against generated length, per layer, variant "
                                                     "and dtype (the layer checks of --results)"}


def all_plots(records: list[dict], out: Path, decode: list[dict] | None = None) -> dict[str, str]:
    """Every plot the records (and the layer checks' decode errors, when given) allow: {file name: caption}."""
    made = versus_T([r for r in records if r["plot"] == "T"], out)
    made |= regimes(records, out)
    made |= mdn_map([r for r in records if r["plot"] == "mdn_map"], out)
    made |= state_tracking([r for r in records if r["plot"] == "state"], out)
    made |= decode_by_length(decode or [], out)
    return made
