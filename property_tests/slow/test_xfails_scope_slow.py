"""Any fla checkout, end to end: `verify compare` survives a kernel that kills its process (a crashed verdict,
exit 1) and takes --kernel-root; the repro line of `--save-failing` names the kernel root, so it reproduces
the failure."""
import json
import re
import shlex

from test_xfails_scope import copy_fla, verify

PATH_CHECK = "kernel.fla.path_attn.fwd.bf16.beta_uniform"


def test_compare_survives_a_kernel_that_aborts(tmp_path, registry):
    import torch

    from pathmdn_verify.ops import OPS
    root = copy_fla(tmp_path / "abort")
    target = root / "fla" / "ops" / "path_attn" / "parallel.py"
    text = target.read_text()
    head = re.search(r"(?ms)^def parallel_path_attn\(.*?^\) -> [^\n]*:\n", text)
    assert head, "parallel_path_attn's signature changed"
    target.write_text(text[:head.end()] + "    import os\n    os.abort()\n" + text[head.end():])
    op = OPS["path_attn"]
    x = {n: t for n, t in op.inputs(op.sample_case, torch.bfloat16).items() if t is not None}
    torch.save(x, tmp_path / "x.pt")
    out = tmp_path / "c.json"
    r = verify("compare", "--op", "path_attn", "--inputs", str(tmp_path / "x.pt"), "--device", "cpu",
               "--kernel-root", str(root), "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^FAIL .*crashed \(signal 6\b", r.stdout, re.MULTILINE), r.stdout
    doc = json.loads(out.read_text())
    assert (doc["status"], doc["kind"], doc["signal"]) == ("fail", "crashed", 6)


def test_save_failing_repro_names_the_kernel_root_and_reproduces(tmp_path):
    from pathmdn_verify.platform.mutation import materialize
    from pathmdn_verify.ops.attention_ops import PATH_MUTANTS
    mutant = next(m for m in PATH_MUTANTS if m.name == "path_zero_mask")
    root = materialize(mutant, tmp_path / "mutant")
    out = tmp_path / "run.json"
    r = verify("kernels", "--kernel-root", str(root), "--id", PATH_CHECK, "--profile", "quick", "--device", "cpu",
               "--save-failing", str(tmp_path / "saved"), "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    command = json.loads(out.read_text())["checks"][0]["details"]["compare_command"]
    assert command in r.stdout
    argv = shlex.split(command)
    assert argv[:2] == ["verify", "compare"] and argv[argv.index("--kernel-root") + 1] == str(root)
    replay = verify(*argv[1:])
    assert replay.returncode == 1 and "EXCEEDS" in replay.stdout, replay.stdout + replay.stderr
