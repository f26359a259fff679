"""Production-kernel checks through the command: --kernel-root without a package is exit 2; `--save-failing`
saves the minimal failing example and the `verify compare` command it prints reproduces the failure."""
import json


def test_kernel_root_without_package_is_usage_error(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "pathmdn_verify", "kernels", "--device", "cpu", "--kernel-root", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "fla/__init__.py" in r.stderr and "Traceback" not in r.stderr


def test_save_failing_writes_a_file_that_compare_replays(tmp_path, registry):
    """--save-failing (Context.save_failing): the minimal example of a failing check (the listed
    log(beta + 1e-6) bias of fla's MDN chunk path at T = 1) is saved, the failure message prints the
    `verify compare` command, and that command reproduces the failure with the same error."""
    import shlex

    from pathmdn_verify import cli
    from pathmdn_verify.core.registry import Context
    cid = "kernel.fla.mdn_chunk16.fwd.bf16.alpha_near1"
    result = registry[cid].run(Context(device="cpu", profile="quick", save_failing=str(tmp_path / "f")))
    command = result.details["compare_command"]
    assert result.status == "fail" and command in result.message and (tmp_path / "f" / f"{cid}.pt").is_file()
    argv = shlex.split(command)
    assert argv[:2] == ["verify", "compare"]
    replay = tmp_path / "replay.json"
    assert cli.main([*argv[1:], "--json", str(replay)]) == 1
    tensors = json.loads(replay.read_text())["tensors"]
    assert [t["err_rel"] for t in tensors] == [t["err_rel"] for t in result.details["tensors"]]
