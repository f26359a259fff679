"""Boundary cases derived from an op's kernel structure (its record's `structure`, pathmdn_verify.core.records.Structure).

The kernels change code path at their structural constants (a 64-token chunk, a 128-token query block,
PaTH's 512-token backward super-block), with D != Dv, with an optional input present or absent, and in a
varlen batch whose long sequence spans more blocks than the batch has sequences.  For each pass the factors
are:

    T        c - 1, c, c + 1 and 2c + 2 for every constant c of the pass (the profile may thin the levels of
             a constant whose cases are expensive: Structure.levels)
    dims     (D, Dv): equal, D < Dv, D > Dv, from the profile's pair of head dims (a, b); an op with one dim
             (Structure.dims_pair False: a convolution's channels, a norm's width) a or b
    dtype    every dtype of the op
    heads    the (HQ, H) pairs of the structure (GQA ratios)
    varlen   dense; a one-token sequence then a long one (0, 1, T): at T = 2c + 2 the long sequence spans
             three c-blocks, more than the batch has sequences; a first sequence that ends at the pass's
             smallest constant c0, (0, c0, T), or one past it, (0, c0 + 1, T), in alternate cases (where
             c0 = 1 the split at c0 is the one-token sequence above, so both take the split one past it)
    options  each optional input of the structure present and absent, or each of its value classes
             (Structure.option_levels: a width 3 or 4, an activation left out or given)

and the cases are a covering array of strength 2 over them (allpairspy): every pair of levels of any two
factors appears in some case, in far fewer cases than the product.  Expensive T levels (Structure.costly)
are never paired with D == Dv nor with a sequence split at c0 (the cheap levels cover those pairs), so each
such case has D != Dv, and its varlen level, where it has one, is the long sequence.  The array depends only on the record
and the profile: the same cases, in the same order, on every machine and run.

Each case goes to one check of its pass and dtype (`assign`): the compatible check (one whose regime fixes
no field the case sets) with the least estimated cost so far, so the cases spread over the op's checks.
"""
from __future__ import annotations

from allpairspy import AllPairs

DIMS = ("equal", "D<Dv", "D>Dv")
ONE_DIM = ("a", "b")        # an op with one dim (Structure.dims_pair False): the profile's a or b, as D = Dv
VARLEN = (None, "long_last", "at_block")


def t_levels(structure, pass_: str, profile: str) -> list[int]:
    """The T levels of a pass: c - 1, c, c + 1, 2c + 2 per constant c (or the profile's levels for it)."""
    out = []
    for name, c in structure.lengths.get(pass_, {}).items():
        levels = structure.levels.get(name, {}).get(profile, ("c-1", "c", "c+1", "2c+2"))
        out += [{"c-1": c - 1, "c": c, "c+1": c + 1, "c+2": c + 2, "2c+2": 2 * c + 2}[lv] for lv in levels]
    return sorted(set(out))


def _dims(kind: str, a: int, b: int) -> tuple[int, int]:
    return {"equal": (a, a), "D<Dv": (a, b), "D>Dv": (b, a), "a": (a, a), "b": (b, b)}[kind]


def cu_seqlens(kind: str | None, T: int, c0: int, i: int = 0) -> tuple[int, ...] | None:
    """The sequence split of a varlen level for case i (module docstring); dense where T leaves no room."""
    first = {None: None, "long_last": 1, "at_block": max(c0 + i % 2, 2)}[kind]
    return None if first is None or first >= T else (0, first, T)


def factors(structure, op_dtypes: tuple[str, ...], pass_: str, profile: str) -> list[tuple[str, list]]:
    fs = [("T", t_levels(structure, pass_, profile)), ("dims", list(DIMS if structure.dims_pair else ONE_DIM)),
          ("dtype", list(op_dtypes))]
    if len(structure.heads) > 1:
        fs.append(("heads", list(structure.heads)))
    if structure.varlen:
        fs.append(("varlen", list(VARLEN)))
    fs += [(o, list(structure.option_levels.get(o, (False, True)))) for o in structure.options.get(pass_, ())]
    return fs


def covering(structure, op_dtypes: tuple[str, ...], pass_: str, profile: str) -> list[dict]:
    """The boundary cases of a pass as factor dicts (T, dims, dtype, heads, varlen, options), pairwise."""
    fs = factors(structure, op_dtypes, pass_, profile)
    if not fs[0][1]:
        return []
    names = [n for n, _ in fs]
    costly = structure.costly.get(profile, 1 << 30)

    def allowed(row) -> bool:
        named = dict(zip(names, row))
        if named.get("T", 0) <= costly:
            return True
        return named.get("dims") != "equal" and named.get("varlen") != "at_block"
    rows = [dict(zip(names, r)) for r in AllPairs([levels for _, levels in fs], filter_func=allowed)]
    if len(fs) == 1:        # AllPairs needs two factors
        rows = [{"T": t} for t in fs[0][1]]
    return rows


def cases(op, pass_: str, profile: str) -> list[tuple[str, object]]:
    """(dtype, case) of every boundary case of op's pass at the profile."""
    s = op.structure
    if s is None or profile == "quick":      # quick is a smoke run of seconds: no boundary cases
        return []
    a, b = s.dims[profile]
    c0 = min(s.lengths.get(pass_, {}).values(), default=1)
    out = []
    for i, row in enumerate(covering(s, op.dtypes, pass_, profile)):
        D, Dv = _dims(row["dims"], a, b)
        HQ, H = row.get("heads", s.heads[0])
        options = {o: row[o] for o in s.options.get(pass_, ())}
        out.append((row["dtype"], s.build(T=row["T"], D=D, Dv=Dv, HQ=HQ, H=H,
                                          cu_seqlens=cu_seqlens(row.get("varlen"), row["T"], c0, i), seed=1000 + i,
                                          **options)))
    return out


def cost(case) -> float:
    """A case's relative cost: the kernels and the oracles are about quadratic in T."""
    return float(getattr(case, "T", 1)) ** 2


def assign(op, pass_: str, profile: str, regimes: dict) -> dict[tuple[str, str], list]:
    """(dtype, regime) -> its boundary cases: each case to a regime of its dtype that keeps what the case
    covers (its options present or absent: Structure.present) with the least estimated cost so far, in the
    order of `regimes`; the case runs with that regime's fixed fields (a drawn field keeps the case's value)."""
    out: dict[tuple[str, str], list] = {(d, r): [] for d in op.dtypes for r in regimes}
    load = {k: 0.0 for k in out}
    s = op.structure
    for dtype, case in cases(op, pass_, profile):
        fits = [r for r, fields in regimes.items() if s.present(apply_regime(case, fields)) == s.present(case)]
        if not fits:
            raise ValueError(f"{op.name} {pass_}: no regime keeps the boundary case {case.label()}")
        target = min(fits, key=lambda r: (load[(dtype, r)], list(regimes).index(r)))
        out[(dtype, target)].append(apply_regime(case, regimes[target]))
        load[(dtype, target)] += cost(case)
    return out


def apply_regime(case, fields: dict):
    """The case with the regime's fixed fields (a drawn field, a strategy, keeps the case's value)."""
    from dataclasses import replace
    return replace(case, **{f: v for f, v in fields.items() if isinstance(v, (str, int, float, bool))})


def levels_of(structure, case, pass_: str, profile: str) -> dict:
    """The factor levels a case has (its T when T is a level, its dims relation, its varlen level, options)."""
    D = getattr(case, "D", None) or getattr(case, "Dk", None)
    cu = getattr(case, "cu_seqlens", None)
    c0 = min(structure.lengths.get(pass_, {}).values(), default=1)
    one = {v: k for k, v in zip(ONE_DIM, structure.dims[profile])}
    out = {"T": case.T if case.T in t_levels(structure, pass_, profile) else None,
           "dims": (one.get(D, "other") if not structure.dims_pair else
                    "equal" if D == case.Dv else "D<Dv" if D < case.Dv else "D>Dv"),
           "varlen": None if cu is None else "long_last" if cu[1] == 1 else "at_block" if cu[1] in (c0, c0 + 1)
           else "other"}
    out.update(structure.present(case))
    return out


def reached(op, pass_: str, profile: str, cases) -> dict:
    """factor -> {"declared": levels, "reached": levels some case had, "missing": the others}, over the cases
    (of op, pass_) that the checks evaluated (their results' details["cases"], rebuilt from the labels)."""
    s = op.structure
    declared = dict(factors(s, op.dtypes, pass_, profile))
    declared.pop("dtype", None)
    declared.pop("heads", None)
    seen: dict[str, set] = {f: set() for f in declared}
    for case in cases:
        for f, v in levels_of(s, case, pass_, profile).items():
            if f in seen and not (f == "T" and v is None):     # T None: not a level; varlen None: dense
                seen[f].add(v)
    return {f: {"declared": [str(v) for v in lv], "reached": [str(v) for v in lv if v in seen[f]],
                "missing": [str(v) for v in lv if v not in seen[f]]} for f, lv in declared.items()}
