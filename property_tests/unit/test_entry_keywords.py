"""An option probe gives fla's entry point a keyword the op's canonical call leaves out (kernels.fla_ops.entry_keywords).
Only an adapter's call of an entry point (fla_ops._call) passes it on; an implementation called with the canonical
arguments alone (an --impl function calling fla itself) never sees it.  Such a probe is unsupported, never judged on
the call without the option: the docs' own example implementation (docs/examples/fla_gdn_impl.py) got 8 false
failures ("declared convention not confirmed") and 3 false passes (chunk_size 16 and 32 measured at fla's default)
on the CPU and an H100 before this."""
import pytest

from pathmdn_verify.core.errors import VariantUnsupported
from pathmdn_verify.kernels import fla_ops


def entry(q, chunk_size=64):
    return q, chunk_size


def adapter(q):                      # a built-in record's kernel: the entry point through fla_ops._call
    return fla_ops._call(entry, q)


def own(q):                          # another implementation: calls the entry point itself
    return entry(q)


def test_an_adapter_passes_the_keyword_on():
    with fla_ops.entry_keywords(chunk_size=16):
        assert adapter(1) == (1, 16)
    assert fla_ops.given_with(chunk_size=32)(type("Op", (), {"kernel": staticmethod(
        lambda q, scale: adapter(q))}), {"q": 1}, None) == (1, 32)


def test_a_call_that_never_reaches_an_adapter_is_unsupported():
    with pytest.raises(VariantUnsupported, match="chunk_size: keywords of fla's entry point"):
        with fla_ops.entry_keywords(chunk_size=16):
            own(1)
    with pytest.raises(VariantUnsupported):
        fla_ops.given_with(chunk_size=32)(type("Op", (), {"kernel": staticmethod(lambda q, scale: own(q))}),
                                          {"q": 1}, None)


def test_nested_blocks_each_see_the_adapter_and_an_empty_block_is_free():
    with fla_ops.entry_keywords(chunk_size=16):
        with fla_ops.entry_keywords():
            assert adapter(1) == (1, 16)
    with fla_ops.entry_keywords():
        own(1)
