"""Layer records are validated when made, as op records are (pathmdn_verify.layers.table.LayerRecord.__post_init__):
each planted bad record is refused naming its field, and the ids a record declares are CheckId's (round-tripping)."""
import pytest

from pathmdn_verify.core.errors import UsageError
from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.layers.table import LayerRecord

GOOD = dict(name="toy", module="fla.layers.toy", cls="ToyAttention", description="a toy layer",
            variants={"base": {}, "gate-gqa": {"num_kv_heads": 1}},
            comparisons={"forward": ("the output", lambda case: None), "cache-ops": ("generation", lambda case: None)})


def test_a_good_record_declares_checkid_ids():
    rec = LayerRecord(**GOOD)
    ids = rec.ids()
    assert [i[0] for i in ids][:2] == ["layer.fla.toy.base.bf16.forward", "layer.fla.toy.base.bf16.cache-ops"]
    assert len(ids) == 2 * 2 * 2
    for cid, variant, dtype, comparison in ids:
        parsed = CheckId.parse(cid)
        assert str(parsed) == cid and (parsed.layer, parsed.variant, parsed.dtype, parsed.comparison) == \
            ("toy", variant, dtype, comparison)


@pytest.mark.parametrize("field, value, says", [
    ("name", "Toy", "name must be"),
    ("name", "to.y", "name must be"),
    ("module", "fla/layers/toy.py", "module"),
    ("cls", "Toy Attention", "cls"),
    ("description", "", "description"),
    ("dtypes", ("fp16",), "dtypes"),
    ("dtypes", (), "dtypes"),
    ("variants", {"base": None}, "variants"),
    ("variants", {"pairwise": {}}, "variants"),
    ("variants", {"ba.se": {}}, "words of a check id"),
    ("comparisons", {"forward": lambda case: None}, "comparisons"),
    ("comparisons", {"for ward": ("x", lambda case: None)}, "words of a check id"),
    ("comparisons", {}, "declares no check"),
    ("declared", None, "callable"),
])
def test_a_bad_record_is_refused_naming_its_field(field, value, says):
    with pytest.raises(ValueError, match=f"layer record .*{says}"):
        LayerRecord(**{**GOOD, field: value})


@pytest.mark.parametrize("words", [("fla", "toy", "base", "fp16", "forward"), ("fla", "toy", "ba.se", "bf16", "x"),
                                   ("fla", "toy", "base", "bf16", "")])
def test_a_layer_id_that_would_not_round_trip_is_refused(words):
    with pytest.raises(UsageError):
        CheckId.of_layer(*words)
