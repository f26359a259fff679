"""The MomentumDeltaNet and GatedDeltaNet records of the layer table: fla.layers' two delta-rule layers against
the literal layers of references/mdn_layer_literal.py (float64 truth; the same code in the case's dtype sets the
budget).  Comparisons:

  forward      eval, no grad, at T around the chunk boundary (the layer's recurrent path up to 64 tokens, its
               chunk path from 65): the output, and the op's inputs (q, k, v, the gates, eta) captured by
               wrapping the op in the layer's module during the call (the stages)
  backward     training mode (the chunk path): the gradients of the input and of every parameter
  generation   prefill with a fla Cache, a multi-token continuation, then one token at a time: every output
               against the literal's full forward (errors per bucket of generated length, and the growth), and
               the decode state (S, and M for MDN) after the last token
  mode-switch  at q_len 64: training mode and eval with grad on (GDN's grad switches it to the chunk path)
  floor        MDN at the momentum floor (log mu = floor for every token, alpha near 1): T 64 (recurrent) and
               65 (chunk)
  convention-* a declared departure from the paper (references/mdn_layer_literal.py): the layer matches the declared
               form within budget and the paper's form is more than 10x the budget away
"""
from __future__ import annotations

import contextlib
import math

import torch

from pathmdn_verify.references import mdn_layer_literal as L
from pathmdn_verify.core.metrics import rel_err
from pathmdn_verify.platform.mutation import Mutant
from pathmdn_verify.core.precision import Precision, fixed_order
from pathmdn_verify.core.registry import Result
from pathmdn_verify.layers import history
from pathmdn_verify.layers.table import LayerCase, LayerRecord, add
from pathmdn_verify.layers.kv_cache import new_cache
from pathmdn_verify.layers.calls import Calls, Why, case_ids
from pathmdn_verify.layers.common import (
    build,
    cache_ops,
    call,
    judge,
    padded_mask,
    params64,
    precision,
)

C_FWD, C_BWD = 8.0, 16.0      # the sequential budget factors (pathmdn_verify.core.records.BUDGET_FACTOR_SEQUENTIAL)
OPS = {"mdn": ("chunk_momentum_delta_rule", "fused_recurrent_momentum_delta_rule"),
       "gdn": ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule")}
MDN_STAGES = ("q", "k", "v", "log_alpha", "log_mu", "beta", "eta")


def stages(case: LayerCase, op: str) -> dict[str, str]:
    """literal stage -> the op's argument it is compared with, for the op the layer called.  GDN's g and beta are
    declared per tree (history gdn.g_arg, gdn.beta_arg): the activated log_alpha and beta until 2026-04 / 05, the
    raw projections after (the kernel activates them)."""
    if case.record.name == "mdn":
        return {s: s for s in MDN_STAGES}
    g = history.value("gdn.g_arg")
    g_stage = "g_raw" if g == "g_raw" or (g == "g_raw chunk" and op.startswith("chunk")) else "log_alpha"
    beta_stage = "beta_raw" if history.value("gdn.beta_arg") == "beta_raw" else "beta"
    return {"q": "q", "k": "k", "v": "v", g_stage: "g", beta_stage: "beta"}


def sizes(case: LayerCase) -> dict:
    """Two heads; tiny on the CPU (the interpreter runs GDN's recurrent kernel token by token per value block)."""
    D = case.ctx.pick(16, 16, 64)
    Dv = D if case.record.name == "mdn" else case.ctx.pick(8, 8, 64)
    return {"hidden_size": case.ctx.pick(32, 32, 256), "num_heads": 2, "head_dim": D, "expand_v": Dv / D,
            "layer_idx": 0}


def literal_kwargs(case: LayerCase) -> dict:
    """The literal's arguments: the sizes and every option as the case asks for them (the variant's or the
    pairwise case's, else the constructor's default: the first level in the record's calls), never as the built
    layer says it holds them, so that a layer that swallows or ignores an option fails."""
    calls = case.record.calls
    o = {**{n: v[0] for n, v in calls.constructor.items() if not isinstance(v, Why)}, **case.kwargs}
    sz = sizes(case)
    D = sz["head_dim"]
    kw = {"num_heads": sz["num_heads"], "head_k_dim": int(D * o.get("expand_k", 1.0)),
          "head_v_dim": int(D * sz["expand_v"]), "num_v_heads": o["num_v_heads"], "use_gate": o["use_gate"],
          "use_short_conv": o["use_short_conv"], "conv_bias": o["conv_bias"], "norm_eps": o["norm_eps"],
          "neg_eigval": o["allow_neg_eigval"]}
    if case.record.name == "gdn":
        return {**kw, "beta_stored": history.value("gdn.beta_arg") == "beta",
                "gate_activation": "sigmoid" if o["output_gate_activation"] == "sigmoid" else "swish"}
    return {**kw, "floor": o["min_log_mu"], "tau_factor": o["tau_factor"], "use_beta": o["use_beta"],
            "qk_activation": o["qk_activation"], "qk_norm": o["qk_norm"], "p_times_alpha": o["use_p_times_alpha"],
            "correction": o["use_output_correction"]}


def _draw(gen, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=gen, dtype=torch.float64)


FLOOR = {"Mu_log": math.log(8.0), "mu_bias": 5.0, "A_log": math.log(0.1), "dt_bias": -5.0, "log_factor": math.log(0.05)}
DECAY = {**FLOOR, "mu_bias": -2.5}       # log mu = -8 softplus(m - 2.5) ~ -0.6 a token: above the floor


def setup(case: LayerCase, seed: int, floor: bool | dict = False):
    """The seeded layer (eval mode) with the norm weight drawn around 1 (fla initialises it to ones, which would
    hide a skipped weight); at the floor, MDN's gate parameters moved so that log mu = floor for every token and
    alpha ~ 0.99 (floor True: FLOOR; or the parameter values given).  Returns (layer, its parameters in float64,
    the literal's keyword arguments)."""
    layer = build(case, seed, **sizes(case))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        w = layer.o_norm.weight
        w.copy_((1 + _draw(gen, *w.shape, scale=0.25)).to(w.dtype))
        if floor:       # -exp(Mu_log) softplus(m + mu_bias) ~ -40 < floor; -exp(A_log) softplus(.) ~ -1e-3; s = 0.05
            for name, value in (FLOOR if floor is True else floor).items():
                getattr(layer, name).fill_(value)
    return layer, params64(layer), literal_kwargs(case)


def inputs(case: LayerCase, seed: int, T: int, B: int = 1) -> torch.Tensor:
    """x [B, T, hidden] ~ N(0, 1) from `seed`, in float64, rounded to the case's dtype."""
    gen = torch.Generator().manual_seed(seed)
    return _draw(gen, B, T, sizes(case)["hidden_size"]).to(precision(case).torch_dtype).double()


def literal(case: LayerCase, p64: dict, x64: torch.Tensor, kw: dict, grad: bool = False, **conv) -> tuple:
    """(truth, same-dtype) dicts of the literal layer on x64; with grad, the parameters and x are leaves that
    require grad (returned in each dict under "leaves")."""
    fn = L.mdn_layer if case.record.name == "mdn" else L.gdn_layer
    # MDN's layer and op are torch (IEEE fp32 products, also on a GPU); GDN's chunk kernels take fp32 dots as TF32
    prec = Precision.of(case.dtype, "ieee") if case.record.name == "mdn" else precision(case)
    out = []
    for A, dtype in ((L.TRUTH, torch.float64), (L.Arith(prec.torch_dtype, prec.mm), torch.float32)):
        leaves = {n: t.detach().to(dtype, copy=True).requires_grad_(grad) for n, t in {**p64, "x": x64}.items()}
        params = {n: t for n, t in leaves.items() if n != "x"}
        with fixed_order() if dtype == torch.float32 else contextlib.nullcontext():
            res = fn(A, params, leaves["x"], **kw, **conv)
        out.append({**res, "leaves": leaves})
    return tuple(out)


@contextlib.contextmanager
def capture(case: LayerCase):
    """Record what the layer hands to its op and gets back: the layer module's op functions wrapped for the
    duration.  Yields a list of {"op": name, "kwargs": ..., "out": core output} in call order."""
    import importlib
    module = importlib.import_module(case.record.module)
    seen, originals = [], {n: getattr(module, n) for n in OPS[case.record.name]}

    def wrap(name, fn):
        def op(*args, **kwargs):
            o, state = fn(*args, **kwargs)
            seen.append({"op": name, "kwargs": kwargs, "out": o})
            return o, state
        return op

    try:
        for n, fn in originals.items():
            setattr(module, n, wrap(n, fn))
        yield seen
    finally:
        for n, fn in originals.items():
            setattr(module, n, fn)


def run(layer, x: torch.Tensor, grad: bool = False, **kw):
    """The layer's output on x (the case's dtype, on the layer's device); its exceptions are findings."""
    with torch.set_grad_enabled(grad):
        return call(layer, x.to(next(layer.parameters())), **kw)


def _stage_tensors(case, seen, truth, same, T) -> list[tuple]:
    """(name, the op's input, truth, same-dtype) for each stage the op received (GDN's q and k repeated per value
    head where the tree's layer repeats them: history gdn.gva_qk)."""
    args = seen[-1]["kwargs"]
    group = truth["v"].shape[2] // truth["k"].shape[2]
    if case.record.name == "gdn" and group > 1 and history.value("gdn.gva_qk") == "repeated":
        truth, same = ({**d, "q": d["q"].repeat_interleave(group, 2), "k": d["k"].repeat_interleave(group, 2)}
                       for d in (truth, same))
    return [(f"{s} T={T}", args[arg], truth[s], same[s]) for s, arg in stages(case, seen[-1]["op"]).items()]


def forward(case: LayerCase) -> Result:
    seed = case.ctx.seed
    Ts = case.ctx.pick((16, 65), (64, 65), (63, 64, 65, 512))     # quick: both paths, not the exact boundary
    if case.variant != "default":       # the variant's options on both paths; the default has the boundary
        Ts = (case.ctx.pick(16, 16, 64), 65)
    layer, p64, kw = setup(case, seed)
    tensors, paths = [], {}
    for T in Ts:
        x64 = inputs(case, seed + T, T)
        with capture(case) as seen:
            o = run(layer, x64)[0]
        truth, same = literal(case, p64, x64, kw)
        paths[T] = seen[-1]["op"]
        tensors += [(f"o T={T}", o, truth["o"], same["o"])] + _stage_tensors(case, seen, truth, same, T)
    return judge(case, tensors, C_FWD, "eval forward and its op's inputs", {"paths": paths})


def backward(case: LayerCase) -> Result:
    seed = case.ctx.seed
    T = case.ctx.pick(16, 40, 256)      # one chunk (padded) on the CPU: forward crosses the boundary
    if case.record.name == "gdn" and case.dtype == "bf16" and case.ctx.device == "cpu":
        return Result("skip", message="not verifiable on the CPU interpreter: fla's chunk GDN backward "
                      "(chunk_bwd_kernel_dqkwg) reduces bf16 products, which the fidelity layer refuses "
                      "(Bf16ArithmeticNotEmulated, measured 2026-12); it runs on a GPU", kind="interpreter_gap")
    layer, p64, kw = setup(case, seed)
    layer.train()
    x64 = inputs(case, seed, T)
    dy64 = inputs(case, seed + 7, T)
    x = x64.to(next(layer.parameters())).requires_grad_()
    out = call(layer, x)[0]
    call((out.float() * dy64.to(out.device).float()).sum().backward)
    grads = {"x": x.grad, **{n: q.grad for n, q in layer.named_parameters()}}
    res = []
    for r in literal(case, p64, x64, kw, grad=True):
        (r["o"] * dy64.to(r["o"].dtype)).sum().backward()
        res.append(r["leaves"])
    truth, same = res
    tensors = [(f"d{n}", g, truth[n].grad, same[n].grad) for n, g in grads.items()]
    return judge(case, tensors, C_BWD, f"training-mode gradients at T={T}")


def _state(case, cache_state, truth, same) -> list[tuple]:
    """The decode state against the literal's: MDN's stacked [S, M]; GDN's S, held [V, K] (state_v_first) or
    [K, V] by the tree's declared layout (history gdn.state)."""
    st = cache_state["recurrent_state"]
    if case.record.name == "mdn":
        return [("S", st[0], truth["S"], same["S"]), ("M", st[1], truth["M"], same["M"])]
    return [("S", st.transpose(-1, -2) if history.value("gdn.state") == "[N,H,V,K]" else st, truth["S"], same["S"])]


def generation(case: LayerCase) -> Result:
    seed = case.ctx.seed
    T0, L_cont, n = case.ctx.pick((8, 3, 3), (8, 4, 4), (64, 40, 2048))     # full: 2048 generated tokens
    segments = [T0, L_cont] + [1] * n
    layer, p64, kw = setup(case, seed)
    x64 = inputs(case, seed, sum(segments))
    (cache, which), outs, s = new_cache(), [], 0
    for length in segments:
        o, _, cache = run(layer, x64[:, s:s + length], past_key_values=cache, use_cache=True)
        outs.append(o)
        s += length
    o = torch.cat([t.to("cpu") for t in outs], dim=1)
    truth, same = literal(case, p64, x64, kw)
    parts = {"prefill": slice(0, T0), "continuation": slice(T0, T0 + L_cont), "decode": slice(T0 + L_cont, None)}
    tensors = [(f"o {n}", o[:, sl], truth["o"][:, sl], same["o"][:, sl]) for n, sl in parts.items()]
    tensors += _state(case, cache[0], truth, same)
    buckets, lo = [], 1
    while lo <= n:          # generated tokens lo .. 2 lo - 1
        sl = slice(T0 + L_cont + lo - 1, T0 + L_cont + min(2 * lo, n + 1) - 1)
        buckets.append({"tokens": f"{lo}-{min(2 * lo - 1, n)}", "err_rel": rel_err(o[:, sl].double(), truth["o"][:, sl]),
                        "same_dtype_rel": rel_err(same["o"][:, sl].double(), truth["o"][:, sl])})
        lo *= 2
    growth = buckets[-1]["err_rel"] / buckets[0]["err_rel"] if buckets[0]["err_rel"] > 0 else None
    res = judge(case, tensors, C_FWD, f"prefill {T0}, continuation {L_cont}, {n} decoded",
                {"buckets": buckets, "growth": growth, "cache": which})
    by_length = ", ".join(f"{b['tokens']}: {b['err_rel']:.1e}" for b in buckets)
    res.message += f"; decode error by generated length {by_length}" + \
        (f", growth {growth:.2f}x" if growth is not None else "")
    return res


def cache_operations(case: LayerCase) -> Result:
    """pathmdn_verify.layers.common.cache_ops on the layer: repeat and reorder (its cache holds the recurrent state, and
    the convolutions' with use_short_conv, so its crop must refuse)."""
    seed = case.ctx.seed
    T0, n = case.ctx.pick((8, 2), (8, 3), (64, 32))
    layer, p64, kw = setup(case, seed)
    drawn = iter(range(seed + 200, seed + 10**6))
    step = lambda tokens, cache, length: run(layer, tokens, past_key_values=cache, use_cache=True)[0]

    def truths(hist):
        truth, same = literal(case, p64, hist, kw)
        return truth["o"], same["o"]
    return cache_ops(case, inputs(case, seed + 100, T0, B=2), lambda rows, k: inputs(case, next(drawn), k, B=rows),
                     step, truths, crop=False, c=C_FWD, n=n)


def _rows_truth(case, p64, kw, x64, mask) -> tuple[list, list]:
    """Each row's valid tokens (mask 1) through the literal alone: (truth, same-dtype) outputs [1, Tb, hidden]."""
    truth, same = [], []
    for b in range(x64.shape[0]):
        t, s = literal(case, p64, x64[b:b + 1, mask[b].bool()], kw)
        truth.append(t["o"]), same.append(s["o"])
    return truth, same


def padding(case: LayerCase) -> Result:
    """A batch of 2 whose second row starts with padding, prefilled with a Cache and its attention_mask, then
    decoded one token at a time (the mask grown by ones): each row's valid outputs against the literal of its
    unpadded sequence."""
    seed = case.ctx.seed
    T0, n, pad = case.ctx.pick((8, 2, 3), (12, 3, 5), (64, 32, 20))
    layer, p64, kw = setup(case, seed)
    x64 = inputs(case, seed + 300, T0 + n, B=2)
    mask = torch.ones(2, T0 + n, dtype=torch.long)
    mask[1, :pad] = 0
    (cache, which), dev = new_cache(), case.ctx.device
    outs = [run(layer, x64[:, :T0], attention_mask=mask[:, :T0].to(dev), past_key_values=cache, use_cache=True)[0]]
    for t in range(T0, T0 + n):
        outs.append(run(layer, x64[:, t:t + 1], attention_mask=mask[:, :t + 1].to(dev), past_key_values=cache,
                        use_cache=True)[0])
    o = torch.cat([t.to("cpu") for t in outs], 1)
    truth, same = _rows_truth(case, p64, kw, x64, mask)
    tensors = [(f"row {b} ({'padded' if b else 'unpadded'})", o[b:b + 1, mask[b].bool()], truth[b], same[b])
               for b in range(2)]
    return judge(case, tensors, C_FWD, f"T0={T0} (row 1: {pad} padding tokens), {n} decoded", {"cache": which})


def _masked(case: LayerCase, masks: list, labels: tuple[str, str], what: str) -> Result:
    """The layer called without a cache once per mask, all held in one tensor refilled in place between the
    calls; the last call's valid outputs (row b labelled labels[b]) against the literal of each row's valid
    tokens alone."""
    seed = case.ctx.seed
    layer, p64, kw = setup(case, seed)
    x64 = inputs(case, seed + 400, masks[0].shape[1], B=2)
    m = torch.empty_like(masks[0], device=case.ctx.device)
    for pattern in masks:
        m.copy_(pattern)
        o = run(layer, x64, attention_mask=m)[0].to("cpu")
    m = m.to("cpu")
    truth, same = _rows_truth(case, p64, kw, x64, m)
    tensors = [(f"row {b} ({labels[b]})", o[b:b + 1, m[b].bool()], truth[b], same[b]) for b in range(2)]
    return judge(case, tensors, C_FWD, what)


def mask(case: LayerCase) -> Result:
    """attention_mask without a cache: row 0 left padding, row 1 interior padding; each row's valid outputs
    against the literal of its valid tokens alone."""
    T, pad = case.ctx.pick((16, 3), (24, 5), (64, 20))
    return _masked(case, [padded_mask(T, pad, True, True)], ("left padding", "interior padding"),
                   f"T={T}, {pad} padding tokens per row")


def mask_reused(case: LayerCase) -> Result:
    """attention_mask as a buffer the caller refills in place between two calls (the same tensor object, left
    padding in row 0, then interior padding in row 1): the second call against each row's valid tokens alone
    (`mask` is the same comparison with a fresh tensor)."""
    T, pad = case.ctx.pick((16, 3), (24, 5), (64, 20))
    return _masked(case, [padded_mask(T, pad, True, False), padded_mask(T, pad, False, True)],
                   ("second call", "second call"), f"T={T}: the mask refilled in place between two calls")


def mode_switch(case: LayerCase) -> Result:
    seed = case.ctx.seed
    T = case.ctx.pick(16, 64, 64)
    layer, p64, kw = setup(case, seed)
    x64 = inputs(case, seed, T)
    truth, same = literal(case, p64, x64, kw)
    tensors, paths = [], {}
    for mode in ("eval+grad", "train"):
        layer.train(mode == "train")
        with capture(case) as seen:
            o = run(layer, x64, grad=True)[0]
        paths[mode] = seen[-1]["op"]
        tensors.append((f"o {mode}", o, truth["o"], same["o"]))
    return judge(case, tensors, C_FWD, f"q_len {T}, eval with grad and training mode", {"paths": paths})


def floor(case: LayerCase, gates: dict = FLOOR, what: str = "at the momentum floor") -> Result:
    seed = case.ctx.seed
    layer, p64, kw = setup(case, seed, floor=gates)
    tensors, paths = [], {}
    for T in (case.ctx.pick(16, 64, 64), 65):       # 65: the chunk path's first chunk is full
        x64 = inputs(case, seed + T, T)
        truth, same = literal(case, p64, x64, kw)
        with capture(case) as seen:
            o = run(layer, x64)[0]
        paths[T] = seen[-1]["op"]
        tensors.append((f"o T={T} ({paths[T]})", o, truth["o"], same["o"]))
        if T < 65:
            lm, la = truth["log_mu"], truth["log_alpha"]
            regime = {"log_mu_max": float(lm.max()), "log_mu_min": float(lm.min()),
                      "log_mu_per_64_tokens": float(lm.mean()) * 64,
                      "alpha_min": float(la.exp().min()), "alpha_max": float(la.exp().max())}
    return judge(case, tensors, C_FWD, what, {"paths": paths, "regime": regime})


def decay(case: LayerCase) -> Result:
    """floor's comparison with the momentum decaying fast but above the floor (log mu ~ -0.6 a token, tens of nats
    over a chunk), as an ordinary initialisation gives some heads."""
    return floor(case, DECAY, "momentum decaying ~0.6 nats a token, above the floor")


def convention(name: str, output: str, alternative: dict, what_else: str):
    """A comparison: the layer (eval, recurrent path) matches the literal with fla's choice, and the literal with
    `alternative` (the paper's form) is more than 10x the budget away.  output: "o" (the layer's) or "core"
    (the op's output, captured: the RMSNorm after it hides an output scale)."""
    def compare(case: LayerCase) -> Result:
        seed = case.ctx.seed
        T = case.ctx.pick(16, 24, 64)
        layer, p64, kw = setup(case, seed)
        x64 = inputs(case, seed, T)
        with capture(case) as seen:
            o = run(layer, x64)[0]
        got = o if output == "o" else seen[-1]["out"]
        truth, same = literal(case, p64, x64, kw)
        other = L.mdn_layer if case.record.name == "mdn" else L.gdn_layer
        alt = other(L.TRUTH, p64, x64, **{**kw, **alternative})[output]
        res = judge(case, [(output, got, truth[output], same[output])], C_FWD)
        budget = res.details["tensors"][0]["budget_rel"]
        ratio = rel_err(got.to("cpu").double(), alt) / budget
        ok = res.status == "pass" and ratio > 10
        return Result("pass" if ok else "fail", res.measured, res.budget,
                      f"declared convention {name}: {res.message}; alternative ({what_else}): rel error "
                      f"{ratio * budget:.2e} = {ratio:.0f}x the relative budget -> "
                      + ("declared convention confirmed" if ok else "DECLARED CONVENTION NOT CONFIRMED"),
                      details={**res.details, "alternative_ratio": ratio if math.isfinite(ratio) else None},
                      kind=None if ok else "over_budget", measure=res.measure)
    return compare


ALTERNATIVE = {"g_raw": "log_alpha", "log_alpha": "g_raw", "beta_raw": "beta", "beta": "beta_raw"}


def convention_gate_args(case: LayerCase) -> Result:
    """GDN's g and beta as its op receives them, on both paths (a tree whose chunk path refuses float32 fails:
    history gdn.fp32_chunk explains it): the declared stage (history gdn.g_arg, gdn.beta_arg) within budget, the other form
    (raw projection vs activated gate) more than 10x the budget away."""
    seed = case.ctx.seed
    layer, p64, kw = setup(case, seed)
    tensors, alternatives = [], []
    for T in (16, 65):      # the recurrent path, then the chunk path (they differed 2026-04-06 .. 04-19)
        x64 = inputs(case, seed + T, T)
        with capture(case) as seen:
            run(layer, x64)
        truth, same = literal(case, p64, x64, kw)
        op = seen[-1]["op"]
        for stage, arg in stages(case, op).items():
            if arg not in ("g", "beta"):
                continue
            got = seen[-1]["kwargs"][arg]
            tensors.append((f"{arg} = {stage} T={T} ({op})", got, truth[stage], same[stage]))
            alternatives.append(rel_err(got.to("cpu").double(), truth[ALTERNATIVE[stage]]))
    res = judge(case, tensors, C_FWD, "the op's g and beta")
    ratios = {t[0]: a / v["budget_rel"] for t, a, v in zip(tensors, alternatives, res.details["tensors"])}
    ok = res.status == "pass" and min(ratios.values()) > 10
    res.details["alternative_ratio"] = ratios
    res.status, res.kind = ("pass", None) if ok else ("fail", res.kind or "over_budget")
    res.message = (f"declared g = {history.value('gdn.g_arg')}, beta = {history.value('gdn.beta_arg')}: "
                   f"{res.message}; "
                   f"the other forms {min(ratios.values()):.0f}x the budget away at least -> "
                   + ("declared convention confirmed" if ok else "DECLARED CONVENTION NOT CONFIRMED"))
    return res


def convention_state_layout(case: LayerCase) -> Result:
    """GDN's recurrent state in the cache after a prefill (Dk 16 != Dv 8): laid out as declared (history
    gdn.state) and equal to the literal's S."""
    seed = case.ctx.seed
    layer, p64, kw = setup(case, seed)
    x64 = inputs(case, seed, 8)
    cache, which = new_cache()
    run(layer, x64, past_key_values=cache, use_cache=True)
    truth, same = literal(case, p64, x64, kw)
    st = cache[0]["recurrent_state"]
    declared = history.value("gdn.state")
    want = tuple(truth["S"].transpose(-1, -2).shape if declared == "[N,H,V,K]" else truth["S"].shape)
    if tuple(st.shape) != want:
        return Result("fail", message=f"declared layout {declared} {want}, the cache holds {tuple(st.shape)}: "
                      "DECLARED CONVENTION NOT CONFIRMED", kind="over_budget", details={"cache": which})
    res = judge(case, _state(case, cache[0], truth, same), C_FWD, f"state {declared} after a prefill of 8",
                {"cache": which})
    res.message += "; declared convention " + ("confirmed" if res.status == "pass" else "NOT CONFIRMED")
    return res


COMMON = {
    "forward": (("eval forward at T around the chunk boundary (64 recurrent, 65 chunk) and the op's inputs "
                "(stages) against the literal layer"), forward),
    "backward": (("training-mode gradients of the input and every parameter against float64 autograd of the "
                 "literal"), backward),
    "generation": (("prefill with a Cache, a continuation, then token-by-token decoding against the literal's full "
                   "forward (per bucket of generated length), and the decode state"), generation),
    "cache-ops": (("the cache repeated per return sequence and reordered as a beam step, then decoded, against "
                   "decoding each row's history from scratch; crop must refuse (a recurrent state)"), cache_operations),
    "padding": (("a batch with a left-padded row prefilled with a Cache and its attention_mask, then decoded, "
                 "against each unpadded sequence"), padding),
    "mask": ("attention_mask (left and interior padding) without a cache, against each row's valid tokens", mask),
    "mode-switch": ("q_len 64 in training mode and in eval with grad on against the literal", mode_switch),
    "convention-output-scale": ("the op's output is scaled by Dk^-1/2 (the paper: S_t^T q_t)",
                                convention("output-scale", "core", {"scale": 1.0}, "scale 1")),
}
MDN_CONVENTIONS = {
    "convention-output-correction": ("q <- q - exp(D_log) k before the L2 norm (the paper: q)",
                                     convention("output-correction", "o", {"correction": False}, "no correction")),
    "convention-learned-s": ("s = exp(log_factor), learned per head (the paper: one constant s)",
                             convention("learned-s", "o", {"learned_s": False}, "s = 2 for every head")),
    "convention-neg-eigval": ("allow_neg_eigval doubles beta, so alpha + beta <= 1 no longer holds",
                              convention("neg-eigval", "o", {"neg_eigval": False}, "beta not doubled")),
}
VARIANTS = {"default": {}, "neg-eig": {"allow_neg_eigval": True, "use_gate": False, "use_short_conv": False}}
GDN_VARIANTS = {**VARIANTS, "gva": {"num_v_heads": 4}}     # grouped value attention: 4 value heads, 2 key heads
GDN_HISTORY = {"neg-eig": ("gdn.allow_neg_eigval", "gdn.no_short_conv"), "gva": ("gdn.num_v_heads",)}


def gdn_history(variant: str, dtype: str, comparison: str) -> tuple[str, ...]:
    """The changes of pathmdn_verify.layers.history that explain a GDN check's verdict on an older tree: its variant's
    option or fix, fp32 on the chunk path (forward at 65 tokens, training, the gate-args probe), training at
    q_len <= 64 (backward, mode-switch)."""
    names = GDN_HISTORY.get(variant, ())
    if dtype == "fp32" and comparison in ("forward", "backward", "convention-gate-args"):
        names += ("gdn.fp32_chunk",)
    if comparison in ("backward", "mode-switch"):
        names += ("gdn.train_short",)
    return names


def declared(variant: str, dtype: str, comparison: str) -> bool:
    """Conventions in fp32 (the smallest budget), each in the variant that has it; the neg-eig variant (no
    gate, no short convolution: dtype-independent logic) adds only its bf16 forward; mode-switch and floor in
    bf16 (in fp32 MDN's chunk path refuses its inputs, which forward and backward already show, and GDN's fp32
    chunk path is in forward and backward); padding and mask in fp32, the default variant (the unpadding and the
    per-sequence state logic do not depend on the dtype); GDN's gva variant (grouped value heads) in forward,
    backward and generation, both dtypes."""
    if comparison in ("padding", "mask", "mask-reused"):
        return variant == "default" and dtype == "fp32"
    if comparison.startswith("convention-"):
        return dtype == "fp32" and variant == ("neg-eig" if comparison == "convention-neg-eigval" else "default")
    if comparison in ("mode-switch", "floor", "decay"):
        return variant == "default" and dtype == "bf16"
    if variant == "gva":        # the grouping reaches every path: forward (both), backward, decoding and its state
        return comparison in ("forward", "backward", "generation")
    return variant == "default" or (comparison == "forward" and dtype == "bf16")


MDN_MUTANTS = (
    Mutant("layer_mdn_alpha_without_max", "MomentumDeltaNet: log alpha = f(W_alpha x) without + log alpha_max "
           "(a gate formula)", "layers/momentum_deltanet.py",
           "log_alpha = alpha_upper.log() + log_alpha", "log_alpha = log_alpha",
           ("layer.fla.mdn.default.bf16.forward",)),
    Mutant("layer_mdn_recurrent_p_not_alpha", "MomentumDeltaNet: the recurrent path (q_len <= 64, eval) takes "
           "p = k instead of alpha k (a mode-switch mismatch: the chunk path keeps alpha k)",
           "layers/momentum_deltanet.py",
           "use_p_times_alpha=self.use_p_times_alpha,\n            )\n        elif mode == 'chunk':",
           "use_p_times_alpha=False,\n            )\n        elif mode == 'chunk':",
           ("layer.fla.mdn.default.bf16.mode-switch", "layer.fla.mdn.default.bf16.forward")),
)
GDN_MUTANTS = (
    Mutant("layer_gdn_no_qk_l2norm", "GatedDeltaNet: q and k not L2-normalised in either path (a skipped "
           "normalisation)", "layers/gated_deltanet.py", "use_qk_l2norm_in_kernel=True,",
           "use_qk_l2norm_in_kernel=False,", ("layer.fla.gdn.default.bf16.forward",), count=2),
    Mutant("layer_gdn_conv_cache_swapped", "GatedDeltaNet: the cache keeps q's convolution state in k's place (a "
           "wrong cache update)", "layers/gated_deltanet.py",
           "conv_state=(conv_state_q, conv_state_k, conv_state_v) if self.use_short_conv else None,",
           "conv_state=(conv_state_q, conv_state_q, conv_state_v) if self.use_short_conv else None,",
           ("layer.fla.gdn.default.bf16.generation",)),
    Mutant("layer_gdn_repad_packed", "GatedDeltaNet: the outputs of a padded batch put back at the first positions of "
           "the flattened batch instead of each token's own (a padding slip)", "layers/gated_deltanet.py",
           "o = repad_hidden_states(hidden_states=o, indices=indices, batch_size=batch_size, q_len=q_len)",
           "o = repad_hidden_states(hidden_states=o, indices=None if indices is None else torch.arange(indices.numel(), "
           "device=indices.device), batch_size=batch_size, q_len=q_len)",
           ("layer.fla.gdn.default.fp32.mask", "layer.fla.gdn.default.fp32.padding")),
)

def _literal_of(case: LayerCase, layer, p: dict, x, exact: bool):
    """The literal's output of one sequence (pathmdn_verify.layers.calls), the case's options as its arguments."""
    fn = L.gdn_layer if case.record.name == "gdn" else L.mdn_layer
    if exact:
        return fn(L.TRUTH, p, x, **literal_kwargs(case))["o"]
    prec = Precision.of(case.dtype, "ieee") if case.record.name == "mdn" else precision(case)
    with fixed_order():
        return fn(L.Arith(prec.torch_dtype, prec.mm), p, x, **literal_kwargs(case))["o"]


def _sizes(case: LayerCase, row: dict) -> dict:
    return sizes(case) if case.record.name == "gdn" else {**sizes(case), "expand_v": 1.0}


SIZE = Why("a size: hidden 32, 2 key heads of head_dim 16 (GDN's values 8 wide: D != Dv) in every case")
SLOT = Why("the cache slot: every case is one layer, at slot 0")
SWALLOWED = Why("swallows unknown keywords: an option a tree predates is dropped silently, and a case asking for it "
                "fails there (the literal takes every option as asked)")
DELTA_FORWARD = {"hidden_states": "q_len", "attention_mask": "input", "past_key_values": "cache",
                 "use_cache": "cache", "cu_seqlens": "input",
                 "output_attentions": Why("the layer returns no attention weights (None) whatever it is given"),
                 "**kwargs": Why("its other keys are ignored: the ones the forward reads are listed (cu_seqlens)")}
CONV_ONLY = tuple(({"use_short_conv": (False,), o: (v,)}, f"{o}={v} acts only through the short convolutions")
                  for o, v in (("conv_size", 2), ("conv_bias", True))) + (
    ({"cache": ("train-short",), "conv_size": (2,)}, "its segments of 1 and 2 tokens are shorter than the "
     "convolution's width minus one at width 4, not at 2"),)
GDN_CALLS = Calls(
    constructor={"hidden_size": SIZE, "expand_v": SIZE, "head_dim": SIZE, "num_heads": SIZE, "layer_idx": SLOT,
                 "num_v_heads": (None, 4), "mode": ("chunk", "fused_recurrent"), "use_gate": (True, False),
                 "use_short_conv": (True, False), "allow_neg_eigval": (False, True), "conv_size": (4, 2),
                 "conv_bias": (False, True), "norm_eps": (1e-5, 1e-3), "output_gate_activation": ("swish", "sigmoid"),
                 "**kwargs": SWALLOWED},
    forward=DELTA_FORWARD, sizes=_sizes, literal=_literal_of,
    excluded=CONV_ONLY + (({"use_gate": (False,), "output_gate_activation": ("sigmoid",)},
                           "the output gate's activation acts only with use_gate"),),
    explained=(({"num_v_heads": (4,)}, "gdn.num_v_heads"), ({"allow_neg_eigval": (True,)}, "gdn.allow_neg_eigval"),
               ({"use_short_conv": (False,)}, "gdn.no_short_conv"), ({"conv_bias": (True,)}, "gdn.conv_bias"),
               ({"output_gate_activation": ("sigmoid",)}, "gdn.output_gate_activation"),
               ({"phase": ("train",), "q_len": ("short", "one")}, "gdn.train_short"),
               ({"phase": ("train",)}, "gdn.fp32_chunk"), ({"q_len": ("long",), "mode": ("chunk",)}, "gdn.fp32_chunk"),
               ({"mode": ("fused_recurrent",), "phase": ("train",)}, "gdn.train_recurrent_mode"),
               ({"input": ("mask+cu_seqlens",)}, "gdn.mask_and_cu_seqlens")))
MDN_REFUSES = Why("MomentumDeltaNet raises NotImplementedError on any attention_mask or cu_seqlens: the finding "
                  "layer.fla.mdn.default.fp32.mask / padding")
MDN_CALLS = Calls(
    constructor={"hidden_size": SIZE, "d_model": Why("an alias of hidden_size, which every case gives"),
                 "expand_v": SIZE, "head_dim": SIZE, "num_heads": SIZE, "layer_idx": SLOT, "**kwargs": SWALLOWED,
                 "mode": ("chunk", "fused_recurrent"), "expand_k": (1.0, 0.5), "num_v_heads": (None, 4),
                 "use_beta": (True, False), "use_gate": (True, False), "use_short_conv": (True, False),
                 "conv_size": (4, 2), "conv_bias": (False, True), "allow_neg_eigval": (False, True),
                 "qk_activation": ("silu", "relu", "elu", "identity"), "qk_norm": ("l2", "sum"),
                 "norm_eps": (1e-5, 1e-3), "use_p_times_alpha": (True, False),
                 "use_output_correction": (True, False), "min_log_mu": (-2.0, None), "tau_factor": (1, 4)},
    forward={**DELTA_FORWARD, "attention_mask": MDN_REFUSES, "cu_seqlens": MDN_REFUSES}, sizes=_sizes,
    literal=_literal_of, dtype="bf16", levels={"input": ("dense",)}, excluded=CONV_ONLY,
    left_out={f"input={i}": MDN_REFUSES for i in ("mask", "cu_seqlens", "mask+cu_seqlens")})

CONV_FILE = "modules/causal_conv1d/ops.py"
MODULE_MUTANTS_MDN = (
    Mutant("layer_conv_step_history_of_ones", "ShortConvolution.step called without a cache (one token per row, no "
           "cache: MomentumDeltaNet's and PaTHAttention's eval at q_len 1) starts from a state of ones instead of "
           "zeros: the token reads a history it does not have", CONV_FILE, "cache = x.new_zeros(N, D, W)",
           "cache = x.new_ones(N, D, W)", case_ids("mdn", MDN_CALLS, q_len="one", phase="eval", use_short_conv=True)),
    Mutant("layer_conv_dh0_short_segment", "causal_conv1d backward (compute_dh0_kernel): of the carried convolution "
           "state that a segment shorter than the width passes straight on to the next segment, the newest slot's "
           "gradient is dropped (reached only by training over segments shorter than the width minus one with the "
           "cache)", CONV_FILE, "if i_w >= seq_len:", "if i_w >= seq_len and i_w < W - 1:",
           case_ids("mdn", MDN_CALLS, cache="train-short", use_short_conv=True)
           + case_ids("gdn", GDN_CALLS, cache="train-short", use_short_conv=True)),
    Mutant("layer_mdn_conv_bwd_bias_per_tap", "ShortConvolution backward (MomentumDeltaNet's q / k / v "
           "convolutions): the bias gradient accumulated at every tap, the patch of layer_path_conv_bwd_bias_per_tap "
           "reached through this layer", "modules/causal_conv1d/ops.py", "if HAS_BIAS and i_w == 0:", "if HAS_BIAS:",
           case_ids("mdn", MDN_CALLS, conv_bias=True, phase="train"), count=3),)
MODULE_MUTANTS_GDN = (
    Mutant("layer_gdn_gated_norm_dw_partial", "FusedRMSNormGated backward (GatedDeltaNet's and MomentumDeltaNet's "
           "output norm): the weight gradient is the first program's partial sum only, whole only while the SM "
           "count gives one program (a CPU's 1, not the H200's 132)", "modules/norm/fused_norm_gate.py",
           "dw = dw.sum(0).to(weight.dtype) if weight is not None else None",
           "dw = dw[0].to(weight.dtype) if weight is not None else None",
           ("layer.fla.gdn.default.fp32.backward", "layer.fla.mdn.default.bf16.backward")),
    Mutant("layer_gdn_gated_norm_sigmoid_dg", "FusedRMSNormGated backward with a sigmoid output gate "
           "(GatedDeltaNet's output_gate_activation='sigmoid'): dg = dy y sigmoid(g), the factor 1 - sigmoid(g) "
           "dropped", "modules/norm/fused_norm_gate.py", "b_dg = b_dy * b_y * b_sigmoid_g * (1 - b_sigmoid_g)",
           "b_dg = b_dy * b_y * b_sigmoid_g",
           case_ids("gdn", GDN_CALLS, output_gate_activation="sigmoid", phase="train"), count=2),
    Mutant("layer_gdn_conv_bwd_bias_per_tap", "ShortConvolution backward (GatedDeltaNet's q / k / v convolutions, "
           "fused or not): the bias gradient accumulated at every tap, the patch of layer_path_conv_bwd_bias_per_tap",
           "modules/causal_conv1d/ops.py", "if HAS_BIAS and i_w == 0:", "if HAS_BIAS:",
           case_ids("gdn", GDN_CALLS, conv_bias=True, phase="train"), count=3))

add(LayerRecord(
    name="mdn", module="fla.layers.momentum_deltanet", cls="MomentumDeltaNet",
    description="Momentum DeltaNet: delta rule with a momentum state M, gates from the hidden states",
    variants=VARIANTS, comparisons={**COMMON, **MDN_CONVENTIONS,
                                    "floor": (("at the momentum floor (log mu = -2 for every token, alpha ~ 0.99): "
                                              "T 64 (recurrent) and 65 (chunk)"), floor),
                                    "decay": (("momentum decaying fast above the floor (log mu ~ -0.6 a token): T 64 "
                                              "(recurrent) and 65 (chunk)"), decay)},
    declared=declared, mutants=MDN_MUTANTS + MODULE_MUTANTS_MDN, calls=MDN_CALLS))
add(LayerRecord(
    name="gdn", module="fla.layers.gated_deltanet", cls="GatedDeltaNet",
    description="Gated DeltaNet: the gated delta rule, gates from the hidden states",
    variants=GDN_VARIANTS, comparisons={**COMMON, "mask-reused": (
        "attention_mask refilled in place between two calls (the same tensor object), against each row's valid "
        "tokens", mask_reused),
        "convention-gate-args": ("declared per tree: the op's g and beta are the raw projections (or, before "
                                 "2026-04 / 05, the activated gates), on both paths", convention_gate_args),
        "convention-state-layout": ("declared per tree: the cached recurrent state is [N, H, V, K] (before "
                                    "2026-05-18 [N, H, K, V])", convention_state_layout)},
    declared=declared, mutants=GDN_MUTANTS + MODULE_MUTANTS_GDN, calls=GDN_CALLS, history=gdn_history))
