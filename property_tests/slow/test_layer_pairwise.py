"""A pairwise layer case end to end (verify/layers/calls.py): it passes on fla 0.6.0, and fails when the literal
ignores an option the case gives the layer (the literal must take every option its record covers)."""
import dataclasses

import pytest



def test_a_case_fails_when_the_literal_drops_one_of_its_options():
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.layers import LayerCase, calls, load
    from pathmdn_verify.platform import setup
    ctx = Context(device="cpu", profile="quick")
    setup.prepare(ctx)
    record = load()["gdn"]
    index = next(i for i, row in enumerate(calls.covering(record.calls))
                 if row["output_gate_activation"] == "sigmoid" and row["phase"] == "eval" and row["q_len"] == "short")
    case = LayerCase(ctx, record, "pairwise", record.calls.dtype)
    try:
        good = calls.run(case, record.calls, index)
    except Exception as exc:                 # pragma: no cover - the layer package missing
        pytest.skip(f"GatedDeltaNet does not run here: {exc}")
    assert good.status == "pass", good.message

    def swish_only(case, layer, p, x, exact):
        return record.calls.literal(dataclasses.replace(case, options={**case.kwargs, "output_gate_activation":
                                                                        "swish"}), layer, p, x, exact)
    blind = dataclasses.replace(record.calls, literal=swish_only)
    bad = calls.run(case, blind, index)
    assert bad.status == "fail" and "output_gate_activation=sigmoid" in bad.message
