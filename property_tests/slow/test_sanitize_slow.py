"""pathmdn_verify.run.sanitize end to end: the CPU interpreter's bounds check names a planted out-of-bounds load (a
copy of fla with one mask removed) to its file and line, with the example shrunk to the smallest shape that
still faults; the unmodified kernel is clean, also through `verify localize --sanitize`."""
import json
import subprocess
import sys

from pathmdn_verify import ops
from pathmdn_verify.core import examples as example
from pathmdn_verify.platform.mutation import Mutant, materialize
from pathmdn_verify.ops.attention_ops import PathCase
from pathmdn_verify.run import sanitize

FWD = "kernel.fla.path_attn.fwd.fp32.beta_uniform"
UNMASKED_V = Mutant("oob_v_load", "PaTH forward: v loaded without its row mask (reads past the last row)",
                    "ops/path_attn/intra_chunk_preprocess_fwd.py", "b_v = tl.load(p_v, mask=m_v, other=0.0)",
                    "b_v = tl.load(p_v)", ())


def _example(tmp_path):
    path = tmp_path / "x.pt"
    example.save(example.build(ops.record(FWD), "fp32", PathCase(T=40, seed=1), "cpu"), path)
    return path


def test_cpu_bounds_check_names_a_planted_out_of_bounds_load(tmp_path, monkeypatch):
    root = materialize(UNMASKED_V, tmp_path / "root")
    monkeypatch.setenv("PYTHONPATH", f"{root}:{sys.path[0] if sys.path[0] else '.'}")
    doc = sanitize.sanitize(FWD, str(_example(tmp_path)), "cpu")
    assert doc["status"] == "fault", doc["summary"]
    f = doc["faults"][0]
    line = (root / "fla" / UNMASKED_V.path).read_text().splitlines().index("    b_v = tl.load(p_v)") + 1
    assert (f["kernel"], f["line"], f["access"], f["size"]) == ("intra_chunk_preprocess_fwd_kernel", line, "load", 4)
    assert f["file"] == str(root / "fla" / UNMASKED_V.path)
    assert doc["smallest_faulting_shape"].startswith("B=1 T=1 ") and doc["shape"].startswith("B=1 T=40 ")
    assert "smallest faulting shape B=1 T=1" in doc["summary"]


def test_runner_hook_annotates_a_result(tmp_path, monkeypatch):
    """annotate(): the example named by a failing Result is rebuilt, rerun, and the verdict lands in the
    message and details (the path the runner takes for a cuda_fatal result; here the CPU's bounds check)."""
    from pathmdn_verify.core.registry import Result
    root = materialize(UNMASKED_V, tmp_path / "root")
    monkeypatch.setenv("PYTHONPATH", f"{root}:{sys.path[0] if sys.path[0] else '.'}")
    result = Result("fail", message="kernel raised", details={"failing_example": PathCase(T=3, seed=2).label()})
    verdict = sanitize.annotate(FWD, result, "cpu")
    assert verdict["status"] == "fault" and result.details["sanitizer"] is verdict
    assert "[sanitizer: Invalid load of size 4 bytes in intra_chunk_preprocess_fwd_kernel at " in result.message


def test_unmodified_kernel_is_clean_under_the_bounds_check(tmp_path):
    doc = sanitize.sanitize(FWD, str(_example(tmp_path)), "cpu")
    assert doc["status"] == "clean" and not doc["faults"], doc


def test_localize_sanitize_on_demand(tmp_path):
    out = tmp_path / "o.json"
    proc = subprocess.run([sys.executable, "-m", "pathmdn_verify", "localize", "--id", "kernel.fla.path_attn.bwd.fp32.beta_uniform",
                           "--inputs", str(_example(tmp_path)), "--device", "cpu", "--sanitize", "--json", str(out)],
                          capture_output=True, text=True)
    doc = json.loads(out.read_text())
    assert proc.returncode == 0 and doc["sanitizer"]["status"] == "clean" and doc["first_divergent"] is None, proc.stdout
    assert "sanitizer: no fault when rerun alone" in proc.stdout
