"""Every way a layer is called: each record's `calls` (a Calls) declares, for every parameter of the layer's
constructor and forward (and every key its forward reads from **kwargs), the levels its cases take or why it takes
none; the cases are a covering array of strength 2 over them (allpairspy, as pathmdn_verify.core.boundaries does
for the ops), one check each:

    layer.<impl>.<layer>.pairwise.<dtype>.<NN>

The factors of a case are the constructor options the record varies and five of the call:

    input   dense; attention_mask (row 0 left padding, row 1 interior padding); cu_seqlens (the batch packed into
            one row of two uneven sequences); both (the packed row with the all-ones attention_mask Hugging Face
            passes by default: the sequences are the caller's cu_seqlens, which a tree that recomputes them from
            the mask overwrites)
    cache   none; step (a prefill with a cache, then one token at a time); segments (a prefill, a multi-token call
            with the cache, then one token); train-segments (training over two segments, the second continuing
            the first's cache, gradients through both); train-short (training over four segments sharing the
            cache, two of them of 1 and 2 tokens: shorter than the convolution's width minus one)
    phase   eval; train (module.train(): fla's layers choose their path by self.training)
    grad    none (eval); the upstream gradient contiguous; the same values in a non-contiguous tensor
    q_len   short (20: the recurrent paths), long (72: past the 64-token chunk) and one (one token per row, dense,
            without a cache)

A case builds the layer with its options, calls it as the case says, and compares every output at a valid position
(and in training the gradients of the input, at every position, and of every parameter) with the float64 literal of
each sequence alone (the record's `literal`, which takes every option the record varies), under the kernel budget
rule.  The options are the literal's as the case asks for them, never as the built layer says it holds them: a
layer that swallows or ignores an option fails.  Cases of the levels in LATER come after the others, so that the
earlier cases keep their numbers.  `uncovered` lists the parameters of a layer class that its record neither varies
nor explains: the test property_tests/cli/test_layer_calls_cli.py fails on any (and on a record with one option
removed: its negative control).
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from allpairspy import AllPairs

from pathmdn_verify.core.ids import CheckId
from pathmdn_verify.core.registry import Result
from pathmdn_verify.layers.table import LayerCase
from pathmdn_verify.layers.kv_cache import new_cache
from pathmdn_verify.layers.common import LayerLacks, build, call, combine, judge, params64, precision


class Why(str):
    """Why a record takes no levels of a parameter: a reason, never a level."""


CALL_FACTORS = {
    "input": ("dense", "mask", "cu_seqlens", "mask+cu_seqlens"),
    "cache": ("none", "step", "segments", "train-segments", "train-short"),
    "phase": ("eval", "train"),
    "grad": ("none", "contiguous", "strided"),
    "q_len": ("short", "long", "one"),
}
# levels added after the first array: their cases are numbered after the others, whose numbers (check ids) stay
LATER = {"cache": ("train-short",), "q_len": ("one",)}
Q_LEN = {"short": 20, "long": 72, "one": 1}
PAD = 3                                   # padding tokens per masked row
CUTS = {"step": lambda T: [T - 2, T - 1, T], "segments": lambda T: [T - 6, T - 2, T - 1, T],
        "train-segments": lambda T: [T // 2, T],
        "train-short": lambda T: [T // 4, T // 4 + 1, T // 4 + 3, T]}    # segments of 1 and 2 tokens inside


# What any layer's call must be: gradients only in training, generation in eval, a cache with a padded batch
# (fla's generation never passes cu_seqlens with a cache), one token per row dense and without a cache.
RULES = (("phase", "grad", lambda p, g: (p == "eval") == (g == "none")),
         ("phase", "cache", lambda p, c: c == "none" or (p == "train") == c.startswith("train-")),
         ("cache", "input", lambda c, i: c == "none" or i in ("dense", "mask")),
         ("q_len", "input", lambda q, i: q != "one" or i == "dense"),
         ("q_len", "cache", lambda q, c: q != "one" or c == "none"))


def _valid(named: dict) -> bool:
    """Whether a (partial) row breaks none of RULES."""
    return all(a not in named or b not in named or ok(named[a], named[b]) for a, b, ok in RULES)


@dataclass(frozen=True, eq=False)
class Calls:
    """How a record calls its layer.  constructor: option -> levels (the first is the default) or Why;
    forward: parameter (or **kwargs key) -> the call factor that exercises it, or Why; levels: the call
    factors' levels this layer takes (default CALL_FACTORS), leaving one out needs a Why in `left_out`;
    excluded: combinations left out of the array ({factor: levels}, why: a refusal the layer documents, or a
    known defect a comparison of its own already shows); explained: combinations ({factor: levels},
    convention) whose verdict on a tree before a change of pathmdn_verify.layers.history that change explains
    (added to a failing or unsupported case's message, never deciding it); sizes(case, row): the
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
    explained: tuple = ()
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


def _complete(calls: Calls, fs: list, rows: list, keep_fit: bool = True) -> list[dict]:
    """A row for every feasible pair of fs's levels that rows leave out: the defaults, the pair, and the first
    assignment of the constrained factors that keeps the row allowed, merged into an added row where they fit
    (the fields a pair set are kept; keep_fit: so are those the assignment set, as the first array was built)."""
    import itertools
    feasible = _feasible(calls, tuple(fs))
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
                    added.append(({**defaults, **fit, a: x, b: y}, {a, b, *fit} if keep_fit else {a, b}))
    return [r for r, _ in added]


@functools.cache
def _feasible(calls: Calls, fs: tuple) -> list[dict]:
    """Every allowed assignment of fs's constrained factors (the call factors and those an exclusion names), in
    the order of their levels; computed once per record and factor set (the process keeps every record)."""
    import itertools
    constrained = [(n, v) for n, v in fs if n in CALL_FACTORS or any(n in c for c, _ in calls.excluded)]
    return [f for f in (dict(zip([n for n, _ in constrained], c))
                        for c in itertools.product(*[v for _, v in constrained])) if _allowed(calls, f)]


def _defaults_with(calls: Calls, fs: list, factor: str, level: str) -> dict | None:
    """The row of defaults with factor = level, the other call factors at their first levels that allow it."""
    import itertools
    defaults = {n: v[0] for n, v in fs}
    calls_fs = [(n, (level,) if n == factor else v) for n, v in fs if n in CALL_FACTORS]
    for combo in itertools.product(*[v for _, v in calls_fs]):
        row = {**defaults, **dict(zip([n for n, _ in calls_fs], combo))}
        if _allowed(calls, row):
            return row
    return None


def _covering(calls: Calls) -> tuple:
    """allpairspy's array over the levels but LATER's, completed where its filter dropped a feasible pair
    (`_complete`); then for each of LATER's levels the record takes a row of defaults (as the array's first row
    is), and the rows their pairs need (the earlier rows keep their numbers)."""
    fs = calls.factor_levels()
    first = [(n, tuple(x for x in v if x not in LATER.get(n, ()))) for n, v in fs]
    names = [n for n, _ in fs]
    rows = [dict(zip(names, r)) for r in AllPairs([list(v) for _, v in first],
                                                  filter_func=lambda r: _allowed(calls, dict(zip(names, r))))]
    rows += _complete(calls, first, rows)
    rows += [r for n, levels in LATER.items() for x in levels if x in dict(fs)[n]
             if (r := _defaults_with(calls, fs, n, x)) is not None]
    while later := _complete(calls, fs, rows, keep_fit=False):     # until a merge uncovers no earlier pair
        rows += later
    return tuple(rows)


def covering(calls: Calls) -> tuple[dict, ...]:
    """The record's cases: a covering array of strength 2 over its factors (every pair of levels of two factors
    in some case, unless the pair is invalid or excluded), the same on every machine and run."""
    if id(calls) not in _ROWS:
        _ROWS[id(calls)] = (calls, _covering(calls))     # the record keeps calls alive: its id stays its own
    return _ROWS[id(calls)][1]


def case_ids(name: str, calls: Calls, impl: str = "fla", **levels) -> tuple[str, ...]:
    """The ids of the record's cases whose row has every given level (a mutant's killers among the cases)."""
    return tuple(str(CheckId.of_layer(impl, name, "pairwise", calls.dtype, f"{i:02d}"))
                 for i, row in enumerate(covering(calls)) if all(row.get(k) == v for k, v in levels.items()))


def explained(calls: Calls, index: int) -> tuple[str, ...]:
    """The conventions of pathmdn_verify.layers.history that explain case `index`'s verdict on an older tree."""
    row = covering(calls)[index]
    return tuple(name for combo, name in calls.explained if _matches(row, combo))


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
    ones = torch.ones(1, N, dtype=torch.long)        # the all-ones mask Hugging Face passes with packed sequences
    return pack, {"cu_seqlens": cu, "attention_mask": ones.to(device)}, [(0, everything[:a]), (0, everything[a:])], \
        ones


def run(case: LayerCase, calls: Calls, index: int) -> Result:
    """The pairwise case `index` of the record (module docstring)."""
    row = covering(calls)[index]
    # an option at its first level (the constructor's default) is left to the constructor: a tree that predates
    # the option builds the same layer
    case = replace(case, options={k: row[k] for k in calls.constructor if k in row and row[k] != calls.constructor[k][0]})
    B, T = 2, Q_LEN[row["q_len"]]
    seed = 1009 * case.ctx.seed + index
    layer = build(case, seed, **calls.sizes(case, row))
    _widths(layer, row)
    dtype = precision(case).torch_dtype
    shape, extra, sequences, mask = _plan(row, T, B, case.ctx.device)
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


def _widths(layer, row: dict) -> None:
    """LayerLacks when a short convolution of the layer is not as wide as the case's conv_size asks."""
    got = {m.kernel_size[0] for m in layer.modules() if type(m).__name__ == "ShortConvolution"}
    if "conv_size" in row and got - {row["conv_size"]}:
        raise LayerLacks(f"conv_size={row['conv_size']} asked, the layer's short convolutions are {sorted(got)} wide "
                         "(the option swallowed or ignored)")


def _call(layer, x, row: dict, extra: dict, mask) -> torch.Tensor:
    """The layer's output on x as the row calls it: [rows, T, hidden]."""
    if row["cache"] == "none":
        with torch.set_grad_enabled(x.requires_grad):
            return call(layer, x, **extra)[0]
    m = mask.to(x.device) if row["input"] == "mask" else None
    store, _ = new_cache()
    outs, start = [], 0
    with torch.set_grad_enabled(x.requires_grad):
        for end in CUTS[row["cache"]](x.shape[1]):
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
        try:
            y = calls.literal(case, layer, p, x[b:b + 1, idx], exact)
        except KeyError as exc:
            raise LayerLacks(f"the layer holds no parameter {exc.args[0]}, which the options it was built with call "
                             "for (an option swallowed or ignored)") from exc
        if train:
            (y * do[b:b + 1, idx].to(dtype)).sum().backward()
        outs.append(y.detach())
    return outs, p, x
