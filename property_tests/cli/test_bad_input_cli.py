"""Bad input where a kernel runs or the process matters: `verify compare` on every op's valid sample input (the
control: it passes), and, in `python -m pathmdn_verify` (helpers.run_cli), --device cuda without a GPU, a missing
or empty --kernel-root and a tree without kernel code (exit 2, one line on stderr, no JSON)."""
import json
import os

import helpers
import pytest
import torch
from test_bad_input import assert_usage_error, compare, path_file, sample_file

from pathmdn_verify.ops import OPS


def run_cli(*args, env=None):
    return helpers.run_cli(*args, env=None if env is None else {**os.environ, **env})[0]


@pytest.mark.parametrize("name", list(OPS))
def test_control_valid_inputs_pass(capsys, tmp_path, name):
    """Every op's sample input is valid: compare runs it and writes its JSON with one verdict per output
    (unless the CPU interpreter cannot run the kernel: then a one-line usage error says so)."""
    op = OPS[name]
    code, err, out = compare(capsys, tmp_path, name, sample_file(tmp_path, op))
    if code == 2 and "CPU interpreter" in err:
        pytest.skip(err.strip())
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["status"] == "pass" and doc["op"] == name and doc["budget_factor"] == op.budget_factor["fwd"]
    assert [t["name"] for t in doc["tensors"]] == list(op.outputs) and all(t["ratio"] <= 1 for t in doc["tensors"])


# ------------------------------------------------------------------------------- environment

def test_cuda_without_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "out.json"
    r = run_cli("compare", "--op", "path_attn", "--inputs", str(path_file(tmp_path)), "--device", "cuda",
                "--json", str(out))
    assert_usage_error(r.returncode, r.stderr, "--device cuda", json_path=out)
    r = run_cli("kernels", "--device", "cuda", "--json", str(out))
    assert_usage_error(r.returncode, r.stderr, "--device cuda", json_path=out)


def test_kernel_root_missing_or_without_package(tmp_path):
    out = tmp_path / "out.json"
    r = run_cli("kernels", "--kernel-root", str(tmp_path / "nowhere"), "--json", str(out))
    assert_usage_error(r.returncode, r.stderr, "--kernel-root", "no such directory", json_path=out)
    r = run_cli("kernels", "--kernel-root", str(tmp_path), "--json", str(out))
    assert_usage_error(r.returncode, r.stderr, "--kernel-root", "fla/__init__.py", json_path=out)


def test_a_tree_without_the_kernel_code_is_one_line(tmp_path):
    """Any fla version is accepted (entry points are found by what the tree offers: test_kernel_root_slow.py); a tree
    that holds no kernel code at all cannot be imported, and says which module is missing."""
    (tmp_path / "fla").mkdir()
    (tmp_path / "fla" / "__init__.py").write_text('__version__ = "0.5.0"\n')
    out = tmp_path / "out.json"
    r = run_cli("kernels", "-k", "convention", "--device", "cpu", "--kernel-root", str(tmp_path), "--json", str(out))
    assert_usage_error(r.returncode, r.stderr, "cannot be imported", "fla.utils", json_path=out)


def test_oracle_failure_is_a_usage_error_naming_the_input(capsys, tmp_path, monkeypatch):
    """An input the float64 oracle cannot take is exit 2 naming the file, never a kernel failure."""
    from pathmdn_verify.references import mdn_oracle as MDN

    def broken(*a, **kw):
        raise ValueError("planted oracle failure")
    monkeypatch.setattr(MDN, "recurrence", broken)
    inputs = sample_file(tmp_path, OPS["mdn_recurrent"])
    # in this process (--in-child: the comparison the parent would run in a child), where the oracle is planted
    code, err, out = compare(capsys, tmp_path, "mdn_recurrent", inputs, "--in-child")
    assert_usage_error(code, err, f"--inputs {inputs}", "float64 oracle", "planted oracle failure", json_path=out)
