"""The op table drives every command: every check id parses and formats through the one id type and resolves to
its record; localize and the sanitizer accept every searched kernel check (gdn_* and decode included);
--references follows the record or the option."""
import pytest

from pathmdn_verify import cli, ops
from pathmdn_verify.core.ids import CheckId


def test_every_id_round_trips_and_resolves_to_its_record(registry):
    for cid in registry:
        parsed = CheckId.parse(cid)
        assert str(parsed) == cid
        if parsed.is_kernel:
            op = ops.record(parsed)
            assert op.name == parsed.op
            if parsed.searched:
                assert parsed.dtype in op.dtypes
                regimes = op.decode.regimes if parsed.pass_ == "decode" else op.regimes
                assert parsed.pass_ in (*op.passes, "decode") and parsed.regime in regimes
                assert cid in {op.check_id(parsed.pass_, parsed.dtype, parsed.regime)}
        if parsed.is_layer:        # layer.<impl>.<layer>.<variant>.<dtype>.<comparison>: a declared combination
            from pathmdn_verify import layers
            rec = layers.LAYERS[parsed.layer]
            assert (cid, parsed.variant, parsed.dtype, parsed.comparison) in rec.ids(parsed.impl)
            assert parsed.dtype in rec.dtypes
            assert CheckId.of_layer(parsed.impl, rec.name, parsed.variant, parsed.dtype, parsed.comparison) == parsed


@pytest.mark.parametrize("text", ["kernel.fla.path_attn.fwd.bf16", "kernel.fla.path_attn.fwd.fp16.typical",
                                  "Kernel.fla.x.fwd.bf16.y", "kernel..path_attn.fwd.bf16.y", "oracle",
                                  "layer.fla.path.base.fp16.train", "layer.fla.path.base.bf16"])
def test_malformed_ids_are_refused(text):
    from pathmdn_verify.core.errors import UsageError
    with pytest.raises(UsageError):
        CheckId.parse(text)


def test_localize_and_the_sanitizer_accept_every_searched_kernel_check(registry, capsys):
    """Every searched id of fla gets past localize's id checks to the input file (here missing: exit 2 'no such
    file'); the sanitizer resolves the same record and dtype.  Another implementation's (one a test of this
    session registered) is refused by name: its stages are not fla's."""
    searched = [c for c in registry if CheckId.parse(c).searched]
    assert any(".gdn_" in c for c in searched) and any(".decode." in c for c in searched)
    for cid in searched:
        assert cli.main(["localize", "--id", cid, "--inputs", "/nonexistent.pt", "--device", "cpu", "--sanitize"]) == 2
        impl = CheckId.parse(cid).impl
        says = "no such file" if impl == "fla" else f"not supported for implementation {impl}"
        assert says in capsys.readouterr().err, cid


def test_references_run_where_the_record_or_the_option_says():
    """--references auto takes each op record's choice (the CPU for the MDN and GDN recurrences, measured faster
    there on an H200; the run's device for PaTH and FoX), device and cpu override it, and a non-default choice is
    in the repro command."""
    from pathmdn_verify.core.engine import reference_device
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.run.runner import repro_command
    where = lambda name, choice: reference_device(ops.OPS[name], Context(device="cuda", references=choice), "cuda")
    assert [where(n, "auto") for n in ("mdn_recurrent", "gdn_chunk", "path_attn", "forgetting_attn")] == \
        ["cpu", "cpu", "cuda", "cuda"]
    assert where("mdn_recurrent", "device") == "cuda" and where("path_attn", "cpu") == "cpu"
    assert "--references cpu" in repro_command("kernel.fla.path_attn.fwd.fp32.beta_uniform",
                                                Context(device="cuda", references="cpu"))
    assert "--references" not in repro_command("kernel.fla.path_attn.fwd.fp32.beta_uniform", Context(device="cuda"))


def test_the_mdn_oracle_checks_run_where_the_mdn_references_run():
    """oracle.mdn.* (verify/checks/oracles_mdn.py) run on the device MDN's references run on: the CPU under
    --references auto, the run's device under device; no check there places a tensor by ctx.device itself."""
    import inspect
    from pathmdn_verify.checks import oracles_mdn
    from pathmdn_verify.core.registry import Context
    assert [oracles_mdn._device(Context(device="cuda", references=r)) for r in ("auto", "device", "cpu")] == \
        ["cpu", "cuda", "cpu"]
    source = inspect.getsource(oracles_mdn)
    assert source.count("ctx.device") == 1 and "return place_references(REFERENCES_ON, ctx, ctx.device)" in source
