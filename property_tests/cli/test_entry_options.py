"""Every option of every op's production entry point (the fla function its adapter calls: its parameters with a
default, and the keys its body reads from **kwargs) is varied by the op's boundary cases (an optional input of the
record that they give and leave out) or declared not varied (`Fixed`) with a reason this test verifies: the probe,
pass, records or parameter type the declaration names.  Negative controls: an option added to a stand-in entry
point, a declaration naming no probe, a probe that gives another option, a varied input the cases never leave out.
And the option probes' own teeth: a knob that changes a bit, a refusal that takes the option, an option ignored."""
import importlib
import inspect
from dataclasses import replace

import pytest

from pathmdn_verify import ops
from pathmdn_verify.core import engine
from pathmdn_verify.core.records import ConventionProbe, Fixed
from pathmdn_verify.core.registry import Context
from pathmdn_verify.layers.calls import _kwargs_read
from pathmdn_verify.references import module_oracle as MOD
from test_records_structure import never_both


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    """fla only with the interpreter on (as the layer-call tests import their classes)."""
    from pathmdn_verify.platform import fidelity
    fidelity.prepare_cpu_kernels()
    try:
        importlib.import_module("fla")
    except ModuleNotFoundError as exc:
        pytest.skip(f"fla-core not installed: {exc}")


def entry_options(fn) -> set[str]:
    """The parameters of fn that have a default, and the keys its body reads from **kwargs."""
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.default is not p.empty} | _kwargs_read(inspect.unwrap(fn))


def undeclared(op, fn) -> list[str]:
    """'<option>: why' for each option of the entry point fn that op neither varies nor declares verifiably, and
    for each declaration of an option fn does not have."""
    out = [f"{n}: declared, but not an option of {fn.__name__}" for n in sorted(set(op.entry_params) - entry_options(fn))]
    for name in sorted(entry_options(fn)):
        how = op.entry_params.get(name)
        if how is None:
            out.append(f"{name}: neither varied nor declared")
        elif isinstance(how, Fixed):
            out += [f"{name}: {why}" for why in unverified(op, name, how, fn)]
        elif how not in op.optional:
            out.append(f"{name}: varied by {how!r}, not an optional input of {op.name}")
        else:
            out += [f"{name}: {m}" for m in never_both(op) if m.split(": ", 1)[1].split()[0] == how]
    return out


def unverified(op, name: str, fixed: Fixed, fn) -> list[str]:
    """What does not hold of a declaration: its probes exist, are of its kind and give this option; its pass
    exists; its records exist and call the same entry point; its parameter is of the type it names."""
    probes = {p.name: p for p in op.probes}
    if fixed.kind in ("probe", "no_effect", "refused"):
        kinds = {"probe": ("option", "convention", "refused"), "no_effect": ("no_effect",),
                 "refused": ("refused",)}[fixed.kind]
        out = []
        for by in fixed.by.split(","):
            p = probes.get(by)
            gives = p is not None and (name in p.options or (name == "scale" and p.kernel_scale_none))
            if p is None or p.kind not in kinds or not gives:
                out.append(f"{fixed.kind} {by!r}: no probe of {op.name} of kind {'/'.join(kinds)} gives it")
        return out
    if fixed.kind == "pass":
        return [] if fixed.by in op.passes or (fixed.by == "decode" and op.decode) else [f"no pass {fixed.by}"]
    if fixed.kind == "variant":
        records = [ops.OPS.get(n) for n in fixed.by.split(",")]
        same = all(r is not None and r.entry is not None and r.entry() is fn for r in records)
        return [] if len(records) > 1 and same else [f"records {fixed.by} do not all call {fn.__name__}"]
    annotation = str(inspect.signature(fn).parameters[name].annotation)
    return [] if fixed.by in annotation else [f"its type {annotation} is not {fixed.by}"]


WITH_ENTRY = [name for name, op in ops.OPS.items() if op.entry is not None]


def test_every_op_names_its_entry_point():
    assert sorted(WITH_ENTRY) == sorted(ops.OPS)


@pytest.mark.parametrize("name", WITH_ENTRY)
def test_every_option_of_the_entry_point_is_varied_or_declared(name):
    op = ops.OPS[name]
    assert undeclared(op, op.entry()) == []


def test_an_option_neither_varied_nor_declared_is_flagged():
    """Negative controls on gdn_recurrent: a stand-in entry point with one more option; a declaration naming no
    probe, or a probe that gives another option; a varied input its cases never leave out."""
    op = ops.OPS["gdn_recurrent"]
    real = op.entry()

    def stand_in(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None, output_final_state=False,
                 use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None, dt_bias=None,
                 use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False, cu_seqlens=None,
                 new_option=False, **kwargs):
        return kwargs.get("transpose_state_layout")
    assert entry_options(stand_in) == entry_options(real) | {"new_option"}
    assert undeclared(op, stand_in) == ["new_option: neither varied nor declared"]
    assert undeclared(replace(op, entry_params={**op.entry_params, "gk": Fixed("probe", "no_such_probe", "x")}),
                      real) == ["gk: probe 'no_such_probe': no probe of gdn_recurrent of kind option/convention/refused gives it"]
    assert undeclared(replace(op, entry_params={**op.entry_params, "gk": Fixed("probe", "value_decay", "x")}),
                      real) == ["gk: probe 'value_decay': no probe of gdn_recurrent of kind option/convention/refused gives it"]
    gone = replace(op, structure=replace(op.structure, options={"fwd": ("initial_state", "final_state", "g_given")}))
    assert undeclared(gone, real) == ["beta: fwd: beta never left out"]
    assert undeclared(replace(op, entry_params={**op.entry_params, "old_option": "S0"}), real) == [
        "old_option: declared, but not an option of fused_recurrent_gated_delta_rule"]


def test_the_other_declarations_are_checked():
    """pass, variant and multi_device declarations hold only where what they name does."""
    path, chunk16, conv = ops.OPS["path_attn"], ops.OPS["mdn_chunk16"], ops.OPS["short_conv"]
    assert unverified(path, "use_cache", Fixed("pass", "decode", "x"), path.entry()) == []
    without_decode = replace(path, decode=None, stages={p: f for p, f in path.stages.items() if p != "decode"},
                             regression_cases={k: c for k, c in path.regression_cases.items() if k[:7] != "decode."})
    assert unverified(without_decode, "use_cache", Fixed("pass", "decode", "x"), path.entry()) != []
    assert unverified(chunk16, "chunk_size", Fixed("variant", "mdn_chunk16,mdn_recurrent", "x"), chunk16.entry()) != []
    assert unverified(conv, "cp_context", Fixed("multi_device", "ProcessGroup", "x"), conv.entry()) != []


# ------------------------------------------------------------------ the option probes' teeth, on a stand-in op

def _stand_in():
    """l2norm's record with a torch kernel (no fla): y = x / sqrt(sum x^2 + eps), eps given or 1e-6."""
    kernel = lambda scale, x, eps=None, output_dtype=None: MOD.l2norm(x, 1e-6 if eps is None else eps)  # noqa: E731
    return replace(ops.OPS["l2norm"], kernel=kernel)


def _result(op, **probe):
    p = ConventionProbe(probe.pop("name", "p"), "d", probe.pop("what_else", ""), ops.OPS["l2norm"].sample_case,
                        **probe)
    return engine.convention_result(op, p, Context(device="cpu"))


def test_a_knob_that_changes_a_bit_fails_its_no_effect_probe():
    op = _stand_in()
    same = lambda op, x, s: op.kernel(**x, scale=s)                          # noqa: E731
    nudged = lambda op, x, s: op.kernel(**x, scale=s) * (1 + 2.0 ** -20)     # noqa: E731
    assert _result(op, kind="no_effect", given=same, options=("knob",)).status == "pass"
    assert _result(op, kind="no_effect", given=nudged, options=("knob",)).status == "fail"


def test_a_refusal_must_raise_as_declared():
    op = _stand_in()

    def refuses(op, x, s):
        raise ValueError("knob is not supported here")
    taken = lambda op, x, s: op.kernel(**x, scale=s)        # noqa: E731
    assert _result(op, kind="refused", given=refuses, options=("knob",), what_else="not supported").status == "pass"
    assert _result(op, kind="refused", given=refuses, options=("knob",), what_else="other words").status == "fail"
    assert _result(op, kind="refused", given=taken, options=("knob",), what_else="not supported").status == "fail"


def test_an_option_probe_fails_where_the_kernel_ignores_the_option():
    """eps = 1 on rows of norm ~ 1 changes every output: the kernel given it passes, one that ignores it fails."""
    op = _stand_in()
    meaning = lambda fn, x, s: fn(**{**x, "eps": 1.0}, scale=s)             # noqa: E731
    given = lambda op, x, s: op.kernel(**{**x, "eps": 1.0}, scale=s)        # noqa: E731
    ignored = lambda op, x, s: op.kernel(**x, scale=s)                      # noqa: E731
    assert _result(op, kind="option", given=given, meaning=meaning, options=("eps",), output="y").status == "pass"
    assert _result(op, kind="option", given=ignored, meaning=meaning, options=("eps",), output="y").status == "fail"
    # an option whose meaning the plain oracle shares proves nothing, unless declared not to discriminate
    same = lambda fn, x, s: fn(**x, scale=s)                                # noqa: E731
    assert _result(op, kind="option", given=ignored, meaning=same, options=("eps",), output="y").status == "fail"
    assert _result(op, kind="option", given=ignored, meaning=same, options=("eps",), output="y",
                   discriminates=False).status == "pass"


def test_a_probe_of_a_kind_without_its_fields_is_refused():
    with pytest.raises(ValueError, match="given"):
        ConventionProbe("p", "d", "", None, kind="no_effect")
    with pytest.raises(ValueError, match="meaning"):
        ConventionProbe("p", "d", "", None, kind="option", given=lambda *a: None, options=("x",))
    with pytest.raises(ValueError, match="kind"):
        ConventionProbe("p", "d", "", None, kind="other", given=lambda *a: None, options=("x",))
