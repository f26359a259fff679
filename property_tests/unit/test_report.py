"""`verify report` in this process: the plots, report.md and report.json on synthetic points (valid against the
schema), the bounds, the sweeps, `--compare`'s diff (a measured kernel: cli/test_report_cli.py).  The synthetic
points and run_cli serve test_report_cli.py and test_report_slow.py."""
import copy
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from pathmdn_verify.report import bounds, diff, document, plots
from pathmdn_verify.report.sweeps import measured, points
from pathmdn_verify.run import xfail_list as xfails


SCHEMA = json.loads(document.SCHEMA_FILE.read_text())


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pathmdn_verify", *args], capture_output=True, text=True)


def images_exist(folder: Path) -> list[str]:
    md = (folder / "report.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert images, "report.md references no image"
    missing = [i for i in images if not (folder / i).is_file()]
    assert not missing, missing
    return images


def tensor(name, err, same=1e-3):
    return {"name": name, "err_rel": err, "err_abs": err, "same_dtype_rel": same, "budget_rel": 4 * same,
            "ratio": err / (4 * same), "decided_by": "normwise-relative"}


def record(plot, op, pass_, dtype, x, tensors, det=1e-2, prob=5e-3, status="pass", **extra):
    return {"id": f"{plot}.{op}.{pass_}.{dtype}.{x:g}", "plot": plot, "op": op, "pass": pass_, "dtype": dtype,
            "nominal": x, "x": x, "case": "T=16 seed=0", "status": status, "kind": None, "seconds": 0.1,
            "tensors": tensors, "bound": {"deterministic": det, "probabilistic": prob, "vacuous": not det <= 1},
            "magnitudes": {"kappa": 1.5}, **extra}


def synthetic_records() -> list[dict]:
    """Every plot family, with a non-finite error, an exact zero, a vacuous and an exceeded bound."""
    recs = []
    for op in ("path_attn", "forgetting_attn", "mdn_recurrent"):
        for dtype in ("bf16", "fp32"):
            for T in (16, 64, 256):
                recs.append(record("T", op, "fwd", dtype, T, [tensor("o", 1e-3 * T ** 0.5)]))
                recs.append(record("T", op, "bwd", dtype, T, [tensor("dq", 2e-3), tensor("dk", 3e-3)],
                                   det=math.inf if T > 64 else 1e-2))
    for gap in (1.0, 1e-4, 0.0):
        recs.append(record("beta", "path_attn", "fwd", "fp32", gap, [tensor("o", 2e-3)]))
    for cond in (10.0, 1e3):
        recs.append(record("align", "path_attn", "fwd", "bf16", cond, [tensor("o", 5e-2)], det=1e-2,  # exceeds
                           magnitudes={"kappa": 1.5, "condition": cond, "alignment": 0.9}))
    for s in (0.01, 5.0):
        recs.append(record("gate", "forgetting_attn", "fwd", "bf16", s, [tensor("o", 1e-3)]))
    for gain in (1.0, 1e6):
        recs.append(record("magnitude", "path_attn", "fwd", "fp32", gain,
                           [tensor("o", 0.0 if gain == 1 else math.inf)], status="pass" if gain == 1 else "fail"))
    for op in ("mdn_chunk16", "mdn_chunk64", "mdn_recurrent", "stable_chunk16", "log_chunk64"):
        for m in (-0.5, -2.0):
            bad = op == "mdn_chunk64" and m == -2
            recs.append(record("mdn_map", op, "fwd", "fp32" if "_chunk" in op and "mdn" not in op else "bf16", m,
                               [tensor("o", math.inf if bad else 1e-3)]))
    for dtype in ("bf16", "fp32"):
        for n in (16, 64, 256):
            rec = record("state", "path_attn", "fwd", dtype, n, None)
            for key in ("tensors", "bound", "magnitudes"):
                del rec[key]
            recs.append({**rec, "sequences": 4, "fraction": {"kernel": 1.0 if n < 256 else 0.5, "same_dtype": 1.0,
                                                             "oracle": 1.0}})
    return recs


META = {"command": "verify report --profile quick", "created": "2026-11-30T00:00:00+00:00", "device": "cpu",
        "profile": "quick", "seed": 0, "fp32_dot": "tf32", "workers": 1, "wall_seconds": 1.0, "cpu_seconds": 1.0,
        "results_file": None, "environment": {"torch": "x"}}


def write_synthetic(folder: Path, records=None) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    recs = records or synthetic_records()
    made = plots.all_plots(recs, folder)
    doc = document.build(recs, META, made, None, {"kernel.x": xfails.Entry(("kernel.x",), ("over_budget",), "r", "m", "c")})
    document.write_json(doc, folder / "report.json")
    (folder / "report.md").write_text(document.markdown(doc))
    return doc


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, dict]:
    """The report of the synthetic points, written once for the tests that read it: (its folder, report.json)."""
    folder = tmp_path_factory.mktemp("synthetic")
    return folder, write_synthetic(folder)


def test_full_plot_set_on_synthetic_points(synthetic):
    tmp_path, doc = synthetic
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert len(pngs) >= 6 and set(images_exist(tmp_path)) == set(pngs)
    assert {"T_path_attn.png", "beta_path_attn.png", "align_path_attn.png", "gate.png", "magnitude.png",
            "mdn_map.png", "state_tracking.png"} <= set(pngs)
    loaded = json.loads((tmp_path / "report.json").read_text())     # strict: no NaN / Infinity tokens
    jsonschema.validate(loaded, SCHEMA)
    mag = next(p for p in loaded["points"] if p["id"] == "magnitude.path_attn.fwd.fp32.1e+06")
    assert mag["tensors"][0]["err_rel"] is None and mag["nonfinite"]["tensors.0.err_rel"] == "inf"
    md = (tmp_path / "report.md").read_text()
    assert "EXCEEDS the deterministic bound" in md and "vacuous" in md          # the bounds in words
    assert "largest n tried" in md or "wrong at n = 256" in md
    assert "No check results were given" in md
    assert doc["bounds"]["gamma_n"]["source"].startswith("Higham")


def test_compare_new_non_finite_and_status_change():
    recs = synthetic_records()
    old = {"points": [document.point_json(r) for r in recs], "checks": [{"id": "kernel.a", "status": "pass"}]}
    new = copy.deepcopy(old)
    p = next(p for p in new["points"] if p["id"] == "gate.forgetting_attn.fwd.bf16.0.01")
    p["tensors"][0]["err_rel"] = None
    p["nonfinite"] = {"tensors.0.err_rel": "nan"}
    new["checks"][0]["status"] = "fail"
    found = diff.changes(old, new)
    whats = {(c["id"], c["what"]) for c in found["regressions"]}
    assert ("gate.forgetting_attn.fwd.bf16.0.01", "new non-finite error") in whats
    assert ("kernel.a", "check status pass -> fail") in whats
    assert diff.changes(old, old)["regressions"] == []


def test_bounds():
    u = 2.0 ** -8
    assert bounds.gamma(10, u) == pytest.approx(10 * u / (1 - 10 * u))
    assert bounds.gamma(256, u) == math.inf                          # n u >= 1: no bound
    assert bounds.gamma_prob(10_000, 2.0 ** -24) < bounds.gamma(10_000, 2.0 ** -24)
    assert bounds.gamma_prob(4, u) == bounds.gamma(4, u)             # n < lambda^2: the deterministic is smaller
    import torch
    eye = torch.eye(5, dtype=torch.float64)
    assert bounds.skeel_cond(eye) == 1.0
    L = eye + torch.tril(torch.full((5, 5), 2.0, dtype=torch.float64), -1)
    assert bounds.skeel_cond(L) > 10                                  # growth of (I + 2 N)^-1
    assert bounds.triangular_solve(1e9, 64, 0.0) == math.inf


def test_sweeps_ids_unique_and_ops_known():
    ops = measured()
    for profile in ("quick", "ci", "full"):
        pts = points(profile)
        assert len({p.id for p in pts}) == len(pts)
        assert all(p.op in ops and p.dtype in ops[p.op].dtypes for p in pts)


def test_measured_ops_come_from_the_op_table():
    """The report measures exactly the records whose `report` family is set (plus the reference forms), and
    the PaTH-only sweeps select by that family, not by a name."""
    from pathmdn_verify.ops import OPS as KERNEL_OPS
    ops = measured()
    kernels = {k for k, o in ops.items() if o.family != "form"}
    assert kernels == {r.name for r in KERNEL_OPS.values() if r.report}
    assert all(ops[k].family == KERNEL_OPS[k].report and ops[k].dtypes == tuple(KERNEL_OPS[k].dtypes) for k in kernels)
    pts = points("quick")
    for plot in ("beta", "align", "state"):
        assert {ops[p.op].family for p in pts if p.plot == plot} == {"path"}
    assert {p.op for p in pts if p.plot == "mdn_map"} == {k for k, o in ops.items() if o.family in ("mdn", "form")}
    assert {p.op for p in pts if p.plot == "T"} <= kernels


def test_report_code_names_no_kernel_op():
    """No kernel op's name is written in verify/report/ (the ops come from their records) except in an import
    of a module of the same name or on a line whose comment gives the reason."""
    from pathmdn_verify.ops import OPS as KERNEL_OPS
    folder = Path(document.__file__).parent
    found = []
    for src in sorted(folder.glob("*.py")):
        for n, line in enumerate(src.read_text().splitlines(), 1):
            for name in KERNEL_OPS:
                if re.search(rf"\b{name}\b", line) and "#" not in line and not re.match(r"\s*(from|import) ", line):
                    found.append(f"{src.name}:{n}: {line.strip()}")
    assert not found, found


def png_dpi(path: Path) -> tuple[float, float]:
    from PIL import Image
    with Image.open(path) as im:
        return im.info.get("dpi", (0, 0))


def test_every_png_is_readable_size(synthetic, tmp_path):
    """Every PNG of the report (and of --compare) says >= 150 dpi in its header and is large enough for that:
    at least 1000 px wide (a 72 dpi plot was 331-947 px)."""
    from PIL import Image
    folder, doc = synthetic
    pngs = sorted(folder.glob("*.png"))
    assert pngs
    for png in pngs:
        assert min(png_dpi(png)) >= 149.5, (png.name, png_dpi(png))
        with Image.open(png) as im:
            assert im.width >= 1000, (png.name, im.size)
    diff.plot(doc, doc, diff.changes(doc, doc), tmp_path)
    assert min(png_dpi(tmp_path / "compare.png")) >= 149.5


def test_growth_exponent_needs_four_points():
    assert plots.growth_exponent([16, 64, 256], [1e-3, 2e-3, 4e-3]) is None
    assert plots.growth_exponent([16, 64, 256, 1024], [1e-3, 2e-3, 4e-3, 8e-3]) == pytest.approx(0.5)
    assert plots.growth_exponent([16, 64, 256, 1024], [1e-3, math.inf, 4e-3, 8e-3]) is None  # three finite of four
    recs = [r for r in synthetic_records() if r["id"].startswith("T.path_attn.fwd.bf16")]
    recs.append(record("T", "path_attn", "fwd", "bf16", 1024, [tensor("o", 1e-3 * 1024 ** 0.5)]))
    import matplotlib.pyplot as plt
    for n, fitted, legend in ((3, "| o - |", "o"), (4, "| o 0.50 |", "o (T^0.50)")):
        assert fitted in "\n".join(document.findings(recs[:n]))          # report.md
        fig, ax = _panel(recs[:n])                                       # the plot's legend
        assert legend in [t.get_text() for t in ax.get_legend().get_texts()]
        plt.close(fig)


def _panel(recs):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(layout="constrained")
    plots.error_panel(ax, recs, "T", fit=True)
    fig.canvas.draw()
    return fig, ax


def test_bound_in_the_legend_only_where_its_line_is_drawn():
    """A bound that is vacuous at every point draws no line, so the legend names only its 'vacuous' markers;
    where it is finite somewhere its line is drawn and named.  Every legend lies outside the data area."""
    import matplotlib.pyplot as plt
    recs = [r for r in synthetic_records() if r["id"].startswith("T.path_attn.bwd.bf16")]
    vacuous = [{**r, "bound": {**r["bound"], "deterministic": math.inf, "probabilistic": math.inf}} for r in recs]
    for case, drawn in ((vacuous, False), (recs, True)):
        fig, ax = _panel(case)
        legend = ax.get_legend()
        labels = [t.get_text() for t in legend.get_texts()]
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert ("a-priori bound" in labels) == drawn, labels
        assert "a-priori bound: vacuous" in labels                  # the markers are drawn in both cases
        for name in labels:
            assert len(lines[name].get_xdata()) > 0, name          # nothing listed that is not drawn
        box, area = legend.get_window_extent(), ax.get_window_extent()
        assert box.x0 >= area.x1 - 1, (box, area)                  # outside, to the right of the data area
        plt.close(fig)


def test_report_md_is_tables_and_words(tmp_path):
    """report.md: no Python / JSON dict, no bare 'nan' (a non-finite number is named as such), the bounds and
    the growth exponents as tables, not a bullet per op / pass / dtype."""
    recs = synthetic_records()
    recs.append(record("T", "mdn_recurrent", "fwd", "fp32", 1024, [tensor("o", math.nan)], status="fail"))
    write_synthetic(tmp_path, recs)
    md = (tmp_path / "report.md").read_text()
    assert not re.search(r"\bnan\b", md) and "error nan" not in md
    assert "non-finite (NaN)" in md and "non-finite (+inf)" in md
    assert "{'" not in md and '{"' not in md
    assert "4 sequences, decided correctly by the kernel 50%" in md
    assert "| op | pass | dtype | plot | deterministic bound vacuous |" in md
    assert "| op | pass | dtype | T | exponent p per tensor |" in md
    assert not [ln for ln in md.splitlines() if ln.startswith("- **")]


def test_compare_reads_the_committed_schema_1_reports():
    """The reports committed before the same-dtype rename (schema 1: ref_rel, fraction.reference) compare
    with a new one: the H200 report against itself has no change, and a worsened same-dtype number is
    read under its new name (else the comparison would see no same-dtype error at all)."""
    from pathlib import Path
    old_path = Path(__file__).resolve().parents[2] / "reports/h200-2026-11-30/report-full/report.json"
    old = diff.load(str(old_path))
    assert old["schema_version"] == 2 and "ref_rel" not in json.dumps(old)
    with_dtype = [t for p in old["points"] for t in p.get("tensors") or [] if t.get("same_dtype_rel") is not None]
    assert len(with_dtype) > 100
    assert any("same_dtype" in (p.get("fraction") or {}) for p in old["points"])
    found = diff.changes(old, diff.load(str(old_path)))
    assert found["regressions"] == [] and found["status"] == []


def test_decode_error_against_generated_length_from_results(tmp_path):
    """--results: the layer generation checks' buckets, both record formats (PaTH's equal buckets, MDN's doubling
    ones, a non-finite error as older results wrote it), become report.json's decode_by_length, a table and a
    plot; a result without layer checks adds neither."""
    results = {"checks": [
        {"id": "layer.fla.path.base.bf16.generation", "status": "pass",
         "details": {"decode_rel_err_by_generated_length": {"1-32": 3e-3, "33-64": 3.3e-3}, "growth": 1.1}},
        {"id": "layer.fla.mdn.default.fp32.generation", "status": "fail",
         "details": {"buckets": [{"tokens": "1-1", "err_rel": 2e-7}, {"tokens": "2-3", "err_rel": "inf"}],
                     "growth": "inf"}},
        {"id": "layer.fla.mdn.default.fp32.forward", "status": "pass", "details": {}},
        {"id": "kernel.fla.path_attn.fwd.fp32.beta_two", "status": "pass", "measured": 1e-6, "budget": 1e-5,
         "details": {}}]}
    rows = document.decode_by_length(results)
    assert [(r["id"].split(".")[2], r["points"]) for r in rows] == [("path", [[32, 3e-3], [64, 3.3e-3]]),
                                                                   ("mdn", [[1, 2e-7], [3, math.inf]])]
    assert set(plots.decode_by_length(rows, tmp_path)) == {"decode_by_length.png"}
    doc = document.build([], {**META, "results_file": "r.json"}, {}, results, {})
    jsonschema.validate(json.loads(json.dumps(doc)), SCHEMA)
    assert doc["decode_by_length"][1]["points"][1] == [3, None]          # strict JSON: inf as null
    assert "Decode error against generated length" in document.markdown(doc)
    assert document.decode_by_length({"checks": results["checks"][2:]}) == []
    assert plots.decode_by_length([], tmp_path / "none") == {}
