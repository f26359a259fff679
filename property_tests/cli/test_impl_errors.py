"""An implementation file that cannot be used is the user's to fix, said in one line: a syntax error, `pv.implement`
with an unknown op, a bad name, a bad fp32_dot, a function without the op's inputs, and a file that registers
nothing are each exit 2 with one line naming the file on every command that takes --impl (a traceback only with
--debug); in the pytest plugin they, and a name nothing registers, are pytest usage errors (one line, exit 4, no
INTERNALERROR), and so is an implementation that breaks its op's return contract while the items run.  The
control: a good file lists its checks (`verify list --impl`)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import run_cli

GOOD = ("import pathmdn_verify as pv\n\n\n"
        "def path(q, k, v, w, beta, g=None, cu_seqlens=None, scale=None):\n    return q\n\n\n")
BROKEN = {   # name -> (file body, what the one line must say, then ({line}) where in the file)
    "syntax": ("import pathmdn_verify as pv\ndef path(q, k v):\n    return q\n", "SyntaxError at {file}:2"),
    "unknown_op": (GOOD + "pv.implement('path_atn', path, name='bad_op', fp32_dot='ieee')\n",
                   "ValueError: no op 'path_atn'; the ops are path_attn, {line}"),
    "bad_name": (GOOD + "pv.implement('path_attn', path, name='Bad Name', fp32_dot='ieee')\n",
                 "ValueError: implementation name 'Bad Name': lower-case letters, {line}"),
    "bad_dot": (GOOD + "pv.implement('path_attn', path, name='bad_dot', fp32_dot='fp64')\n",
                "ValueError: fp32_dot='fp64': say how fn's fp32 products round, {line}"),
    "signature": (GOOD + "pv.implement('path_attn', lambda q, k, v, scale=None: q, name='bad_sig', fp32_dot='ieee')\n",
                  "ValueError: bad_sig: fn must take the op's inputs ('q', 'k', 'v', 'w', 'beta') and scale by name; "
                  "it lacks w, beta {line}"),
    "nothing": (GOOD, "registers no implementation (call pathmdn_verify.implement("),
}
# every command that loads --impl (`verify mutants` refuses any implementation but fla's before loading one)
COMMANDS = {"kernels": ["kernels", "--device", "cpu"], "all": ["all", "--device", "cpu", "-k", "x"], "list": ["list"],
            "compare": ["compare", "--op", "path_attn", "--inputs", "none.pt", "--device", "cpu"]}


def _file(tmp_path, name: str) -> tuple:
    body, says = BROKEN[name]
    path = tmp_path / f"impl_error_{name}.py"
    path.write_text(body)
    line = f" ... (at {path}:{len(body.splitlines())})"
    return path, says.format(file=path, line=line).strip()


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_implementation_file_is_one_line_exit_2(tmp_path, name, command):
    path, says = _file(tmp_path, name)
    r, _ = run_cli(*COMMANDS[command], "--impl", path, cwd=tmp_path)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, r.stdout[-2000:] + err
    assert err.startswith(f"verify: error: --impl {path}: ") and _says(err, says), err


def _says(line: str, says: str) -> bool:
    """Each part of `says` (split at ' ... ') in the line, in that order."""
    at = 0
    for part in says.split(" ... "):
        at = line.find(part, at)
        if at < 0:
            return False
    return True


def test_debug_prints_the_traceback(tmp_path):
    path, _ = _file(tmp_path, "bad_dot")
    proc = subprocess.run([sys.executable, "-m", "pathmdn_verify", "list", "--impl", str(path), "--debug"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "fp32_dot='fp64'" in proc.stderr


def test_list_names_the_checks_of_an_implementation(tmp_path):
    path = tmp_path / "impl_listed.py"
    path.write_text(GOOD + "pv.implement('path_attn', path, name='listed', fp32_dot='ieee')\n")
    r, _ = run_cli("list", "--impl", path, "-k", "listed and fwd and fp32")
    ids = [line.split()[0] for line in r.stdout.splitlines()]
    assert r.returncode == 0 and "kernel.listed.path_attn.fwd.fp32.beta_uniform" in ids, r.stdout + r.stderr
    assert all(i.startswith("kernel.listed.") for i in ids)
    r, _ = run_cli("list", "--impl", path, "-k", "kernel.fla.path_attn.fwd.fp32.beta_uniform")
    assert r.returncode == 2 and "no check id matches" in r.stderr         # fla's are not the listed impl's


def _pytest(tmp_path, *args) -> subprocess.CompletedProcess:
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, args)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)


@pytest.mark.parametrize("name", ["syntax", "bad_dot", "nothing", "nosuchname"])
def test_in_the_pytest_plugin_a_broken_implementation_is_a_usage_error(tmp_path, name):
    spec, says = ("nosuchname", "--impl nosuchname: no implementation of that name") if name == "nosuchname" \
        else _file(tmp_path, name)
    r = _pytest(tmp_path, "--verify-impl", spec)
    out = r.stdout + r.stderr
    assert r.returncode == 4 and "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and _says(errors[0], says), out[-3000:]


def test_in_the_pytest_plugin_a_broken_return_contract_is_a_usage_error(tmp_path):
    path = tmp_path / "impl_contract.py"
    path.write_text(GOOD.replace("return q", "return q, None") + "pv.implement('path_attn', path, name='pt_contract', "
                    "fp32_dot='ieee')\n")
    r = _pytest(tmp_path, "--verify-impl", path, "--verify-k", "fwd and fp32 and beta_uniform", "--verify-device",
                "cpu")
    out = r.stdout + r.stderr
    assert r.returncode == 4 and "INTERNALERROR" not in out, out[-3000:]
    assert "path_attn returns o" in out and "pt_contract returned a tuple of 2" in out, out[-3000:]
