"""The generation (key-value and state) cache of the layer checks (verify/layers/kv_cache.py): the harness's cache
keeps fla's protocol, and the tree's Cache is used only where it can run here and defines the operations a
comparison needs."""
import pytest
import torch

from pathmdn_verify.layers import kv_cache as C


def _attn(B, T, fill):
    return (torch.full((B, T, 2), float(fill)), torch.full((B, T, 2), float(fill)))


def test_attention_states_are_appended_and_windowed():
    c = C.HarnessCache()
    with pytest.raises(KeyError):
        c[0]
    c.update(attn_state=_attn(2, 3, 1), layer_idx=0, offset=3)
    c.update(attn_state=_attn(2, 1, 2), layer_idx=0, offset=1)
    assert c[0]["attn_state"][0].shape == (2, 4, 2) and c.get_seq_length(0) == 4 and len(c) == 1
    w = C.HarnessCache()
    w.update(attn_state=_attn(1, 5, 1), layer_idx=0, cache_kwargs={"window_size": 3})
    w.update(attn_state=_attn(1, 1, 2), layer_idx=0, cache_kwargs={"window_size": 3})
    assert w[0]["attn_state"][0][0, :, 0].tolist() == [1.0, 1.0, 2.0]


def test_batch_operations_act_on_dim_0_of_every_state():
    c = C.HarnessCache()
    rows = torch.arange(2.0)[:, None, None].expand(2, 3, 2)
    c.update(recurrent_state=rows.clone(), conv_state=(rows.clone(), rows.clone()), layer_idx=0, offset=3)
    c.reorder_cache(torch.tensor([1, 0]))
    assert c[0]["recurrent_state"][:, 0, 0].tolist() == [1.0, 0.0]
    c.batch_repeat_interleave(2)
    assert c[0]["conv_state"][1][:, 0, 0].tolist() == [1.0, 1.0, 0.0, 0.0]


def test_crop_refuses_a_state_it_cannot_roll_back():
    c = C.HarnessCache()
    c.update(attn_state=_attn(1, 4, 1), layer_idx=0, offset=4)
    c.crop(2)
    assert c[0]["attn_state"][0].shape[1] == 2 and c.get_seq_length(0) == 2
    c.update(recurrent_state=torch.zeros(1), layer_idx=1, offset=4)
    with pytest.raises(NotImplementedError):
        c.crop(1)


class _NoOps:
    """A tree's Cache as fla's before 0.6.0 on transformers 5: it updates, but the batch operations are not its own."""
    def __init__(self):
        self.s = []

    def update(self, recurrent_state=None, layer_idx=0, **_):
        self.s.append({"recurrent_state": recurrent_state})

    def __getitem__(self, i):
        return self.s[i]


class _Broken:
    def __init__(self):
        raise ValueError("You should provide exactly one of `layers` or `layer_class_to_replicate`")


def test_the_tree_cache_is_used_only_where_it_serves(monkeypatch):
    monkeypatch.setattr(C, "tree_cache_class", lambda: (_NoOps, "fla.models.utils.Cache"))
    cache, why = C.new_cache()
    assert isinstance(cache, _NoOps) and why == "fla.models.utils.Cache"
    cache, why = C.new_cache(C.OPERATIONS)
    assert isinstance(cache, C.HarnessCache) and "defines no reorder_cache" in why
    monkeypatch.setattr(C, "tree_cache_class", lambda: (_Broken, "fla.models.utils.Cache"))
    cache, why = C.new_cache()
    assert isinstance(cache, C.HarnessCache) and "cannot run with the installed transformers: ValueError" in why
