"""The H200's device answers on a CPU (kernels/fla_ops.py emulate_h200_device, h200_shared_mem_answers), on stand-in
modules shaped as fla's (no fla import here; the canaries' end-to-end negative controls are in
property_tests/slow/test_device_emulation.py)."""
import types
from enum import Enum

import pytest

from pathmdn_verify.kernels import fla_ops


class _Backend(Enum):
    ADA, AMPERE, HOPPER, DEFAULT = 101376, 131072, 233472, 102400     # fla 2025-03-31 .. 04-05

    @classmethod
    def get_shared_memory(cls, arch):
        return cls[arch.upper()].value


def test_the_h200s_shared_memory_answer_follows_the_trees_thresholds(monkeypatch):
    hw = types.SimpleNamespace(Backend=_Backend)
    monkeypatch.setattr(fla_ops, "shared_mem_module", lambda: (hw, hw, lambda arch, idx: True))
    answers = fla_ops.h200_shared_mem_answers()
    assert answers["hopper,None"] is False and answers["ampere,0"] is True and answers["ada,None"] is True


def test_the_driver_view_answers_only_the_device_properties():
    triton = types.SimpleNamespace(runtime=types.SimpleNamespace(driver=types.SimpleNamespace(active=None)),
                                   language="tl")
    view = fla_ops._Delegate(triton, runtime=fla_ops._Delegate(
        triton.runtime, driver=fla_ops._Delegate(triton.runtime.driver, active=fla_ops._H200Driver())))
    props = view.runtime.driver.active.utils.get_device_properties(None)
    assert props["multiprocessor_count"] == 132 and props["max_shared_mem"] == 232448
    assert view.language == "tl"
    with pytest.raises(RuntimeError, match="not emulated"):
        view.runtime.driver.active.get_current_target()


@pytest.mark.parametrize("flags, lifted", [({"TRITON_ABOVE_3_4_0": True, "TRITON_ABOVE_3_7_1": False},
                                            {"TRITON_ABOVE_3_4_0": True, "TRITON_ABOVE_3_7_1": True}),
                                           ({"TRITON_ABOVE_3_4_0": True}, {"TRITON_ABOVE_3_4_0": False})])
def test_the_guard_is_lifted_in_its_module_alone(flags, lifted):
    module = types.SimpleNamespace(IS_NVIDIA_HOPPER=True, **flags)
    fla_ops._lift_guard(module)
    assert {n: getattr(module, n) for n in flags} == lifted and module.IS_NVIDIA_HOPPER is True


def test_emulation_off_names_parts(monkeypatch):
    monkeypatch.setenv(fla_ops.EMULATE_OFF_ENV, "sm_count, tf32")
    assert fla_ops.emulation_off() == {"sm_count", "tf32"}
