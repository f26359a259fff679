"""Hostile and bad input, validated in this process (`cli.main`): every case ends with exit status 2 and one line
on stderr that names the problem, no traceback, and no JSON written.  What needs a kernel run or a process of
its own is test_bad_input_cli.py."""
import json
import os

import pytest
import torch

from pathmdn_verify import cli
from pathmdn_verify.core.precision import TORCH_DTYPES
from pathmdn_verify.ops import OPS
from pathmdn_verify.ops.attention_ops import PathCase, path_inputs
from pathmdn_verify.ops.mdn_ops import MdnCase, mdn_inputs


def path_file(tmp_path, **change):
    """A valid path_attn input (fp32), with the named tensors replaced; returns the .pt path."""
    x = path_inputs(PathCase(T=8, HQ=2, H=1, gate="mixed", seed=1), torch.float32)
    x = {n: t for n, t in {**x, **change}.items() if t is not None}
    torch.save(x, tmp_path / "path.pt")
    return tmp_path / "path.pt"


def mdn_file(tmp_path, **change):
    x = mdn_inputs(MdnCase(T=8, seed=1, initial_state=True), torch.bfloat16)
    x = {n: t for n, t in {**x, **change}.items() if t is not None}
    torch.save(x, tmp_path / "mdn.pt")
    return tmp_path / "mdn.pt"


def assert_usage_error(code, err, *words, json_path=None):
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("verify: error:"), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    if json_path is not None:
        assert not os.path.exists(json_path) and not os.path.exists(str(json_path) + ".tmp")


def compare(capsys, tmp_path, op, inputs, *extra):
    out = tmp_path / "out.json"
    code = cli.main(["compare", "--op", op, "--inputs", str(inputs), "--device", "cpu", "--json", str(out), *extra])
    return code, capsys.readouterr().err, out


def sample_file(tmp_path, op, **change):
    """The op's sample input (its record's sample_case) in its first dtype, with the named tensors replaced."""
    x = op.inputs(op.sample_case, TORCH_DTYPES[op.dtypes[0]])
    x = {n: t for n, t in {**x, **change}.items() if t is not None}
    torch.save(x, tmp_path / f"{op.name}.pt")
    return tmp_path / f"{op.name}.pt"


@pytest.mark.parametrize("name", list(OPS))
def test_every_op_rejects_bad_input(capsys, tmp_path, name):
    """Each op's input validation: a missing tensor, a NaN, no tokens (T = 0) are usage errors naming it."""
    op = OPS[name]
    x = op.inputs(op.sample_case, TORCH_DTYPES[op.dtypes[0]])
    code, err, out = compare(capsys, tmp_path, name, sample_file(tmp_path, op, **{op.required[-1]: None}))
    assert_usage_error(code, err, f"missing tensor {op.required[-1]}", json_path=out)
    tensor = "k" if "k" in op.required else op.required[0]     # a module op (a convolution, a norm) has no keys
    nan = x[tensor].clone()
    nan.view(-1)[1] = float("nan")
    code, err, out = compare(capsys, tmp_path, name, sample_file(tmp_path, op, **{tensor: nan}))
    assert_usage_error(code, err, f"{tensor}:", "NaN", json_path=out)
    empty = {n: t[:, :0] for n, t in x.items() if isinstance(t, torch.Tensor) and t.dim() >= 3 and n != "S0"}
    code, err, out = compare(capsys, tmp_path, name, sample_file(tmp_path, op, cu_seqlens=None, **empty))
    assert_usage_error(code, err, "T = 0", json_path=out)


# ------------------------------------------------------------------------------- shapes and ranks

P = path_inputs(PathCase(T=8, HQ=2, H=1, gate="mixed", seed=1), torch.float32)


@pytest.mark.parametrize("change, words", [
    ({"q": P["q"][0]}, ("q:", "rank 3")),
    ({"k": P["k"][:, :5]}, ("k:", "shape (1, 5, 1, 16)")),
    ({"v": torch.zeros(1, 8, 2, 16)}, ("v:", "[B, T, H, Dv]")),
    ({"w": P["w"][..., :8]}, ("w:", "the shape of k")),
    ({"beta": P["beta"][..., None]}, ("beta:", "[B, T, H]")),
    ({"g": P["g"][:, :, :1]}, ("g:", "[B, T, HQ]")),
], ids=["q_rank", "k_length", "v_heads", "w_dim", "beta_rank", "g_heads"])
def test_wrong_rank_or_shape(capsys, tmp_path, change, words):
    code, err, out = compare(capsys, tmp_path, "path_attn", path_file(tmp_path, **change))
    assert_usage_error(code, err, *words, json_path=out)


def test_mdn_shape_mismatch(capsys, tmp_path):
    code, err, out = compare(capsys, tmp_path, "mdn_recurrent", mdn_file(tmp_path, eta=torch.ones(1, 7, 1)))
    assert_usage_error(code, err, "eta:", "[B, T, H]", json_path=out)


def test_query_heads_not_a_multiple_of_key_heads(capsys, tmp_path):
    x = path_inputs(PathCase(T=8, HQ=3, H=2, gate="mixed", seed=1), torch.float32)
    code, err, out = compare(capsys, tmp_path, "path_attn", path_file(tmp_path, **x))
    assert_usage_error(code, err, "HQ = 3", "H = 2", json_path=out)


def test_missing_tensor(capsys, tmp_path):
    code, err, out = compare(capsys, tmp_path, "path_attn", path_file(tmp_path, w=None))
    assert_usage_error(code, err, "missing tensor w", json_path=out)


# ------------------------------------------------------------------------------- values and domains

@pytest.mark.parametrize("name, bad", [("q", float("nan")), ("beta", float("inf"))])
def test_nan_or_inf(capsys, tmp_path, name, bad):
    t = P[name].clone()
    t.view(-1)[3] = bad
    code, err, out = compare(capsys, tmp_path, "path_attn", path_file(tmp_path, **{name: t}))
    assert_usage_error(code, err, f"{name}:", "NaN" if bad != bad else "Inf", json_path=out)


def test_w_not_unit_norm(capsys, tmp_path):
    code, err, out = compare(capsys, tmp_path, "path_attn", path_file(tmp_path, w=P["w"] * 1.01))
    assert_usage_error(code, err, "w:", "norm 1", json_path=out)


@pytest.mark.parametrize("value", [0.0, 2.5])
def test_beta_outside_0_2(capsys, tmp_path, value):
    beta = P["beta"].clone()
    beta[0, 2, 0] = value
    code, err, out = compare(capsys, tmp_path, "path_attn", path_file(tmp_path, beta=beta))
    assert_usage_error(code, err, "beta:", "outside (0, 2]", json_path=out)


M = mdn_inputs(MdnCase(T=8, seed=1), torch.bfloat16)


@pytest.mark.parametrize("name, value, span", [
    ("log_alpha", 0.1, "(-inf, 0]"), ("log_mu", 0.5, "(-inf, 0]"), ("beta", 1.5, "[0, 1]"),
    ("eta", 2.0, "(0, 2)"), ("eta", 0.0, "(0, 2)")])
def test_mdn_gate_outside_domain(capsys, tmp_path, name, value, span):
    t = M[name].clone()
    t[0, 4, 0] = value
    code, err, out = compare(capsys, tmp_path, "mdn_chunk64", mdn_file(tmp_path, **{name: t}))
    assert_usage_error(code, err, f"{name}:", span, json_path=out)


def test_log_forget_gate_positive(capsys, tmp_path):
    code, err, out = compare(capsys, tmp_path, "path_attn", path_file(tmp_path, g=P["g"].abs()))
    assert_usage_error(code, err, "g (log forget gate):", json_path=out)


def test_inputs_file_missing_or_not_a_dict(capsys, tmp_path):
    code, err, out = compare(capsys, tmp_path, "path_attn", tmp_path / "nope.pt")
    assert_usage_error(code, err, "no such file", json_path=out)
    torch.save([P["q"]], tmp_path / "list.pt")
    code, err, out = compare(capsys, tmp_path, "path_attn", tmp_path / "list.pt")
    assert_usage_error(code, err, "expected a dict", json_path=out)


# ------------------------------------------------------------------------------- environment

def test_fla_missing(capsys, tmp_path, monkeypatch, registry):
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fla" else find_spec(name, *a))
    out = tmp_path / "out.json"
    code = cli.main(["kernels", "-k", "convention", "--device", "cpu", "--json", str(out)])
    assert_usage_error(code, capsys.readouterr().err, "fla is not importable", json_path=out)
    code, err, out = compare(capsys, tmp_path, "path_attn", path_file(tmp_path))
    assert_usage_error(code, err, "fla is not importable", json_path=out)


def test_pattern_that_selects_nothing(capsys, tmp_path, registry):
    out = tmp_path / "out.json"
    for family in ("kernels", "mutants", "all"):
        code = cli.main([family, "-k", "no.such.check", "--device", "cpu", "--json", str(out)])
        assert_usage_error(code, capsys.readouterr().err, "no.such.check", json_path=out)


@pytest.mark.parametrize("flag", ["--json", "--junit"])
def test_unwritable_output_path(capsys, tmp_path, registry, flag):
    for target in (tmp_path / "missing_dir" / "out", tmp_path):      # a missing directory; a directory itself
        code = cli.main(["oracles", "-k", "ut_product", "--device", "cpu", flag, str(target)])
        assert_usage_error(code, capsys.readouterr().err, flag)
    assert not (tmp_path / "missing_dir").exists() and list(tmp_path.iterdir()) == []
    if flag == "--json":
        code, err, _ = compare(capsys, tmp_path, "path_attn", path_file(tmp_path), "--json", str(tmp_path))
        assert_usage_error(code, err, "--json")


def test_unknown_op_lists_the_registry(capsys, tmp_path):
    code, err, out = compare(capsys, tmp_path, "mdn_chunk", path_file(tmp_path))
    assert_usage_error(code, err, "--op mdn_chunk", *OPS, json_path=out)


@pytest.mark.parametrize("lost, line, kind, signal", [
    (("crashed", "the worker process died: killed by SIGABRT", 1.0, -6), "crashed (signal 6, SIGABRT)", "crashed", 6),
    (("timeout", "exceeded the timeout of 600 s; the run went on", 600.0, None), "timeout: exceeded the timeout",
     "timeout", None),
], ids=["crashed", "timeout"])
def test_a_lost_worker_is_the_kernels_verdict(capsys, tmp_path, monkeypatch, lost, line, kind, signal):
    """The worker that ran the comparison died or hung (a stand-in session answers runner.Lost): FAIL, exit 1,
    the JSON says the kind (and the signal); the control, an answer, is passed on as the worker printed it."""
    from pathmdn_verify.run import runner, session
    answers = []

    class StandIn:
        def __init__(self, options):
            assert options.workers == "1" and options.prefixes == ()

        def map(self, tasks):
            return [answers.pop()]

        def close(self):
            pass
    monkeypatch.setattr(session, "Session", StandIn)
    out = tmp_path / "out.json"
    argv = ["compare", "--op", "path_attn", "--inputs", str(path_file(tmp_path)), "--device", "cpu", "--json", str(out)]
    answers.append(runner.Lost(*lost))
    code = cli.main(argv)
    doc = json.loads(out.read_text())
    assert code == 1 and (doc["status"], doc["kind"], doc.get("signal")) == ("fail", kind, signal)
    assert f"FAIL path_attn fwd: {line}" in capsys.readouterr().out
    answers.append((0, "pass\n", ""))
    assert cli.main(argv) == 0 and not out.exists() and capsys.readouterr().out == "pass\n"
