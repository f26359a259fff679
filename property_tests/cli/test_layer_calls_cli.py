"""Every way a layer is called, against the installed layer classes (fla.layers imported in this process, under
the interpreter): each record exercises or explains every parameter of its layer class, a record missing one is
flagged (the negative controls), and each option's first level is the constructor's default."""
import dataclasses
import importlib

import pytest
from test_layer_calls import RECORDS

from pathmdn_verify.layers import calls as C


def _cls(record):
    """The installed layer class, in a child-free way: its module imports fla.layers only (no kernel runs)."""
    from pathmdn_verify.platform import fidelity
    fidelity.prepare_cpu_kernels()          # fla only with the interpreter on (conftest)
    try:
        return getattr(importlib.import_module(record.module), record.cls)
    except ModuleNotFoundError as exc:
        pytest.skip(f"flash-linear-attention not installed: {exc}")


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_parameter_of_the_layer_is_exercised_or_explained(name):
    record = RECORDS[name]
    assert C.uncovered(record.calls, _cls(record)) == []


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_record_missing_an_option_is_flagged(name):
    """Negative controls: one constructor option, one forward parameter, one call level left out without a reason."""
    record = RECORDS[name]
    cls = _cls(record)
    calls = record.calls
    option = next(n for n, v in calls.constructor.items() if not isinstance(v, C.Why))
    dropped = dataclasses.replace(calls, constructor={k: v for k, v in calls.constructor.items() if k != option})
    assert f"constructor {option}" in C.uncovered(dropped, cls)
    one_level = dataclasses.replace(calls, constructor={**calls.constructor, option: calls.constructor[option][:1]})
    assert f"constructor {option}" in C.uncovered(one_level, cls)
    forward = dataclasses.replace(calls, forward={k: v for k, v in calls.forward.items() if k != "cu_seqlens"})
    assert "forward cu_seqlens" in C.uncovered(forward, cls)
    narrowed = dataclasses.replace(calls, levels={**calls.levels, "grad": ("none", "contiguous")})
    assert "grad=strided (left out without a reason)" in C.uncovered(narrowed, cls)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_first_level_of_an_option_is_the_constructors_default(name):
    """A case leaves an option at its first level to the constructor (an older tree without the option then
    builds the same layer): that level must be the installed layer's default."""
    import inspect
    record = RECORDS[name]
    params = inspect.signature(_cls(record).__init__).parameters
    for option, levels in record.calls.constructor.items():
        if not isinstance(levels, C.Why):
            assert params[option].default == levels[0], (name, option)
