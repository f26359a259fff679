"""`--configs`: the configs canary (every config of an autotuned kernel run) passes through `verify kernels`."""
from __future__ import annotations

from helpers import run_cli
from test_configs import _check


def test_canary_passes(tmp_path):
    r, doc = run_cli("kernels", "--id", "env.interpreter.configs_cover", "--profile", "quick", "--json",
                     tmp_path / "c.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _check(doc, "env.interpreter.configs_cover")["status"] == "pass"


def test_a_run_ends_with_its_summary_and_notes_configs_only_when_asked(tmp_path):
    """The configs a run left unrun are a note for who asked about configs (--configs, -v), about the kernels the
    run launched; a plain run ends with its summary."""
    from helpers import run_cli
    args = ("kernels", "--id", "kernel.fla.gdn_chunk.fwd.fp32.typical", "--profile", "quick", "--device", "cpu",
            "--cache-dir", tmp_path / "verdicts")
    plain, _ = run_cli(*args)
    assert plain.returncode == 0 and plain.stdout.strip().splitlines()[-1].startswith("total wall time"), plain.stdout
    asked, _ = run_cli(*args, "--configs", "cover")
    note = asked.stdout.strip().splitlines()[-1]
    assert note.startswith("note: --configs cover left configs unrun in this run: chunk_"), asked.stdout
