"""The report's plots a reader can take in: every PNG asks its question in its title, draws each tensor's budget
and colours each point by its verdict (green within budget, red over it), and writes the numbers of an axis in
one format."""
import math
import re

import matplotlib
import matplotlib.figure
import matplotlib.pyplot as plt
from matplotlib.colors import to_rgba

from pathmdn_verify.report import diff, document, plots


def tensor(name, err, budget, err_abs=None, budget_abs=1.0):
    err_abs = err if err_abs is None else err_abs
    return {"name": name, "err_rel": err, "err_abs": err_abs, "same_dtype_rel": budget / 4, "budget_rel": budget,
            "ratio": max(err / budget, err_abs / budget_abs), "decided_by": "normwise-relative"}


def point(plot, op, dtype, x, tensors, status=None, pass_="fwd", **extra):
    status = status or ("pass" if all(t["ratio"] <= 1 for t in tensors) else "fail")
    return {"id": f"{plot}.{op}.{pass_}.{dtype}.{x:g}", "plot": plot, "op": op, "pass": pass_, "dtype": dtype,
            "nominal": x, "x": x, "case": "T=16", "status": status, "kind": None, "seconds": 0.1, "tensors": tensors,
            "bound": {"deterministic": 1e-2, "probabilistic": 5e-3, "vacuous": False}, "magnitudes": {"kappa": 1.0},
            **extra}


def measurements():
    """Every plot family; in T.path_attn fwd fp32 the point at T = 64 is over its budget, at T = 160 over its
    max-abs budget only (its relative error is below the relative budget)."""
    ms = [point("T", "path_attn", dtype, T, [tensor("o", err, 4e-3, err_abs=err * (10 if T == 160 else 1),
                                                    budget_abs=1e-2)])
          for dtype in ("bf16", "fp32") for T, err in ((16, 1e-3), (64, 8e-3), (160, 2e-3))]
    ms += [point("beta", "path_attn", "fp32", gap, [tensor("o", 1e-3, 4e-3)]) for gap in (1.0, 1e-3, 0.0)]
    ms += [point("align", "path_attn", "fp32", c, [tensor("o", 1e-3, 4e-3)],
                 magnitudes={"kappa": 1.0, "condition": c, "alignment": 0.5}) for c in (384.2, 8004.0)]
    ms += [point("gate", "forgetting_attn", "fp32", s, [tensor("o", 1e-3, 4e-3)]) for s in (0.004994, 5.897)]
    ms += [point("magnitude", "path_attn", "fp32", g, [tensor("o", 1e-3, 4e-3)]) for g in (3.547, 3536.0, 3.539e6)]
    ms += [point("mdn_map", op, "bf16", m, [tensor("o", 1e-3 if m > -2 else 0.5, 4e-3)])
           for op in ("mdn_chunk16", "mdn_recurrent") for m in (-0.5, -2.0)]
    ms += [{**point("state", "path_attn", dtype, n, []), "tensors": None, "sequences": 2,
            "fraction": {"kernel": 1.0 if n < 64 else 0.5, "same_dtype": 1.0, "oracle": 1.0}}
           for dtype in ("bf16", "fp32") for n in (16, 64)]
    return ms


def test_every_plot_asks_its_question_in_its_title(tmp_path, monkeypatch):
    titles = {}
    save = matplotlib.figure.Figure.savefig

    def record_title(fig, name, *args, **kwargs):
        title = fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title()
        titles[str(name).rsplit("/", 1)[-1]] = title
        return save(fig, name, *args, **kwargs)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record_title)
    ms = measurements()
    decode = [{"id": "layer.fla.path.base.bf16.generation", "status": "pass", "points": [[32, 3e-3], [64, 3.3e-3]],
               "growth": 1.1}]
    made = plots.all_plots(ms, tmp_path, decode)
    doc = document.build(ms, {}, made, None, {})
    diff.plot(doc, doc, diff.changes(doc, doc), tmp_path)
    assert set(titles) == set(made) | {"compare.png"} and len(titles) >= 9
    asked = {name: t.splitlines()[0] for name, t in titles.items()}
    questions = ("Is", "Are", "Does", "Where", "Which")
    assert all(t.endswith("?") and t.split()[0] in questions for t in asked.values()), asked
    assert asked["T_path_attn.png"] == "Is PaTH (path_attn)'s error within the checks' budget as T grows?"


def _panel(ms):
    fig, ax = plt.subplots(layout="constrained")
    plots.error_panel(ax, ms, "T", fit=True)
    ax.set_xscale("log")
    plots._log_ticks(ax, [m["x"] for m in ms])
    fig.canvas.draw()
    return fig, ax


def test_the_budget_is_drawn_and_points_are_coloured_by_verdict():
    ms = [m for m in measurements() if m["id"].startswith("T.path_attn.fwd.fp32")]
    fig, ax = _panel(ms)
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert {"o", "o budget", "within budget", "over budget"} <= set(lines)
    green, red = lines["within budget"], lines["over budget"]
    assert to_rgba(green.get_color()) == to_rgba("tab:green") and to_rgba(red.get_color()) == to_rgba("tab:red")
    assert list(green.get_xdata()) == [16] and sorted(red.get_xdata()) == [64, 160]
    budget = dict(zip(lines["o budget"].get_xdata(), lines["o budget"].get_ydata()))
    errors = dict(zip(lines["o"].get_xdata(), lines["o"].get_ydata()))
    assert budget[16] == 4e-3 and errors[16] < budget[16]
    assert all(errors[T] > budget[T] for T in (64, 160))          # a red point lies above its budget line,
    assert errors[160] < 4e-3                                     # also one failing by its max-abs budget
    plt.close(fig)


def test_the_mdn_map_frames_each_judged_cell_in_its_verdict_colour(tmp_path, monkeypatch):
    frames = []
    real = plots._save

    def keep(fig, out, name):
        frames.extend(to_rgba(p.get_edgecolor()) for ax in fig.axes for p in ax.patches)
        return real(fig, out, name)
    monkeypatch.setattr(plots, "_save", keep)
    plots.mdn_map([m for m in measurements() if m["plot"] == "mdn_map"], tmp_path)
    assert sorted(frames) == sorted([to_rgba("tab:green")] * 2 + [to_rgba("tab:red")] * 2)


def test_tick_numbers_have_one_format():
    assert plots.tick_text([16, 64, 160]) == ["16", "64", "160"]
    assert plots.tick_text([3.547, 3536.0, 3.539e6]) == ["3.5e0", "3.5e3", "3.5e6"]
    assert plots.tick_text([0.004994, 5.897]) == ["5e-3", "5.9e0"]
    assert plots.tick_text([-0.5, -1.0, -2.0]) == ["-0.5", "-1", "-2"]
    sci = re.compile(r"^-?\d(\.\d)?e-?\d+$")
    for plot in ("magnitude", "gate", "align"):
        ms = [m for m in measurements() if m["plot"] == plot]
        fig, ax = _panel(ms)
        xs = [t.get_text() for t in ax.get_xticklabels()]
        ys = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert len(xs) == len(ms) and all(sci.match(t) for t in xs + ys), (plot, xs, ys)
        plt.close(fig)


def test_no_exponent_from_three_points():
    ms = [m for m in measurements() if m["id"].startswith("T.path_attn.fwd.bf16")]
    fig, ax = _panel(ms)
    assert not any("T^" in t.get_text() for t in ax.get_legend().get_texts())
    plt.close(fig)
    assert math.isclose(plots.growth_exponent([1, 10, 100, 1000], [1, 10, 100, 1000]), 1.0)
