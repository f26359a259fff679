"""verify report --compare refuses (exit 2, one line) two reports of different kinds: profile, device, fp32 dot or
kernel package; reports of one kind compare, and a report that does not record its kernel package is said so in
the first line."""
import pytest

from pathmdn_verify import cli
from pathmdn_verify.report import document

PACKAGE = {"name": "fla", "version": "0.6.0", "path": "/x/fla", "distribution": "flash-linear-attention",
           "git_commit": None}


def report(tmp_path, name, profile="quick", device="cpu", fp32_dot="tf32", package=PACKAGE) -> str:
    point = {"id": "T.path_attn.fwd.fp32.16", "plot": "T", "op": "path_attn", "pass": "fwd", "dtype": "fp32",
             "nominal": 16, "x": 16.0, "case": "T=16", "status": "pass", "kind": None, "seconds": 0.1,
             "tensors": [{"name": "o", "err_rel": 1e-6, "err_abs": 1e-6, "ratio": 0.1}]}
    meta = {"command": "verify report", "created": "2026-12-05T00:00:00+00:00", "device": device, "profile": profile,
            "seed": 0, "fp32_dot": fp32_dot, "workers": 1, "wall_seconds": 1.0, "cpu_seconds": 1.0,
            "results_file": None, "environment": {"torch": "x", "kernel_package": package}}
    doc = document.build([point], meta, {}, None, {})
    path = tmp_path / f"{name}.json"
    document.write_json(doc, path)
    return str(path)


@pytest.mark.parametrize("differ,said", [
    ({"profile": "ci"}, "profile quick vs ci"),
    ({"device": "cuda"}, "device cpu vs cuda"),
    ({"fp32_dot": "ieee"}, "fp32_dot tf32 vs ieee"),
    ({"package": {**PACKAGE, "version": "0.5.0"}}, "kernel package fla 0.6.0 vs fla 0.5.0"),
])
def test_compare_refuses_reports_of_different_kinds(tmp_path, capsys, differ, said):
    old, new = report(tmp_path, "old"), report(tmp_path, "new", **differ)
    assert cli.main(["report", "--compare", old, new]) == 2
    captured = capsys.readouterr()
    assert said in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    assert "REGRESSIONS" not in captured.out


def test_compare_of_one_kind_runs(tmp_path, capsys):
    """The control: the same kind, the same kernel package from another folder, compares (no regression)."""
    old = report(tmp_path, "old")
    new = report(tmp_path, "new", package={**PACKAGE, "path": "/elsewhere/fla"})
    assert cli.main(["report", "--compare", old, new]) == 0
    assert "REGRESSIONS: 0" in capsys.readouterr().out


def test_compare_says_when_a_report_does_not_record_its_kernel_package(tmp_path, capsys):
    old, new = report(tmp_path, "old", package=None), report(tmp_path, "new")
    assert cli.main(["report", "--compare", old, new]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert f"kernel package not recorded in {old}" in first
