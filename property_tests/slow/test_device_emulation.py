"""The H200's device answers read back from fla (verify/checks/tile_canaries.py env.interpreter.device.*): each
canary passes with its answer on and fails with it off (VERIFY_EMULATE_H200_OFF), its negative control."""
import os

from helpers import run_cli


CANARIES = ("sm_count", "tf32", "hopper", "triton_guard")


def _run(tmp_path, off: str | None) -> dict:
    out = tmp_path / f"{off or 'on'}.json"
    env = {**os.environ, "VERIFY_EMULATE_H200_OFF": off or ""}
    _, doc = run_cli("layers", "-k", "env.interpreter.device", "--device", "cpu", "--profile", "quick", "--workers", "1",
                     "--json", out, env=env)
    return {c["id"].rsplit(".", 1)[1]: c["status"] for c in doc["checks"]} | {
        "claimed": doc["environment"]["interpreter_fidelity"]["device_emulation"]}


def test_every_device_answer_is_read_back_and_fails_when_off(tmp_path):
    on = _run(tmp_path, None)
    assert all(on[c] == "pass" for c in CANARIES), on
    off = _run(tmp_path, "sm_count,tf32,hopper")
    assert all(off[c] == "fail" for c in ("sm_count", "tf32", "hopper")), off
    assert off["claimed"]["sm_count"].startswith("not emulated")
    guard = _run(tmp_path, "triton_guard")      # fla's #640 guard fires here then, as on the H200
    assert guard["triton_guard"] == "fail" and guard["hopper"] == "pass", guard
