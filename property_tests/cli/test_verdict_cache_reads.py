"""The verdict cache is keyed by what the check's worker read, not by a guess at its call graph: a kernel author's
implementation (`--impl reg.py`) whose registering file, the module it imports, a module two imports away, a data
file read at call time and an environment variable each decide the kernel's output.  A planted edit to each turns
the cached pass into a rerun, and the rerun fails (the edit matters); its revert, the control, replays the first
run's verdict, and so does an edit to a file beside them that nothing reads."""
from __future__ import annotations

import os

from helpers import by_id, run_cli

CHECK = "kernel.cachetoy.path_attn.fwd.fp32.beta_uniform"
FILES = {
    "cachetoy_reg.py": "import pathmdn_verify as pv\nfrom cachetoy_core import path\n"
                       "pv.implement('path_attn', path, name='cachetoy', fp32_dot='ieee')\n",
    "cachetoy_core.py": "import json, os\nfrom pathlib import Path\nfrom cachetoy_helper import gate\n"
                        "from pathmdn_verify.references import path_oracle\n\n\n"
                        "def path(q, k, v, w, beta, g=None, cu_seqlens=None, scale=None):\n"
                        "    gain = json.loads((Path(__file__).parent / 'gain.json').read_text())['gain']\n"
                        "    gain *= float(os.environ.get('CACHETOY_GAIN', '1'))\n"
                        "    f = lambda t: None if t is None else t.double()\n"
                        "    o = path_oracle.path_attn(f(q), f(k), f(v), f(w), gate(f(beta)) * gain, g=f(g),\n"
                        "                              cu_seqlens=cu_seqlens, scale=scale, gate_scaled=True)\n"
                        "    return o.to(q.dtype)\n",
    "cachetoy_helper.py": "def gate(beta):\n    return beta\n",
    "gain.json": '{"gain": 1.0}',
    "notes.txt": "read by nothing\n",
}
# file -> (a planted edit that changes the kernel's output, what it does)
EDITS = {
    "cachetoy_reg.py": ("import pathmdn_verify as pv\nfrom cachetoy_core import path\n\n\n"
                        "def scaled(q, k, v, w, beta, g=None, cu_seqlens=None, scale=None):\n"
                        "    return path(q, k, v, w, beta * 0.9, g=g, cu_seqlens=cu_seqlens, scale=scale)\n\n\n"
                        "pv.implement('path_attn', scaled, name='cachetoy', fp32_dot='ieee')\n", "the --impl file"),
    "cachetoy_core.py": (FILES["cachetoy_core.py"].replace("return o.to(q.dtype)", "return (o * 1.01).to(q.dtype)"),
                         "a module it imports"),
    "cachetoy_helper.py": ("def gate(beta):\n    return beta * 0.9\n", "a module two imports away"),
    "gain.json": ('{"gain": 0.9}', "a data file read at call time"),
}


def _run(tmp_path, env=None) -> dict:
    r, doc = run_cli("kernels", "--impl", tmp_path / "impl" / "cachetoy_reg.py", "--id", CHECK, "--profile", "quick",
                     "--device", "cpu", "--workers", "1", "--cache-dir", tmp_path / "cache",
                     "--json", tmp_path / "run.json", env=env)
    assert doc is not None, r.stdout[-3000:] + r.stderr[-3000:]
    return by_id(doc)[CHECK]


def _fresh(c: dict) -> bool:
    return "cached" not in c["details"]


def test_each_input_the_check_read_misses_the_cache_and_its_revert_replays(tmp_path):
    (tmp_path / "impl").mkdir()
    for name, text in FILES.items():
        (tmp_path / "impl" / name).write_text(text)
    cold = _run(tmp_path)
    assert cold["status"] == "pass" and _fresh(cold), cold["message"]
    assert not _fresh(_run(tmp_path))                               # unchanged: replayed
    for name, (edited, what) in EDITS.items():
        path = tmp_path / "impl" / name
        path.write_text(edited)
        planted = _run(tmp_path)
        assert _fresh(planted) and planted["status"] == "fail", (what, planted["message"])
        path.write_text(FILES[name])
        back = _run(tmp_path)
        assert not _fresh(back) and back["status"] == "pass", what      # the control: the same bytes replay
    planted = _run(tmp_path, env={**os.environ, "CACHETOY_GAIN": "0.9"})    # a variable the implementation reads
    assert _fresh(planted) and planted["status"] == "fail", planted["message"]
    (tmp_path / "impl" / "notes.txt").write_text("edited, still read by nothing\n")
    assert not _fresh(_run(tmp_path))                               # the control: an input of nothing
