"""The report's plots (matplotlib, Agg).  Each states its question in its title, draws the checks' budget of every
tensor (dashed) next to its error and the a-priori bounds (black), and colours each measured point by its verdict
(VERDICT: within budget, over budget, not judged).  Every function takes the measurements of one plot family
and writes PNGs into a folder, returning {file name: caption}; ops are named by their op records
(pathmdn_verify.report.sweeps.label), never here.  Non-finite errors are drawn at the top edge (red ^), exact
zeros at the bottom edge (v), vacuous bounds (gamma_n undefined, or above 1 relative) above the non-finite
errors (grey x).  Every number on an axis has one format (`tick_text`).  Every PNG is DPI dots per inch,
every legend outside the data area.
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
from matplotlib.patches import Rectangle  # noqa: E402

DPI = 150                    # every PNG (a reader's screen; the PNG's pHYs chunk records it)
FONT = {"title": 11, "panel": 10, "label": 9, "tick": 8, "legend": 8, "note": 7.5}
MIN_FIT_POINTS = 4           # a slope through two or three points is no measured growth exponent
PANEL = (4.4, 3.2)           # inches of one panel's data area; its legend goes to the right of it
LEGEND = 2.9                 # inches beside each panel for its legend
# A measured point's verdict: (marker, colour, legend words).  A tensor is judged by its ratio to the checks'
# budget (pathmdn_verify.core.budget: the relative and the max-abs measure); a reference form is not judged.
VERDICT = {"pass": ("o", "tab:green", "within budget"), "fail": ("X", "tab:red", "over budget"),
           "xfail": ("D", "tab:orange", "expected failure"), "measured": ("o", "0.6", "not judged")}


def label(op: str) -> str:
    """A point's op in the report's words (from its op record: pathmdn_verify.report.sweeps)."""
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


def sci_text(v: float) -> str:
    """A number as a mantissa of at most two digits and a power of ten: 3.5e3, 1e-3."""
    mantissa, exponent = f"{v:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def tick_text(values) -> list[str]:
    """One format for the numbers of one axis: integers where every value is an integer below 10^4 (16, 1024);
    else two significant digits where every value lies in [0.01, 1000) (-0.5, 2.5); else sci_text (3.5e3)."""
    if all(float(v).is_integer() and abs(v) < 1e4 for v in values):
        return [f"{int(v)}" for v in values]
    if all(1e-2 <= abs(v) < 1e3 for v in values):
        return [f"{v:.2g}" for v in values]
    return [sci_text(v) for v in values]


def sci_axis(axis) -> None:
    """A log axis's decades in sci_text's format (1e-3), its minor ticks unlabelled."""
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: sci_text(v) if v > 0 else ""))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


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
    """The panel's legend outside its data area (to the right), one entry per label, the verdicts last."""
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    verdicts = [w for _, _, w in VERDICT.values()]
    seen = {k: seen[k] for k in sorted(seen, key=lambda k: k in verdicts)}
    if seen:
        ax.legend(seen.values(), seen.keys(), fontsize=FONT["legend"], loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0, frameon=False)


def tensor_verdict(t: dict) -> str:
    """pass / fail by the tensor's ratio to its budget (None: non-finite, a failure); measured where the
    tensor is not judged (a reference form's: no ratio)."""
    if "ratio" not in t:
        return "measured"
    return "pass" if _num(t["ratio"]) <= 1 else "fail"


def budget_line(t: dict) -> float:
    """A tensor's budget in units of its relative error: the relative error at which its ratio would be 1,
    err_rel / ratio (the relative budget, or less where the max-abs measure decides); the relative budget
    where that quotient is undefined (an error exactly 0 or non-finite)."""
    err, ratio = _num(t["err_rel"]), _num(t.get("ratio"))
    return err / ratio if 0 < err < math.inf and 0 < ratio < math.inf else _num(t.get("budget_rel"))


def _verdicts(ax, xs, ys, verdicts, lo: float) -> None:
    """The measured points as VERDICT's markers over the lines (an exact zero on its marker at the bottom edge
    `lo`; a non-finite error is _draw's red ^)."""
    for v, (marker, colour, words) in VERDICT.items():
        pts = [(x, y if y > 0 else lo) for x, y, w in zip(xs, ys, verdicts) if w == v and 0 <= y < math.inf]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, color=colour, ms=6 if v != "pass" else 5,
                    ls="none", label=words, zorder=3)


def error_panel(ax, ms: list[dict], xlabel: str, fit: bool) -> None:
    """One op / pass / dtype: every tensor's error (a colour per tensor, solid; its points coloured by verdict),
    the checks' budget for it (dashed, same colour), and the a-priori bounds of the forward model (black solid,
    dotted).  A failed point without a measurement (crashed, timeout, exception) is named in the panel."""
    lost = [m for m in ms if not m.get("tensors") and m.get("status") == "fail"]
    ms = sorted((m for m in ms if m.get("tensors")), key=lambda m: m["x"])
    if not ms and not lost:
        ax.set_visible(False)
        return
    xs = [m["x"] for m in ms]
    names = list(dict.fromkeys(t["name"] for m in ms for t in m["tensors"]))

    def per_point(name, key, default=math.nan):
        ts = [next((t for t in m["tensors"] if t["name"] == name), None) for m in ms]
        return [default if t is None else key(t) for t in ts]
    errs = {n: per_point(n, lambda t: _num(t["err_rel"])) for n in names}
    budgets = {n: per_point(n, budget_line) for n in names
               if any("budget_rel" in t for m in ms for t in m["tensors"] if t["name"] == n)}
    det, prob = ([_vacuous(_num(m["bound"][k])) for m in ms] for k in ("deterministic", "probabilistic"))
    finite = [y for ys in [*errs.values(), *budgets.values(), det, prob] for y in ys if 0 < y < math.inf]
    lo, hi = (min(finite) / 3, max(finite) * 3) if finite else (1e-8, 1.0)
    edge = (lo, hi, hi * 3)
    for i, n in enumerate(names):
        colour = f"C{i % 10}"
        p = growth_exponent(xs, errs[n]) if fit else None
        _draw(ax, xs, errs[n], n + (f" (T^{round(p, 2) + 0.0:.2f})" if p is not None else ""), "-", edge, colour)
        if n in budgets:
            _draw(ax, xs, budgets[n], f"{n} budget", "--", edge, colour)
        _verdicts(ax, xs, errs[n], per_point(n, tensor_verdict, "measured"), lo)
    if ms:
        _draw(ax, xs, det, "a-priori bound", ".-", edge, "black")      # a marker: a lone finite bound shows too
        _draw(ax, xs, prob, "probabilistic bound", ".:", edge, "black")
    if lost:
        kinds = ", ".join(sorted({m.get("kind") or "failed" for m in lost}))
        ax.text(0.02, 0.98, f"{len(lost)} point(s) without a measurement ({kinds}): see report.md",
                transform=ax.transAxes, va="top", fontsize=FONT["note"], color="tab:red")
    ax.set_yscale("log")
    ax.set_ylim(lo / 1.8, edge[2] * 1.8)
    sci_axis(ax.yaxis)
    ax.set_xlabel(xlabel, fontsize=FONT["label"])
    ax.set_ylabel("normwise relative error", fontsize=FONT["label"])
    ax.tick_params(labelsize=FONT["tick"])
    ax.grid(True, which="major", lw=0.4, alpha=0.4)
    _legend(ax)


def _log_ticks(ax, xs, words: dict | None = None) -> None:
    """Ticks at the measured x values in tick_text's one format (no minor ticks); words: {x: text} for a tick
    that is no number (beta = 2 at the axis end)."""
    ticks = sorted(set(xs))
    if not ticks:
        return
    words = words or {}
    numbers = tick_text([t for t in ticks if t not in words])
    texts = [words[t] if t in words else numbers.pop(0) for t in ticks]
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xticks(ticks, texts, fontsize=FONT["tick"], rotation=30 if len(ticks) > 4 else 0)


def _figure(rows: int, cols: int, legend: bool = True):
    """A constrained-layout grid of panels, each with room to its right for its legend."""
    width = (PANEL[0] + (LEGEND if legend else 0)) * cols
    return plt.subplots(rows, cols, figsize=(width, PANEL[1] * rows + 0.6), squeeze=False, layout="constrained")


def _save(fig, out: Path, name: str) -> str:
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    return name


# How every error plot reads (report.md says it once, above the plots); each caption says BUDGET_WORDS.
READING = ("Each plot asks its question in its title. Solid: a tensor's normwise relative error; dashed, in the same "
           "colour: the checks' budget of that tensor (its op's factor times the largest of the same-dtype "
           "implementation's error, the output's rounding and the storage unit roundoff), in relative-error units "
           "(lower where the max-abs budget decides); points green within the budget, red over it (by either "
           "measure), grey where not judged (a reference form); black: the a-priori bounds, grey x / + where "
           "vacuous; red ^ at the top edge: a non-finite error; v at the bottom edge: an error of exactly 0.")
BUDGET_WORDS = "dashed: each tensor's budget; points green within it, red over it"


def versus_T(ms: list[dict], out: Path) -> dict[str, str]:
    """Per op: error vs T (log-log); rows forward / backward, columns dtypes; every output and every gradient,
    with its fitted growth exponent in the legend (from MIN_FIT_POINTS points on)."""
    made = {}
    for op in dict.fromkeys(m["op"] for m in ms):
        mine = [m for m in ms if m["op"] == op]
        dtypes = list(dict.fromkeys(m["dtype"] for m in mine))
        passes = list(dict.fromkeys(m["pass"] for m in mine))
        fig, axes = _figure(len(passes), len(dtypes))
        fig.suptitle(f"Is {label(op)}'s error within the checks' budget as T grows?", fontsize=FONT["title"])
        for i, pass_ in enumerate(passes):
            for j, dtype in enumerate(dtypes):
                panel = [m for m in mine if m["pass"] == pass_ and m["dtype"] == dtype]
                error_panel(axes[i][j], panel, "T", fit=True)
                axes[i][j].set_xscale("log")
                _log_ticks(axes[i][j], [m["x"] for m in panel if m.get("tensors")])
                axes[i][j].set_title(f"{'forward' if pass_ == 'fwd' else 'gradients'}, {dtype}", fontsize=FONT["panel"])
        made[_save(fig, out, f"T_{op}.png")] = (
            f"{label(op)}: normwise relative error vs T (log-log) of the forward output(s) and of each gradient, "
            f"per dtype; {BUDGET_WORDS}; growth exponent fitted over {MIN_FIT_POINTS} or more finite points in the "
            f"legend")
    return made


def _by_op_dtype(ms: list[dict], out: Path, name: str, title: str, xlabel: str, caption: str, beta_axis=False,
                 annotate: str | None = None):
    """One row per op, one column per dtype, error of o vs the point's x; annotate: a magnitudes key written
    beside each kernel point."""
    ops = list(dict.fromkeys(m["op"] for m in ms))
    dtypes = list(dict.fromkeys(m["dtype"] for m in ms))
    if not ops:
        return {}
    fig, axes = _figure(len(ops), len(dtypes))
    fig.suptitle(title, fontsize=FONT["title"])
    for i, op in enumerate(ops):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            panel = [m for m in ms if m["op"] == op and m["dtype"] == dtype]
            words = {}
            if beta_axis:     # beta = 2 exactly: drawn at the axis end, a decade below the smallest gap
                gaps = [m["x"] for m in panel if m["x"] > 0]
                end = min(gaps) / 10 if gaps else 1e-8
                panel = [{**m, "x": m["x"] if m["x"] > 0 else end} for m in panel]
                words = {end: "beta = 2"}
            error_panel(ax, panel, xlabel, fit=False)
            ax.set_xscale("log")
            _log_ticks(ax, [m["x"] for m in panel if m.get("tensors")], words)
            for m in panel if annotate else ():
                err = _num(m["tensors"][0]["err_rel"]) if m.get("tensors") else math.inf
                if 0 < err < math.inf:
                    ax.annotate(f"{m['magnitudes'][annotate]:.2f}", (m["x"], err), fontsize=FONT["note"],
                                xytext=(3, -11), textcoords="offset points")
            if beta_axis and panel:
                ax.invert_xaxis()
            ax.set_title(f"{label(op)}, {dtype}", fontsize=FONT["panel"])
    return {_save(fig, out, name): caption}


def _joined(ops) -> str:
    words = [label(o) for o in ops]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def regimes(ms: list[dict], out: Path) -> dict[str, str]:
    """Per op of the beta and alignment sweeps (the PaTH family's: pathmdn_verify.report.sweeps.points): error vs
    2 - beta and vs the UT system's condition; every op of the gate and magnitude sweeps: error vs gate
    strength and vs the largest |q|, |k|."""
    made = {}
    by = {p: [m for m in ms if m["plot"] == p] for p in ("beta", "align", "gate", "magnitude")}
    for op in dict.fromkeys(m["op"] for m in by["beta"]):
        made |= _by_op_dtype([m for m in by["beta"] if m["op"] == op], out, f"beta_{op}.png",
                             f"Is {label(op)}'s forward error within the checks' budget as beta -> 2?",
                             "2 - beta (fp32 as stored; right end: beta = 2 exactly)",
                             f"{label(op)} forward error vs 2 - beta on a log axis down to beta = 2 exactly (the "
                             f"axis end); {BUDGET_WORDS}", beta_axis=True)
    for op in dict.fromkeys(m["op"] for m in by["align"]):
        made |= _by_op_dtype([m for m in by["align"] if m["op"] == op], out, f"align_{op}.png",
                             f"Is {label(op)}'s forward error within the checks' budget as the UT system's condition "
                             "grows (consecutive w aligned, beta = 2)?",
                             "cond(I + strictLower(diag(beta) W W^T)), largest 64-block",
                             f"{label(op)} forward error vs the measured condition number of the UT system, swept "
                             f"by the alignment of consecutive w (beta = 2; mean |w_t . w_t+1| beside each point); "
                             f"{BUDGET_WORDS}", annotate="alignment")
    if by["gate"]:
        ops = _joined(dict.fromkeys(m["op"] for m in by["gate"]))
        made |= _by_op_dtype(by["gate"], out, "gate.png",
                             f"Are the forward errors of {ops} within the checks' budget as the forget gate "
                             "strengthens?",
                             "gate strength: -mean log f",
                             f"{ops} forward error vs gate strength (minus the mean log forget gate); {BUDGET_WORDS}")
    if by["magnitude"]:
        ops = _joined(dict.fromkeys(m["op"] for m in by["magnitude"]))
        made |= _by_op_dtype(by["magnitude"], out, "magnitude.png",
                             f"Are the forward errors of {ops} within the checks' budget as |q|, |k| grow to 1e6?",
                             "max |q|, |k|", f"{ops} forward error vs the largest |q|, |k| (inputs scaled up "
                             f"to 1e6); a lost range shows as a step to non-finite (red ^); {BUDGET_WORDS}")
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


def mdn_map(ms: list[dict], out: Path) -> dict[str, str]:
    """Heat maps of the output's error over log mu x chunk size: fla's chunk path, the fused recurrent kernel,
    the stable and the log-domain chunk forms in fp32 (references/mdn_oracle.py), one colour scale; each judged
    cell framed in its verdict's colour (a reference form is not judged)."""
    if not ms:
        return {}
    floors = sorted({m["nominal"] for m in ms}, reverse=True)

    def err(m):
        t = next((t for t in m.get("tensors") or [] if t["name"] == "o"), None)
        return math.nan if t is None else _num(t["err_rel"])

    grids = []
    for title, cols in map_panels(m["op"] for m in ms):
        cells = [[next((m for m in ms if m["op"] == c and m["nominal"] == f), None) for c in cols] for f in floors]
        grid = np.array([[math.nan if m is None else err(m) for m in row] for row in cells])
        grids.append((title, cols, grid, cells))
    finite = np.concatenate([g[np.isfinite(g) & (g > 0)] for _, _, g, _ in grids])
    norm = LogNorm(vmin=max(finite.min(), 1e-9), vmax=max(finite.max(), 1e-8)) if finite.size else LogNorm(1e-8, 1)
    widths = [max(len(c), 1) + 0.8 for _, c, _, _ in grids]
    fig, axes = plt.subplots(1, len(grids), figsize=(1.15 * sum(widths) + 2.5, 0.42 * len(floors) + 2.6),
                             squeeze=False, gridspec_kw={"width_ratios": widths}, layout="constrained")
    fig.suptitle("Where over log mu and chunk size is the MDN output error within the checks' budget?\n"
                 "(frame: green within budget, red over it; unframed: a reference form, not judged; grey: non-finite)",
                 fontsize=FONT["title"])
    for ax, (title, cols, grid, cells) in zip(axes[0], grids):
        shown = np.where(np.isfinite(grid) & (grid > 0), grid, np.nan)
        im = ax.imshow(shown, norm=norm, cmap="viridis", aspect="auto")
        ax.set_facecolor("0.7")
        for (i, j), v in np.ndenumerate(grid):
            m = cells[i][j]
            dark = np.isfinite(v) and v < (norm.vmax * norm.vmin) ** 0.5
            text = ("inf" if v == math.inf else sci_text(v) if np.isfinite(v) else
                    (m.get("kind") or "nan") if m is not None else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=FONT["tick"], color="white" if dark else "black")
            if m is not None and m["status"] in ("pass", "fail"):
                ax.add_patch(Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, lw=2.5,
                                       edgecolor=VERDICT[m["status"]][1]))
        ax.set_xticks(range(len(cols)), [_chunk_of(c) for c in cols], fontsize=FONT["tick"])
        ax.set_yticks(range(len(floors)), tick_text(floors), fontsize=FONT["tick"])
        ax.set_xlabel("chunk size" if any(_chunk_of(c) != "-" for c in cols) else "(no chunks)",
                      fontsize=FONT["label"])
        ax.set_ylabel("log mu", fontsize=FONT["label"])
        ax.set_title(textwrap.fill(title, 8 + 9 * max(len(cols), 1)), fontsize=FONT["label"])
    bar = fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9)
    bar.set_label("relative error of o", fontsize=FONT["label"])
    bar.ax.tick_params(labelsize=FONT["tick"])
    sci_axis(bar.ax.yaxis)
    panels = ", ".join(t for t, _, _, _ in grids)
    return {_save(fig, out, "mdn_map.png"): f"MDN: heat maps of the output's relative error over log mu (rows) x "
                                             f"chunk size (columns) for {panels}, one colour scale; a kernel's cell "
                                             "is framed green within the checks' budget, red over it"}


def largest_correct(ms: list[dict]) -> float:
    """The largest n at which the kernel decides every sequence correctly, and at every smaller n tried
    (0 if it fails at the smallest): the rule of verify/checks/state_tracking.py."""
    best = 0.0
    for m in sorted(ms, key=lambda m: m["x"]):
        if m["fraction"]["kernel"] < 1:
            break
        best = m["x"]
    return best


def state_tracking(ms: list[dict], out: Path) -> dict[str, str]:
    """Fraction of sequences decided correctly vs n (Theorem 2.1's construction), per implementation and dtype:
    the requirement (every sequence) drawn, the kernel's points coloured by verdict, the largest n at which the
    kernel decides every sequence correctly marked."""
    ms = sorted((m for m in ms if m.get("fraction")), key=lambda m: m["x"])
    if not ms:
        return {}
    ops = list(dict.fromkeys(m["op"] for m in ms))
    fig, axes = _figure(1, 1)
    ax = axes[0][0]
    ax.axhline(1.0, color="0.3", lw=1, ls="--", label="required: every sequence decided correctly")
    for op in ops:
        who_op = "" if len(ops) == 1 else f" {op}"
        for dtype, marker, size, colour in (("bf16", "o", 12, "C0"), ("fp32", "s", 8, "C1")):  # bf16 larger: an
            mine = [m for m in ms if m["dtype"] == dtype and m["op"] == op]          # fp32 point on it stays visible
            if not mine:
                continue
            xs = [m["x"] for m in mine]
            ax.plot(xs, [m["fraction"]["kernel"] for m in mine], marker + "-", color=colour, ms=size, mfc="none",
                    mew=1.5, lw=2.2 if dtype == "bf16" else 1.2, label=f"kernel{who_op} {dtype}")
            ax.plot(xs, [m["fraction"]["same_dtype"] for m in mine], "--", color=colour, lw=1,
                    label=f"same-dtype{who_op} {dtype}")
            for verdict, words in (("pass", "kernel meets the requirement"), ("fail", "kernel misses it")):
                pts = [m for m in mine if (m["fraction"]["kernel"] == 1) == (verdict == "pass")]
                if pts:
                    ax.plot([m["x"] for m in pts], [m["fraction"]["kernel"] for m in pts], "o", ms=4, ls="none",
                            color=VERDICT[verdict][1], label=words, zorder=3)
            best = largest_correct(mine)
            if best:
                ax.axvline(best, ls=":", lw=2 if dtype == "bf16" else 1, color=colour,
                           label=f"largest n decided correctly, kernel{who_op} {dtype}: {best:g}")
    ax.plot([m["x"] for m in ms], [m["fraction"]["oracle"] for m in ms], "k+", label="float64 oracle", ms=9,
            ls="none")
    ax.set_xscale("log")
    _log_ticks(ax, [m["x"] for m in ms])
    ax.set_ylim(-0.05, 1.08)
    ax.set_xlabel("n (swaps per sequence)", fontsize=FONT["label"])
    ax.set_ylabel("fraction decided correctly", fontsize=FONT["label"])
    ax.tick_params(labelsize=FONT["tick"])
    ax.grid(True, lw=0.4, alpha=0.4)
    fig.suptitle(f"Does {_joined(ops)} tell the identity permutation from the others at every n (Theorem 2.1)?",
                 fontsize=FONT["title"])
    _legend(ax)
    return {_save(fig, out, "state_tracking.png"): f"Theorem 2.1 state tracking ({_joined(ops)}): fraction of "
            "sequences decided correctly vs n, per dtype (kernel solid, same-dtype implementation dashed, float64 "
            "oracle +); the kernel's points green where it decides every sequence correctly (the requirement, "
            "dashed at 1), red where not; dotted line: the largest n at which the kernel decides every sequence "
            "correctly"}


def decode_by_length(rows: list[dict], out: Path) -> dict[str, str]:
    """One panel: each layer generation check's decode error against generated length (pathmdn_verify.report.document
    .decode_by_length of a --results run), log-log, each check's points coloured by its verdict."""
    rows = [r for r in rows if any(e is not None and e > 0 for _, e in r["points"])]
    if not rows:
        return {}
    fig, axes = _figure(1, 1)
    ax = axes[0][0]
    colours = plt.cm.tab20.colors
    for i, r in enumerate(rows):
        pts = [(n, e) for n, e in r["points"] if e is not None and e > 0]
        ax.plot([n for n, _ in pts], [e for _, e in pts], color=colours[i % len(colours)],
                label=f"{r['id'].removeprefix('layer.fla.')} ({r['status']})")
        marker, colour, words = VERDICT.get(r["status"], VERDICT["measured"])
        ax.plot([n for n, _ in pts], [e for _, e in pts], marker, color=colour, ms=5, ls="none", zorder=3,
                label=f"check {words}" if r["status"] in VERDICT else f"check {r['status']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    sci_axis(ax.xaxis)
    sci_axis(ax.yaxis)
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("normwise relative error of the decoded outputs")
    fig.suptitle("Does each layer's decode error grow with the number of generated tokens?", fontsize=FONT["title"])
    _legend(ax)
    return {_save(fig, out, "decode_by_length.png"): "decode error against generated length, per layer, variant "
                                                     "and dtype (the layer checks of --results); points coloured by "
                                                     "the check's verdict"}


def all_plots(ms: list[dict], out: Path, decode: list[dict] | None = None) -> dict[str, str]:
    """Every plot the measurements (and the layer checks' decode errors, when given) allow: {file name: caption}."""
    made = versus_T([m for m in ms if m["plot"] == "T"], out)
    made |= regimes(ms, out)
    made |= mdn_map([m for m in ms if m["plot"] == "mdn_map"], out)
    made |= state_tracking([m for m in ms if m["plot"] == "state"], out)
    made |= decode_by_length(decode or [], out)
    return made
