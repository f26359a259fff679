"""pathmdn_verify.run.sanitize: compute-sanitizer's report parsed from captured output; no compute-sanitizer is
said, not guessed; a listed fault is not replayed."""
from pathmdn_verify.run import sanitize


# Captured compute-sanitizer memcheck reports of Triton kernels, as published: the 2025 format (kernel+offset
# in file:line) from triton-viz issue #158, and the 2024 format (offset in file:line:kernel) from sglang
# issue #2599.
NEW_FORMAT = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at matmul_kernel+0xec0 in matmul_triton2.py:43
=========     by thread (18,0,0) in block (0,0,0)
=========     Access to 0x74505bcccca0 is out of bounds
=========     and is 161 bytes after the nearest allocation at 0x74505bccc800 of size 1,024 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f26f0] in libcuda.so.1
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cuStreamSynchronize.
========= ERROR SUMMARY: 2 errors
"""
OLD_FORMAT = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at 0xda0 in /opt/dlami/nvme/bbuf/sglang/python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py:175:fused_moe_kernel
=========     by thread (96,0,0) in block (44,0,0)
=========     Address 0x763995f9f000 is out of bounds
=========     and is 1,241,911,296 bytes before the nearest allocation at 0x7639e0000000 of size 5,033,164,800 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame: [0x2f26f0]
=========                in /usr/lib/x86_64-linux-gnu/libcuda.so.1
"""


def test_parses_the_current_report_format():
    doc = sanitize.parse(NEW_FORMAT)
    assert doc["errors"] == 2 and len(doc["faults"]) == 1
    f = doc["faults"][0]
    assert (f["kernel"], f["file"], f["line"], f["access"], f["size"]) == \
        ("matmul_kernel", "matmul_triton2.py", 43, "__global__ read", 16)
    assert (f["thread"], f["block"], f["address"]) == ("18,0,0", "0,0,0", "0x74505bcccca0")
    assert sanitize.describe(f) == ("Invalid __global__ read of size 16 bytes in matmul_kernel at matmul_triton2.py:43 "
                                    "(thread (18,0,0) block (0,0,0); address 0x74505bcccca0 is out of bounds, 161 bytes "
                                    "after the nearest allocation at 0x74505bccc800 of size 1,024 bytes)")


def test_parses_the_older_report_format():
    f = sanitize.parse(OLD_FORMAT)["faults"][0]
    assert (f["kernel"], f["line"], f["block"]) == ("fused_moe_kernel", 175, "44,0,0")
    assert f["file"].endswith("fused_moe_triton/fused_moe.py") and "before the nearest" in f["distance"]


def test_hardware_exception_and_clean_reports():
    f = sanitize.parse("========= Warp Illegal Address\n=========     at 0x50 in /k.py:12:kern\n"
                       "=========     by thread (0,0,0) in block (1,0,0)\n")["faults"][0]
    assert (f["what"], f["kernel"], f["line"], f["size"]) == ("Warp Illegal Address", "kern", 12, None)
    assert sanitize.parse("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == {"faults": [], "errors": 0}


def test_no_compute_sanitizer_is_said_not_guessed(monkeypatch):
    """Every place find_sanitizer looks is emptied (the H200 host has /usr/local/cuda-13/bin/compute-sanitizer:
    without the glob patched this test failed there)."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    monkeypatch.delenv("COMPUTE_SANITIZER", raising=False)
    monkeypatch.setattr(sanitize.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(sanitize.importlib.util, "find_spec", lambda name: None)
    assert sanitize.find_sanitizer() is None


def test_a_listed_fault_with_its_error_text_is_not_replayed(monkeypatch):
    """The runner replays a fatal CUDA error under compute-sanitizer unless an applicable entry lists the fault
    with its error text (`fault`) and the error repeats it; another text is replayed (the control)."""
    from pathmdn_verify.core.registry import REGISTRY, Context, Result

    from pathmdn_verify.run import runner, xfail_list as xfails
    from pathmdn_verify.run import load_checks
    load_checks()
    cid = "kernel.fla.path_attn.bwd.bf16.gate_weak"     # listed for cuda:NVIDIA H200 with fault = "an illegal ..."
    monkeypatch.setattr(runner, "scope", lambda ctx, pkg: xfails.Scope("fla 0.6.0", "cuda:NVIDIA H200", "ci", None))
    monkeypatch.setattr(runner, "_loaded_package", lambda: None)
    replayed = []
    monkeypatch.setattr(sanitize, "annotate", lambda check_id, result, device: replayed.append(check_id))

    def fault(text):
        result = Result("fail", message=f"{cid}: the kernel raised a fatal CUDA error: RuntimeError: {text}",
                        kind="cuda_fatal", details={"failing_example": "T=1 D=32 seed=0"})
        runner._sanitize(REGISTRY[cid], result, Context(device="cuda"))
        return result
    listed = fault("Triton Error [CUDA]: an illegal memory access was encountered")
    assert not replayed and "sanitizer replay skipped" in listed.message
    assert listed.details["sanitizer"]["status"] == "skipped"
    other = fault("CUDA error: misaligned address")
    assert replayed == [cid] and "skipped" not in other.message
