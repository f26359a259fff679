"""The report's plots (matplotlib, Agg): each measured error next to the same-dtype implementation's error and the
a-priori bounds.  Every function takes the point records of one plot family and writes PNGs into a folder,
returning {file name: caption}.  Non-finite errors are drawn at the top edge (red ^), exact zeros at the
bottom edge (v), vacuous bounds (gamma_n undefined, or above 1 relative) at the top edge (grey x).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

DPI = 72
NAMES = {"path_attn": "PaTH", "forgetting_attn": "FoX", "mdn_chunk64": "MDN chunk64", "mdn_recurrent": "MDN recurrent"}


def _num(v) -> float:
    return math.inf if v is None else float(v)


def _vacuous(bound: float) -> float:
    """A bound above 1 (relative) says nothing: drawn as vacuous (inf), like an undefined gamma_n."""
    return bound if bound <= 1 else math.inf


def growth_exponent(xs, ys) -> float | None:
    """Least-squares slope of log y on log x over the finite positive points (None with fewer than 2)."""
    pts = [(x, y) for x, y in zip(xs, ys) if x > 0 and 0 < y < math.inf]
    if len(pts) < 2:
        return None
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(lx, ly, 1)[0]) if np.ptp(lx) > 0 else None


def _draw(ax, xs, ys, label, style, edge, colour=None) -> None:
    """ys with inf (non-finite; for a bound: vacuous) at the top edge and 0 at the bottom edge, the rest as a line."""
    lo, hi = edge
    fin = [(x, y) for x, y in zip(xs, ys) if 0 < y < math.inf]
    line, = ax.plot([p[0] for p in fin], [p[1] for p in fin], style, label=label, ms=4, color=colour)
    inf = [x for x, y in zip(xs, ys) if not y < math.inf]
    zero = [x for x, y in zip(xs, ys) if y == 0]
    if inf:
        bound = "bound" in label
        ax.plot(inf, [hi] * len(inf), "x" if bound else "^", color="0.4" if bound else "red", ms=7,
                label=f"{label}: {'vacuous' if bound else 'non-finite'}")
    if zero:
        ax.plot(zero, [lo] * len(zero), "v", color=line.get_color(), ms=6, label=f"{label}: exactly 0")


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
    edge = (min(finite) / 3, max(finite) * 3) if finite else (1e-8, 1.0)
    for i, n in enumerate(names):
        colour = f"C{i % 10}"
        p = growth_exponent(xs, errs[n]) if fit else None
        _draw(ax, xs, errs[n], n + (f" (T^{p:.2f})" if p is not None else ""), "o-", edge, colour)
        if n in same:
            _draw(ax, xs, same[n], f"{n} same-dtype", "--", edge, colour)
    _draw(ax, xs, det, "a-priori bound", ".-", edge, "black")      # a marker: a lone finite bound shows too
    _draw(ax, xs, prob, "probabilistic bound", ".:", edge, "black")
    ax.set_yscale("log")
    ax.set_ylim(edge[0] / 1.5, edge[1] * 1.5)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("normwise relative error", fontsize=8)
    ax.tick_params(labelsize=7)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    ax.legend(seen.values(), seen.keys(), fontsize=5.5, loc="best", ncol=2 if len(seen) > 6 else 1, framealpha=0.6)


def _log_ticks(ax, xs) -> None:
    """Ticks at the measured x values, plainly labelled (no minor ticks)."""
    ticks = sorted(set(xs))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xticks(ticks, [f"{t:.4g}" for t in ticks], fontsize=6, rotation=30 if len(ticks) > 4 else 0)


def _save(fig, out: Path, name: str) -> str:
    fig.tight_layout()
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
        fig, axes = plt.subplots(len(passes), len(dtypes), figsize=(4.6 * len(dtypes), 3.4 * len(passes)),
                                 squeeze=False)
        fig.suptitle(f"{NAMES.get(op, op)}: error vs sequence length T", fontsize=10)
        for i, pass_ in enumerate(passes):
            for j, dtype in enumerate(dtypes):
                recs = [r for r in mine if r["pass"] == pass_ and r["dtype"] == dtype]
                error_panel(axes[i][j], recs, "T", fit=True)
                axes[i][j].set_xscale("log")
                _log_ticks(axes[i][j], [r["x"] for r in recs])
                axes[i][j].set_title(f"{'forward' if pass_ == 'fwd' else 'gradients'}, {dtype}", fontsize=8)
        made[_save(fig, out, f"T_{op}.png")] = (
            f"{NAMES.get(op, op)}: normwise relative error vs T (log-log) of the forward output(s) and of each "
            f"gradient, per dtype, with the same-dtype implementation (dashed) and the a-priori bounds (black); "
            f"fitted growth exponent in the legend")
    return made


def _by_op_dtype(records: list[dict], out: Path, name: str, title: str, xlabel: str, caption: str, beta_axis=False,
                 annotate: str | None = None):
    """One row per op, one column per dtype, error of o vs the point's x; annotate: a magnitudes key written
    beside each kernel point."""
    ops = list(dict.fromkeys(r["op"] for r in records))
    dtypes = list(dict.fromkeys(r["dtype"] for r in records))
    if not ops:
        return {}
    fig, axes = plt.subplots(len(ops), len(dtypes), figsize=(4.6 * len(dtypes), 3.4 * len(ops)), squeeze=False)
    fig.suptitle(title, fontsize=10)
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
                    ax.annotate(f"{r['magnitudes'][annotate]:.2f}", (r["x"], err), fontsize=5,
                                xytext=(2, -8), textcoords="offset points")
            if beta_axis and recs:
                ticks = sorted({r["x"] for r in recs})
                ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
                ax.set_xticks(ticks, [("beta = 2" if t == end else f"{t:.0e}") for t in ticks], fontsize=6,
                              rotation=30)
                ax.invert_xaxis()
            ax.set_title(f"{NAMES.get(op, op)} {dtype}", fontsize=8)
    return {_save(fig, out, name): caption}


def regimes(records: list[dict], out: Path) -> dict[str, str]:
    """PaTH vs 2 - beta and vs the UT system's condition; PaTH-FoX and FoX vs gate strength; error vs the largest
    |q|, |k|."""
    made = {}
    by = {p: [r for r in records if r["plot"] == p and r.get("tensors")] for p in ("beta", "align", "gate", "magnitude")}
    if by["beta"]:
        made |= _by_op_dtype(by["beta"], out, "beta_path_attn.png", "PaTH: error vs 2 - beta (beta -> 2 to the right)",
                             "2 - beta (fp32 as stored; right end: beta = 2 exactly)",
                             "PaTH forward error vs 2 - beta on a log axis down to beta = 2 exactly (the axis end)",
                             beta_axis=True)
    if by["align"]:
        made |= _by_op_dtype(by["align"], out, "align_path_attn.png",
                             "PaTH: error vs the UT system's condition (consecutive w aligned, beta = 2)",
                             "cond(I + strictLower(diag(beta) W W^T)), largest 64-block",
                             "PaTH forward error vs the measured condition number of the UT system, swept by the "
                             "alignment of consecutive w (beta = 2; mean |w_t . w_t+1| beside each point)",
                             annotate="alignment")
    if by["gate"]:
        made |= _by_op_dtype(by["gate"], out, "gate.png", "PaTH-FoX and FoX: error vs gate strength",
                             "gate strength: -mean log f",
                             "PaTH-FoX and FoX forward error vs gate strength (minus the mean log forget gate)")
    if by["magnitude"]:
        made |= _by_op_dtype(by["magnitude"], out, "magnitude.png", "Large inputs: error vs the largest |q|, |k|",
                             "max |q|, |k|", "PaTH and FoX forward error vs the largest |q|, |k| (inputs scaled up "
                             "to 1e6); a lost range shows as a step to non-finite (red ^)")
    return made


def mdn_map(records: list[dict], out: Path) -> dict[str, str]:
    """Heat maps of the output's error over log mu x chunk size: fla's chunk path, the fused recurrent kernel,
    the stable and the log-domain chunk forms in fp32 (references/mdn.py), one colour scale."""
    if not records:
        return {}
    floors = sorted({r["nominal"] for r in records}, reverse=True)
    panels = [("fla chunk (bf16)", "mdn_chunk"), ("fla fused recurrent (bf16)", "mdn_recurrent"),
              ("reference stable chunk form (fp32)", "stable_chunk"), ("paper's log-domain chunk form (fp32)", "log_chunk")]

    def err(r):
        t = next((t for t in r.get("tensors", []) if t["name"] == "o"), None)
        return math.nan if t is None else _num(t["err_rel"])

    grids = []
    for title, prefix in panels:
        cols = sorted({r["op"] for r in records if r["op"].startswith(prefix)}, key=lambda o: int(o[len(prefix):] or 0))
        grid = np.array([[next((err(r) for r in records if r["op"] == c and r["nominal"] == f), math.nan)
                          for c in cols] for f in floors])
        grids.append((title, cols, grid))
    finite = np.concatenate([g[np.isfinite(g) & (g > 0)] for _, _, g in grids])
    norm = LogNorm(vmin=max(finite.min(), 1e-9), vmax=max(finite.max(), 1e-8)) if finite.size else LogNorm(1e-8, 1)
    widths = [max(len(c), 1) + 0.6 for _, c, _ in grids]
    fig, axes = plt.subplots(1, len(grids), figsize=(0.9 * sum(widths) + 2, 3.2), squeeze=False,
                             gridspec_kw={"width_ratios": widths}, layout="constrained")
    fig.suptitle("MDN: output error over log mu x chunk size (one colour scale; grey: non-finite)", fontsize=9)
    for ax, (title, cols, grid) in zip(axes[0], grids):
        shown = np.where(np.isfinite(grid) & (grid > 0), grid, np.nan)
        im = ax.imshow(shown, norm=norm, cmap="viridis", aspect="auto")
        ax.set_facecolor("0.7")
        for (i, j), v in np.ndenumerate(grid):
            dark = np.isfinite(v) and v < (norm.vmax * norm.vmin) ** 0.5
            ax.text(j, i, "inf" if v == math.inf else ("nan" if math.isnan(v) else f"{v:.0e}"), ha="center",
                    va="center", fontsize=7, color="white" if dark else "black")
        ax.set_xticks(range(len(cols)), [c.rsplit("chunk", 1)[-1] if "chunk" in c else "-" for c in cols], fontsize=7)
        ax.set_yticks(range(len(floors)), [f"{f:g}" for f in floors], fontsize=7)
        ax.set_xlabel("chunk size" if len(cols) > 1 else "(no chunks)", fontsize=7)
        ax.set_ylabel("log mu", fontsize=7)
        ax.set_title(title, fontsize=7)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9, label="relative error of o")
    fig.savefig(out / "mdn_map.png", dpi=DPI)
    plt.close(fig)
    return {"mdn_map.png": "MDN: heat maps of the output's relative error over log mu (rows) x chunk size (columns) "
                           "for fla's chunk path, the fused recurrent kernel, and the stable and log-domain chunk forms "
                           "of references/mdn.py in fp32, one colour scale"}


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
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for dtype, marker in (("bf16", "o"), ("fp32", "s")):
        mine = [r for r in recs if r["dtype"] == dtype]
        for who, style in (("kernel", "-"), ("same_dtype", "--")):
            ax.plot([r["x"] for r in mine], [r["fraction"][who] for r in mine], marker + style,
                    label=f"fla {dtype}" if who == "kernel" else f"same-dtype {dtype}", ms=5)
        best = largest_correct(mine) if mine else 0
        if best:
            ax.axvline(best, ls=":", lw=2 if dtype == "bf16" else 1, color=ax.lines[-2].get_color(),
                       label=f"largest n decided correctly, fla {dtype}: {best:g}")
    ax.plot([r["x"] for r in recs], [r["fraction"]["oracle"] for r in recs], "k+", label="float64 oracle", ms=8)
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("n (swaps per sequence)", fontsize=8)
    ax.set_ylabel("fraction decided correctly", fontsize=8)
    ax.set_title("PaTH Theorem 2.1: identity permutation told from the others", fontsize=9)
    ax.legend(fontsize=7)
    return {_save(fig, out, "state_tracking.png"): "Theorem 2.1 state tracking: fraction of sequences decided "
            "correctly vs n, per dtype (fla kernel, same-dtype implementation, float64 oracle); dotted line: the "
            "largest n at which the kernel decides every sequence correctly"}


def all_plots(records: list[dict], out: Path) -> dict[str, str]:
    """Every plot the records allow: {file name: caption}."""
    made = versus_T([r for r in records if r["plot"] == "T"], out)
    made |= regimes(records, out)
    made |= mdn_map([r for r in records if r["plot"] == "mdn_map"], out)
    made |= state_tracking([r for r in records if r["plot"] == "state"], out)
    return made
