"""The PaTH and FoX literal layers (references/path_layer_literal.py) on small facts computed by hand, and the
cache operations' harness on a stand-in cache."""
import torch

from pathmdn_verify.references import path_layer_literal as L
from pathmdn_verify.references import path_oracle as P
from pathmdn_verify.layers import load


D = torch.float64


def test_beta_is_twice_a_sigmoid_and_the_gate_a_log_sigmoid():
    p = {"bt_proj.weight": torch.zeros(1, 2, dtype=D), "bt_proj.bias": torch.tensor([0.0], dtype=D),
         "g_proj.weight": torch.zeros(1, 2, dtype=D), "g_proj.bias": torch.tensor([0.0], dtype=D)}
    x = torch.ones(1, 1, 2, dtype=D)
    beta = 2 * torch.sigmoid(L.linear(L.EXACT, x, p, "bt_proj"))
    assert float(beta) == 1.0                                   # 2 sigmoid(0)
    g = torch.nn.functional.logsigmoid(L.linear(L.EXACT, x, p, "g_proj"))
    assert abs(float(g) - (-torch.log(torch.tensor(2.0, dtype=D)))) < 1e-15   # log sigmoid(0) = -log 2


def test_short_conv_is_causal_width_three_with_silu():
    x = torch.zeros(1, 5, 1, dtype=D)
    x[0, 1, 0] = 1.0                                            # a delta at t = 1
    weight = torch.tensor([[[0.5, -1.0, 2.0]]], dtype=D)        # y_t = 0.5 x_{t-2} - x_{t-1} + 2 x_t
    y = L.short_conv(L.EXACT, x, weight, silu=False)[0, :, 0]
    assert y.tolist() == [0.0, 2.0, -1.0, 0.5, 0.0]
    silu = L.short_conv(L.EXACT, x, weight)[0, :, 0]
    assert torch.allclose(silu, y * torch.sigmoid(y), rtol=0, atol=1e-15)


def test_l2_norm_and_householder_update():
    w = L.l2_normalise(torch.tensor([[3.0, 4.0]], dtype=D))
    assert torch.allclose(w, torch.tensor([[0.6, 0.8]], dtype=D), atol=1e-6)
    K = torch.tensor([[[[1.0, 2.0]]]], dtype=D)                  # one cached key [B, L, H, d]
    e1 = torch.tensor([[[1.0, 0.0]]], dtype=D)
    out = L.householder_update(L.EXACT, K, e1, torch.tensor([[2.0]], dtype=D))   # beta = 2: reflection
    assert out.flatten().tolist() == [-1.0, 2.0]


def test_attend_one_and_a_window_of_one_return_the_values():
    v = torch.randn(1, 3, 1, 4, dtype=D)
    k = torch.randn(1, 3, 1, 4, dtype=D)
    q = torch.randn(1, 1, 4, dtype=D)
    one = L.attend_one(L.EXACT, q, k[:, -1:], v[:, -1:], scale=0.5)
    assert torch.allclose(one, v[:, -1], atol=1e-15)            # a single key: its value
    g = torch.full((1, 3, 1), -0.3, dtype=D)
    o = L.windowed_fox(L.EXACT, torch.randn(1, 3, 1, 4, dtype=D), k, v, g, 0.5, window=1)
    assert torch.allclose(o, v, atol=1e-15)                     # window 1: each token sees itself only
    full = L.windowed_fox(L.EXACT, q.expand(1, 3, 1, 4).clone(), k, v, g, 0.5, window=3)
    assert torch.allclose(full, P.fox_attn(q.expand(1, 3, 1, 4).clone(), k, v, g, scale=0.5), atol=1e-14)


def _params(layer: str, gen):
    """Random parameters of a small PaTH (2 query heads, 1 key head, d = 4) or FoX (2 heads) layer."""
    r = lambda *s: torch.randn(*s, generator=gen, dtype=D) * 0.5
    if layer == "path":
        return {"q_proj.weight": r(8, 8), "k_proj.weight": r(4, 8), "v_proj.weight": r(4, 8),
                "w_proj.0.weight": r(3, 8), "w_proj.1.weight": r(4, 3), "w_conv1d.weight": r(4, 1, 3),
                "bt_proj.weight": r(1, 8), "bt_proj.bias": r(1), "g_proj.weight": r(2, 8), "g_proj.bias": r(2),
                "maybe_q_norm.weight": 1 + r(4), "maybe_k_norm.weight": 1 + r(4), "o_proj.weight": r(8, 8)}
    return {"q_proj.weight": r(8, 8), "k_proj.weight": r(8, 8), "v_proj.weight": r(8, 8), "f_proj.weight": r(2, 8),
            "f_proj.bias": r(2), "o_proj.weight": r(8, 8)}


def test_decoding_equals_the_full_forward_in_float64():
    """The literal's token-by-token decoding (the Householder key cache) is its full forward, to rounding."""
    gen = torch.Generator().manual_seed(0)
    p, x = _params("path", gen), torch.randn(1, 12, 8, generator=gen, dtype=D)
    spec = L.Spec(2, 1, qk_norm=True, gate=True)
    o, _ = L.path_layer(L.EXACT, p, x, spec)
    og, _K0, K = L.path_generate(L.EXACT, p, x, 5, spec)
    assert (og - o).abs().max() < 1e-12
    s = L.path_stages(L.EXACT, p, x, spec)
    assert (K - P.decode_cache(s["k"], s["w"], s["beta"])).abs().max() < 1e-12
    fp, spec = _params("fox", gen), L.Spec(2, 2, window=3)
    assert (L.fox_generate(L.EXACT, fp, x, 5, spec) - L.fox_layer(L.EXACT, fp, x, spec)[0]).abs().max() < 1e-12


class _AttentionCache:
    """A stand-in for fla's Cache (no fla import here): one attention-state tensor [rows, t, ...] per layer, with
    the batch operations and the crop of fla.models.cache_utils (which only the layer checks import)."""
    def __init__(self):
        self.state = None

    def __len__(self):
        return 0 if self.state is None else 1

    def __getitem__(self, i):
        return {"attn_state": (self.state,)}

    def update(self, attn_state, layer_idx=0):
        self.state = attn_state[0] if self.state is None else torch.cat([self.state, attn_state[0]], 1)

    def reorder_cache(self, beam_idx):
        self.state = self.state.index_select(0, beam_idx)

    def batch_repeat_interleave(self, repeats):
        self.state = self.state.repeat_interleave(repeats, dim=0)

    def crop(self, max_length):
        self.state = self.state[:, :max_length]


def test_cache_ops_judges_each_operation_and_demands_a_refused_crop():
    """pathmdn_verify.layers.common.cache_ops on a toy layer whose output is the running sum of its tokens, kept in the
    cache: every operation (reorder, repeat, beam reorder, crop) matches the sums of each row's history;
    controls: a layer that keeps its sums outside the cache (the operations miss them) fails at the first
    reorder, and a cache that crops where the record says it must refuse fails."""
    from pathmdn_verify.core.registry import Context
    from pathmdn_verify.layers import LayerCase
    from pathmdn_verify.layers.common import cache_ops, call
    case = LayerCase(Context(device="cpu", profile="ci"), load()["fox"], "base", "fp32")
    gen = torch.Generator().manual_seed(0)
    draw = lambda rows, n: torch.randn(rows, n, 4, generator=gen, dtype=torch.float64).float().double()
    truths = lambda hist: (hist.cumsum(1), hist.float().cumsum(1))

    def cached(tokens, cache, length):      # the sum so far is the cache's last entry
        prev = cache[0]["attn_state"][0][:, -1:] if len(cache) else torch.zeros_like(tokens[:, :1])
        sums = prev + tokens.cumsum(1)
        cache.update(attn_state=(sums,))
        return sums.float()
    outside = {}

    def elsewhere(tokens, cache, length):   # the same sums, kept outside the cache
        def layer():
            sums = outside.get("s", torch.zeros_like(tokens[:, :1])) + tokens.cumsum(1)
            outside["s"] = sums[:, -1:]
            cache.update(attn_state=(sums,))
            return sums.float()
        return call(layer)
    prompts = draw(2, 5)
    good = cache_ops(case, prompts, draw, cached, truths, True, 8.0, 2, _AttentionCache())
    assert good.status == "pass" and len(good.details["tensors"]) == 4, good.message
    assert good.details["tensors"][-1]["name"] == "o after crop to 6"
    bad = cache_ops(case, prompts, draw, elsewhere, truths, True, 8.0, 2, _AttentionCache())
    first = bad.details["tensors"][0]
    assert bad.status == "fail" and first["name"] == "o after reorder [1, 0]" and first["ratio"] > 1, bad.message
    assert "repeat x2 (then decoding) raised" in bad.message, bad.message
    unrefused = cache_ops(case, prompts, draw, cached, truths, False, 8.0, 2, _AttentionCache())
    assert unrefused.status == "fail" and "did not refuse" in unrefused.message, unrefused.message
