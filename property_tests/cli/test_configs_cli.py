"""`--configs`: the configs canary (every config of an autotuned kernel run) passes through `verify kernels`."""
from __future__ import annotations

from helpers import run_cli
from test_configs import _check


def test_canary_passes(tmp_path):
    r, doc = run_cli("kernels", "--id", "env.interpreter.configs_cover", "--profile", "quick", "--json",
                     tmp_path / "c.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _check(doc, "env.interpreter.configs_cover")["status"] == "pass"
