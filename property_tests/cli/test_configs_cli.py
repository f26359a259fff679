"""`--configs`: the configs canary (every config of an autotuned kernel run) passes through `verify kernels`; a
check counts the configs Triton timed (Triton in this process)."""
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


def test_a_check_counts_the_configs_triton_timed():
    """--configs autotune: a check's configs_timed counts where Autotuner._bench is called (the count is installed
    with the configs patch, around the fidelity layer's zero timing)."""
    from pathmdn_verify.platform import configs
    from pathmdn_verify.platform.fidelity import prepare_cpu_kernels
    prepare_cpu_kernels()          # triton in this process: the interpreter's, as in a CPU worker
    with configs.scope("kernel.fla.x.fwd.fp32.r", "autotune") as st:
        from triton.runtime.autotuner import Autotuner
        assert Autotuner._bench.__name__ == "bench"
        st.declared["k"], st.ran["k"], st.timed["k"] = ["BK=16", "BK=32"], {1: 1}, 2
        assert configs.collected()["configs_timed"] == {"k": 2}


def test_the_first_check_of_a_process_on_a_gpu_runs_under_its_configs():
    """configs.begin patches Triton's autotuner for a check on cuda even when nothing has imported triton yet (the
    first check of `--workers 0`, which imports the kernel package as it runs); on the CPU it leaves the first import
    of triton to the fidelity layer (the control: the autotuner stays Triton's)."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from pathmdn_verify.core.registry import Context\n"
            "from pathmdn_verify.platform import configs\n"
            "assert 'triton' not in sys.modules\n"
            "configs.begin('kernel.fla.l2norm.fwd.fp32.typical', Context(device=sys.argv[1]))\n"
            "from triton.runtime.autotuner import Autotuner\n"
            "print(getattr(Autotuner.run, '_verify_configs', False))\n")
    for device, patched in (("cuda", "True"), ("cpu", "False")):
        done = subprocess.run([sys.executable, "-c", code, device], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.strip() == patched, (device, done.stdout, done.stderr[-2000:])
