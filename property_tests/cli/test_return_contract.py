"""What an implementation returns is held to its op's canonical call before anything is judged (pathmdn_verify.core
.contract): an MDN kernel that forgets its final states, a PaTH kernel with fla's own `(o, None)`, one that returns
an extra output, the wrong shape or the wrong dtype is exit 2 with one line naming what the op returns and what came
back, in the forward, the backward and the decode pass, never a pass and never a kernel failure.  The control: the
same file returning what the op returns passes."""
from __future__ import annotations

import re

import pytest

from helpers import run_cli

ORACLE = ("from pathmdn_verify.references import path_oracle, mdn_oracle\n"
          "import pathmdn_verify as pv\n\n"
          "f = lambda t: None if t is None else t.double()\n\n\n"
          "def path(q, k, v, w, beta, g=None, cu_seqlens=None, scale=None):\n"
          "    o = path_oracle.path_attn(f(q), f(k), f(v), f(w), f(beta), g=f(g), cu_seqlens=cu_seqlens, scale=scale,\n"
          "                              gate_scaled=True)\n"
          "    return {path_returns}\n\n\n"
          "def mdn(q, k, v, log_alpha, log_mu, beta, eta, S0=None, M0=None, p=None, scale=None):\n"
          "    o, S, M = mdn_oracle.recurrence(f(q), f(k), f(v), f(log_alpha), f(log_mu), f(beta), f(eta), p=f(p),\n"
          "                                   scale=scale, S0=f(S0), M0=f(M0))\n"
          "    return {mdn_returns}\n\n\n"
          "pv.implement('path_attn', path, name='contract_{name}', fp32_dot='ieee')\n"
          "pv.implement('mdn_recurrent', mdn, name='contract_{name}', fp32_dot='ieee')\n")
RIGHT = {"path_returns": "o.to(q.dtype)", "mdn_returns": "o.to(q.dtype), S.float(), M.float()"}
S = r"\[[0-9, ]+\]"      # a shape
WRONG = {   # name -> (what it returns instead, the check it breaks, what the op returns, what came back: regexes)
    "states": ({"mdn_returns": "o.to(q.dtype)"}, "kernel.contract_states.mdn_recurrent.fwd.fp32.typical",
               r"mdn_recurrent returns a tuple \(o float32 on cpu, S_T float32 on cpu, M_T float32 on cpu\)",
               rf"contract_states returned a Tensor {S} float32 on cpu"),
    "none": ({"path_returns": "o.to(q.dtype), None"}, "kernel.contract_none.path_attn.bwd.fp32.beta_uniform",
             "path_attn returns o float32 on cpu", rf"contract_none returned a tuple of 2 \(Tensor {S} float32 on cpu, "
             r"None\)"),
    "extra": ({"path_returns": "o.to(q.dtype), o.to(q.dtype)"}, "kernel.contract_extra.path_attn.fwd.fp32.beta_uniform",
              "path_attn returns o float32 on cpu", "contract_extra returned a tuple of 2"),
    "shape": ({"path_returns": "o.to(q.dtype).transpose(1, 2)"}, "kernel.contract_shape.path_attn.fwd.fp32.beta_uniform",
              rf"path_attn returns o {S} float32 on cpu", rf"contract_shape returned a Tensor {S} float32"),
    "dtype": ({"path_returns": "o.float()"}, "kernel.contract_dtype.path_attn.fwd.bf16.beta_uniform",
              "path_attn returns o bfloat16 on cpu", rf"contract_dtype returned a Tensor {S} float32"),
    "state_dtype": ({"mdn_returns": "o.to(q.dtype), S.to(q.dtype), M.to(q.dtype)"},
                    "kernel.contract_state_dtype.mdn_recurrent.fwd.bf16.typical", "S_T float32 on cpu",
                    rf"contract_state_dtype returned a tuple of 3 \(Tensor {S} bfloat16 on cpu, Tensor {S} bfloat16"),
}


def _impl(tmp_path, name: str, **returns) -> str:
    path = tmp_path / f"contract_{name}.py"
    path.write_text(ORACLE.format(name=name, **{**RIGHT, **returns}))
    return str(path)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_call_that_breaks_the_contract_is_one_usage_error(tmp_path, name):
    returns, check, wants, got = WRONG[name]
    r, doc = run_cli("kernels", "--impl", _impl(tmp_path, name, **returns), "--id", check, "--profile", "ci",
                     "--device", "cpu", "--no-cache", "--json", tmp_path / "run.json")
    err = r.stderr.strip()
    assert r.returncode == 2 and doc is None and len(err.splitlines()) == 1, r.stdout[-2000:] + err
    assert re.search(wants, err) and re.search(got, err), err


def test_the_control_returning_what_the_op_returns_passes(tmp_path):
    ids = [f"kernel.contract_right.{op}.{p}.{d}.{regime}" for op, regime in (("path_attn", "beta_uniform"),
                                                                              ("mdn_recurrent", "typical"))
           for p in ("fwd", "bwd") for d in ("bf16", "fp32")]
    r, doc = run_cli("kernels", "--impl", _impl(tmp_path, "right"), *(a for i in ids for a in ("--id", i)),
                     "--profile", "quick", "--device", "cpu", "--no-cache", "--json", tmp_path / "run.json")
    assert r.returncode == 0 and {c["status"] for c in doc["checks"]} == {"pass"}, r.stdout[-3000:]
