"""Every op record declares its kernel structure: each of its passes gets boundary cases (pathmdn_verify.core.boundaries),
every optional input of the record is both given and left out among them, and every input its adapter takes as
optional is one of the record's optional inputs; each rule with a negative control."""
import inspect
from dataclasses import replace

import pytest
import torch

from pathmdn_verify import ops
from pathmdn_verify.core import boundaries as B

PROFILE = "ci"                  # quick has no boundary cases; ci is the profile the CPU runs them at
NOT_INPUTS = ("scale", "chunk")  # adapter keywords the records' kernel lambdas set themselves: the attention
#                                 scale, and the variant (MDN chunk size, GDN chunk or fused recurrent)


def no_boundary_cases(op) -> list[str]:
    """The passes of op that get no boundary case at PROFILE."""
    return [p for p in op.passes if op.structure is None or not B.cases(op, p, PROFILE)]


def never_both(op) -> list[str]:
    """'<pass>: <name> never given' / 'never left out' for each optional input of op that its boundary cases of that
    pass do not both give and leave out (what the kernel gets: the record's inputs of each case)."""
    out = []
    for p in op.passes:
        cases = B.cases(op, p, PROFILE) if op.structure is not None else []
        given = [{n for n, t in op.inputs(c, torch.float32).items() if t is not None} for _, c in cases]
        for name in op.optional:
            if not any(name in g for g in given):
                out.append(f"{p}: {name} never given")
            if all(name in g for g in given):
                out.append(f"{p}: {name} never left out")
    return out


def adapters(op) -> list:
    """The adapter functions (pathmdn_verify.kernels.fla_ops) that op's kernel lambda calls."""
    names = inspect.getclosurevars(op.kernel)
    found = [f for f in names.nonlocals.values() if inspect.isfunction(f)]
    for module in (m for m in names.globals.values() if inspect.ismodule(m)):
        found += [getattr(module, n) for n in names.unbound if inspect.isfunction(getattr(module, n, None))]
    return found


def unlisted_optional(op) -> list[str]:
    """Inputs that an adapter of op takes as optional (a keyword defaulting to None) but op names as none of its
    inputs (a record may require one: GDN's chunk path requires the g and beta its adapter shares with the fused
    recurrent one, which takes them optional)."""
    found = adapters(op)
    assert found, f"{op.name}: no adapter found in its kernel lambda"
    return sorted({n for f in found for n, prm in inspect.signature(f).parameters.items()
                   if prm.default is None and n not in NOT_INPUTS and n not in op.optional + op.required})


@pytest.mark.parametrize("name", list(ops.OPS))
def test_every_pass_gets_boundary_cases(name):
    assert no_boundary_cases(ops.OPS[name]) == []


@pytest.mark.parametrize("name", list(ops.OPS))
def test_every_optional_input_is_given_and_left_out(name):
    assert never_both(ops.OPS[name]) == []


@pytest.mark.parametrize("name", list(ops.OPS))
def test_every_optional_input_of_the_adapter_is_in_the_record(name):
    assert unlisted_optional(ops.OPS[name]) == []


def test_a_record_without_structure_is_flagged():
    op = replace(ops.OPS["gdn_recurrent"], structure=None)
    assert no_boundary_cases(op) == ["fwd"]
    assert never_both(op) == [f"fwd: {n} never {w}" for n in op.optional for w in ("given", "left out")]


def test_an_option_left_out_of_the_structure_is_flagged():
    op = ops.OPS["gdn_recurrent"]
    assert never_both(op) == []
    no_option = replace(op, structure=replace(op.structure, options={}))
    assert no_boundary_cases(no_option) == [] and never_both(no_option) == [
        "fwd: g never left out", "fwd: beta never left out", "fwd: S0 never given", "fwd: output_final_state never "
        "given"]
    dense = replace(op, structure=replace(op.structure, varlen=False))
    assert never_both(dense) == ["fwd: cu_seqlens never given"]


def test_an_adapter_optional_the_record_does_not_name_is_flagged():
    op = ops.OPS["gdn_recurrent"]
    assert [f.__name__ for f in adapters(op)] == ["gated_delta_rule"]
    assert unlisted_optional(replace(op, optional=tuple(o for o in op.optional if o != "S0"),
                                     grad_inputs=tuple(g for g in op.grad_inputs if g != "S0"))) == ["S0"]

    def wider(q, k, v, g, beta, S0=None, cu_seqlens=None, gk=None, scale=None):   # an adapter that grew an input
        raise AssertionError("not called")
    assert unlisted_optional(replace(op, kernel=lambda scale, **x: wider(**x, scale=scale))) == ["gk"]
