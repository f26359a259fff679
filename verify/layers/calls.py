"""Every way a layer is called: each record's `calls` (a Calls) declares, for every parameter of the layer's
constructor and forward (and every key its forward reads from **kwargs), the levels its cases take or why it takes
none; the cases are a covering array of strength 2 over them (allpairspy, as pathmdn_verify.core.boundaries does
for the ops), one check each:

    layer.<impl>.<layer>.pairwise.<dtype>.<NN>

The factors of a case are the constructor options the record varies and five of the call:

    input   dense; attention_mask (row 0 left padding, row 1 interior padding); cu_seqlens (the batch packed into
            one row of two uneven sequences); both (the packed row, its first tokens masked: which one decides is
            declared per tree, pathmdn_verify.layers.history <layer>.mask_and_cu_seqlens)
    cache   none; step (a prefill with a cache, then one token at a time); segments (a prefill, a multi-token call
            with the cache, then one token); train-segments (training over two segments, the second continuing
            the first's cache, gradients through both)
    phase   eval; train (module.train(): fla's layers choose their path by self.training)
    grad    none (eval); the upstream gradient contiguous; the same values in a non-contiguous tensor
    q_len   short (20: the recurrent paths) and long (72: past the 64-token chunk)

A case builds the layer with its options, calls it as the case says, and compares every output at a valid position
(and in training the gradients of the input, at every position, and of every parameter) with the float64 literal of
each sequence alone (the record's `literal`, which takes every option the record varies), under the kernel budget
rule.  `uncovered` lists the parameters of a layer class that its record neither varies nor explains: the test
property_tests/unit/test_layer_calls.py fails on any (and on a record with one option removed: its negative
control).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from allpairspy import AllPairs

from pathmdn_verify.core.registry import Result
from pathmdn_verify.layers import history
from pathmdn_verify.layers.table import LayerCase
from pathmdn_verify.layers.cache import new_cache
from pathmdn_verify.layers.common import LayerUnsupported, build, call, combine, judge, params64, precision


class Why(str):
    """Why a record takes no levels of a parameter: a reason, never a level."""


CALL_FACTORS = {
    "input": ("dense", "mask", "cu_seqlens", "mask+cu_seqlens"),
    "cache": ("none", "step", "segments", "train-segments"),
    "phase": ("eval", "train"),
    "grad": ("none", "contiguous", "strided"),
    "q_len": ("short", "long"),
}
Q_LEN = {"short": 20, "long": 72}
PAD = 3                                   # padding tokens per masked row


def _valid(named: dict) -> bool:
    """What any layer's call must be: gradients only in training, generation in eval, a cache with a padded
    batch (fla's generation never passes cu_seqlens with a cache)."""
    rules = (("phase", "grad", lambda p, g: (p == "eval") == (g == "none")),
             ("phase", "cache", lambda p, c: c == "none" or (p == "train") == (c == "train-segments")),
             ("cache", "input", lambda c, i: c == "none" or i in ("dense", "mask")))
    return all(a not in named or b not in named or ok(named[a], named[b]) for a, b, ok in rules)


@dataclass(frozen=True, eq=False)
class Calls:
    """How a record calls its layer.  constructor: option -> levels (the first is the default) or Why;
    forward: parameter (or **kwargs key) -> the call factor that exercises it, or Why; levels: the call
    factors' levels this layer takes (default CALL_FACTORS), leaving one out needs a Why in `left_out`;
    excluded: combinations left out of the array ({factor: levels}, why: a refusal the layer documents, or a
    known defect a comparison of its own already shows); needs: combinations that need a convention of
    pathmdn_verify.layers.history (a tree without it makes the case unsupported); sizes(case, row): the
    constructor's size arguments; literal(case, layer, p, x, exact): the literal's output of one sequence
    x [1, t, hidden] from parameters p (leaves in float64 when exact, else float32 for the same-dtype
    arithmetic); c_fwd / c_bwd: the budget factors."""
    constructor: dict
    forward: dict
    sizes: Callable
    literal: Callable
    dtype: str = "fp32"
    levels: dict = field(default_factory=dict)
    left_out: dict = field(default_factory=dict)
    excluded: tuple = ()
    needs: tuple = ()
    c_fwd: float = 8.0
    c_bwd: float = 16.0

    def factor_levels(self) -> list[tuple[str, tuple]]:
        ctor = [(n, v) for n, v in self.constructor.items() if not isinstance(v, Why) and len(v) > 1]
        return ctor + [(n, tuple(self.levels.get(n, lv))) for n, lv in CALL_FACTORS.items()]

    def cases(self) -> tuple[dict, ...]:
        """The record's cases (`covering`)."""
        return covering(self)


def _matches(named: dict, combo: dict) -> bool | None:
    """Whether a (partial) row has every level of combo (None: not decided yet)."""
    if any(k not in named for k in combo):
        return None if all(named.get(k, v[0]) in v for k, v in combo.items() if k in named) else False
    return all(named[k] in v for k, v in combo.items())


_ROWS: dict[int, tuple] = {}


def _allowed(calls: Calls, named: dict) -> bool:
    return _valid(named) and not any(_matches(named, combo) for combo, _ in calls.excluded)


def _covering(calls: Calls) -> tuple:
    """allpairspy's array, then a row for every feasible pair it left out (with a filter it can drop some): the
    defaults, the pair, and the first assignment of the constrained factors that keeps the row allowed, merged
    into an added row where they fit."""
    import itertools
    fs = calls.factor_levels()
    names = [n for n, _ in fs]
    rows = [dict(zip(names, r)) for r in AllPairs([list(v) for _, v in fs],
                                                  filter_func=lambda r: _allowed(calls, dict(zip(names, r))))]
    constrained = [(n, v) for n, v in fs if n in CALL_FACTORS or any(n in c for c, _ in calls.excluded)]
    feasible = [f for f in (dict(zip([n for n, _ in constrained], c))
                            for c in itertools.product(*[v for _, v in constrained])) if _allowed(calls, f)]
    defaults = {n: v[0] for n, v in fs}
    added: list[tuple[dict, set]] = []          # (row, the fields a pair set)
    for (a, la), (b, lb) in itertools.combinations(fs, 2):
        for x, y in itertools.product(la, lb):
            if any(r[a] == x and r[b] == y for r in rows + [r for r, _ in added]):
                continue
            for row, claimed in added:
                if all(row[k] == v or k not in claimed for k, v in ((a, x), (b, y))):
                    trial = {**row, a: x, b: y}
                    if _allowed(calls, trial):
                        row.update(trial), claimed.update((a, b))
                        break
            else:
                fit = next((f for f in feasible if f.get(a, x) == x and f.get(b, y) == y), None)
                if fit is not None:
                    added.append(({**defaults, **fit, a: x, b: y}, {a, b, *fit}))
    return tuple(rows + [r for r, _ in added])


def covering(calls: Calls) -> tuple[dict, ...]:
    """The record's cases: a covering array of strength 2 over its factors (every pair of levels of two factors
    in some case, unless the pair is invalid or excluded), the same on every machine and run."""
    if id(calls) not in _ROWS:
        _ROWS[id(calls)] = (calls, _covering(calls))     # the record keeps calls alive: its id stays its own
    return _ROWS[id(calls)][1]


def case_ids(name: str, calls: Calls, impl: str = "fla", **levels) -> tuple[str, ...]:
    """The ids of the record's cases whose row has every given level (a mutant's killers among the cases)."""
    return tuple(f"layer.{impl}.{name}.pairwise.{calls.dtype}.{i:02d}" for i, row in enumerate(covering(calls))
                 if all(row.get(k) == v for k, v in levels.items()))


def describe(row: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in row.items())


# ------------------------------------------------------------------------------------ the signatures' options

def _kwargs_read(fn) -> set[str]:
    """The keys fn's body reads from its **kwargs: kwargs.get('x'), kwargs['x'], kwargs.pop('x')."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop") \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "kwargs" and node.args \
                and isinstance(node.args[0], ast.Constant):
            found.add(node.args[0].value)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "kwargs" \
                and isinstance(node.slice, ast.Constant):
            found.add(node.slice.value)
    return found


def _reads_training(fn) -> bool:
    try:
        return "self.training" in inspect.getsource(fn)
    except (OSError, TypeError):
        return False


def signature_options(cls) -> dict[str, set[str]]:
    """What a layer class can be given: {"constructor": its __init__ parameters (and "**kwargs" when it takes
    any), "forward": its forward parameters, the keys its forward reads from **kwargs, and "phase" when it reads
    self.training}."""
    out = {}
    for part, fn in (("constructor", cls.__init__), ("forward", cls.forward)):
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        names = {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if any(p.kind is p.VAR_KEYWORD for p in params):
            names.add("**kwargs")
        out[part] = names
    out["forward"] |= _kwargs_read(cls.forward)
    if _reads_training(cls.forward):
        out["forward"].add("phase")
    return out


def uncovered(calls: Calls | None, cls) -> list[str]:
    """Every parameter of cls that calls neither exercises (two levels at least, or a call factor whose levels
    the layer takes two of) nor explains (a Why), and every call factor level left out without one."""
    if calls is None:
        return ["the record has no calls"]
    sig = signature_options(cls)
    missing = []
    for name in sorted(sig["constructor"]):
        v = calls.constructor.get(name)
        if v is None or (not isinstance(v, Why) and len(v) < 2):
            missing.append(f"constructor {name}")
    factors = dict(calls.factor_levels())
    for name in sorted(sig["forward"]):
        v = "phase" if name == "phase" else calls.forward.get(name)
        if v is None or (not isinstance(v, Why) and len(factors.get(v, ())) < 2):
            missing.append(f"forward {name}")
    for factor, levels in CALL_FACTORS.items():
        for level in levels:
            if level not in factors[factor] and not isinstance(calls.left_out.get(f"{factor}={level}"), Why):
                missing.append(f"{factor}={level} (left out without a reason)")
    return missing


# ------------------------------------------------------------------------------------------ running a case

def _draw(seed: int, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _plan(row: dict, T: int, B: int, device):
    """(how x [B, T, hidden] is reshaped for the call, the forward's keyword arguments, the sequences: a list of
    (row index, index tensor of its positions) in the called tensor's layout, the attention mask that a call with
    a cache slices)."""
    ar = torch.arange(T)
    mask = torch.ones(B, T, dtype=torch.long)
    if row["input"] == "dense":
        return (lambda x: x), {}, [(b, ar) for b in range(B)], mask
    if row["input"] == "mask":
        mask[0, :PAD] = 0
        mask[1, T // 2:T // 2 + PAD] = 0
        return (lambda x: x), {"attention_mask": mask.to(device)}, [(b, ar[mask[b].bool()]) for b in range(B)], mask
    N, a = B * T, T - 3                  # packed: two sequences of T - 3 and T + 3 tokens
    cu = torch.tensor([0, a, N], dtype=torch.long, device=device)
    pack = lambda x: x.reshape(1, N, x.shape[-1])
    everything = torch.arange(N)
    if row["input"] == "cu_seqlens":
        return pack, {"cu_seqlens": cu}, [(0, everything[:a]), (0, everything[a:])], None
    packed_mask = torch.ones(1, N, dtype=torch.long)
    packed_mask[0, :PAD] = 0
    return pack, {"cu_seqlens": cu, "attention_mask": packed_mask.to(device)}, None, packed_mask


def run(case: LayerCase, calls: Calls, index: int) -> Result:
    """The pairwise case `index` of the record (module docstring)."""
    row = covering(calls)[index]
    for combo, name in calls.needs:
        if _matches(row, combo):
            why = history.available(name)
            if why is not None:
                raise LayerUnsupported(f"{describe({k: row[k] for k in combo})}: {why}")
    # an option at its first level (the constructor's default) is left to the constructor: a tree that predates
    # the option builds the same layer
    case = replace(case, options={k: row[k] for k in calls.constructor if k in row and row[k] != calls.constructor[k][0]})
    B, T = 2, Q_LEN[row["q_len"]]
    seed = 1009 * case.ctx.seed + index
    layer = build(case, seed, **calls.sizes(case, row))
    dtype = precision(case).torch_dtype
    shape, extra, sequences, mask = _plan(row, T, B, case.ctx.device)
    if row["input"] == "mask+cu_seqlens":
        winner = history.value(f"{case.record.name}.mask_and_cu_seqlens")
        if winner == "refused":
            raise LayerUnsupported(history.why(f"{case.record.name}.mask_and_cu_seqlens"))
        sequences = ([(0, torch.arange(T - 3)), (0, torch.arange(T - 3, B * T))] if winner == "cu_seqlens"
                     else [(0, torch.arange(PAD, B * T))])
    x64 = shape(_draw(seed + 1, B, T, layer.hidden_size).to(dtype).double())
    train = row["phase"] == "train"
    layer.train(train)
    x = x64.to(device=case.ctx.device, dtype=dtype).requires_grad_(train)
    o = _call(layer, x, row, extra, mask)
    do = None
    if train:       # the upstream gradient: the same values, contiguous or a transposed view
        base = _draw(seed + 2, o.shape[1], o.shape[0], o.shape[2]).transpose(0, 1)
        do = base.contiguous() if row["grad"] == "contiguous" else base
        call(o.backward, do.to(device=o.device, dtype=o.dtype))
    p64 = params64(layer)
    truth, same = (_literal(case, calls, layer, p64, x64, sequences, do, exact) for exact in (True, False))
    outs = [(f"o sequence {i} ({len(idx)} tokens)", o[b:b + 1, idx.to(o.device)], truth[0][i], same[0][i])
            for i, (b, idx) in enumerate(sequences)]
    details = {"row": row, "sequences": [len(idx) for _, idx in sequences], "upstream_contiguous":
               None if do is None else do.is_contiguous()}
    res = judge(case, outs, calls.c_fwd, "outputs", details)
    if train:
        zero = lambda g, like: torch.zeros_like(like) if g is None else g
        grads = [("dx", x.grad, truth[2].grad, same[2].grad)] + [
            (f"d{n}", zero(q.grad, q), zero(truth[1][n].grad, truth[1][n]), zero(same[1][n].grad, same[1][n]))
            for n, q in layer.named_parameters()]
        res = combine([res, judge(case, grads, calls.c_bwd, "gradients")], "outputs and gradients", details)
    res.message = f"{describe(row)}: {res.message}"
    return res


def _call(layer, x, row: dict, extra: dict, mask) -> torch.Tensor:
    """The layer's output on x as the row calls it: [rows, T, hidden]."""
    if row["cache"] == "none":
        with torch.set_grad_enabled(x.requires_grad):
            return call(layer, x, **extra)[0]
    T = x.shape[1]
    cuts = {"step": [T - 2, T - 1, T], "segments": [T - 6, T - 2, T - 1, T], "train-segments": [T // 2, T]}
    m = mask.to(x.device) if row["input"] == "mask" else None
    store, _ = new_cache()
    outs, start = [], 0
    with torch.set_grad_enabled(x.requires_grad):
        for end in cuts[row["cache"]]:
            kw = {} if m is None else {"attention_mask": m[:, :end]}
            outs.append(call(layer, x[:, start:end], past_key_values=store, use_cache=True, **kw)[0])
            start = end
    return torch.cat(outs, 1)


def _literal(case, calls, layer, p64, x64, sequences, do, exact: bool):
    """(the literal's output of each sequence alone, its parameter leaves, its x leaf), the gradients of
    sum(o * do) accumulated in the leaves when do is given."""
    dtype = torch.float64 if exact else torch.float32
    train = do is not None
    p = {n: t.to(dtype).clone().requires_grad_(train) for n, t in p64.items()}
    x = x64.to(dtype).clone().requires_grad_(train)
    outs = []
    for b, idx in sequences:
        y = calls.literal(case, layer, p, x[b:b + 1, idx], exact)
        if train:
            (y * do[b:b + 1, idx].to(dtype)).sum().backward()
        outs.append(y.detach())
    return outs, p, x
