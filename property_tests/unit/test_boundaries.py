"""Boundary cases derived from each op record's kernel structure (pathmdn_verify.core.boundaries): a covering array of
strength 2 (every pair of levels of any two factors in some case, but the pairs the cost rule excludes), the
same cases on every call, each case given to a check of its dtype whose regime keeps what the case covers,
and the quick profile left without them."""
import itertools

import pytest
from hypothesis import HealthCheck, given, settings

from pathmdn_verify import ops
from pathmdn_verify.core import boundaries as B
from pathmdn_verify.core import strategies as S
from pathmdn_verify.ops import attention_ops as attention, gdn_ops as gdn, mdn_ops as mdn

STRUCTURED = [(op.name, p) for op in ops.OPS.values() if op.structure
              for p in (*op.passes, *(("decode",) if op.decode else ())) if B.t_levels(op.structure, p, "ci")]


def _wrong_pairs(fs, rows, costly):
    """Pairs of levels that are uncovered, or covered though the cost rule excludes them."""
    out = []
    for (fa, la), (fb, lb) in itertools.combinations(fs, 2):
        for a, b in itertools.product(la, lb):
            pair = {fa: a, fb: b}
            excluded = pair.get("T", 0) > costly and (pair.get("dims") == "equal" or pair.get("varlen") == "at_block")
            covered = any(all(r.get(k) == v for k, v in pair.items()) for r in rows)
            if covered == excluded:
                out.append(pair)
    return out


@pytest.mark.parametrize("name, pass_", STRUCTURED)
def test_every_pair_of_levels_is_covered(name, pass_):
    op = ops.OPS[name]
    fs = B.factors(op.structure, op.dtypes, pass_, "ci")
    rows = B.covering(op.structure, op.dtypes, pass_, "ci")
    costly = op.structure.costly.get("ci", 1 << 30)
    assert _wrong_pairs(fs, rows, costly) == []
    assert len(rows) < len(list(itertools.product(*(lv for _, lv in fs))))      # fewer than the product
    # negative control: any one case dropped leaves some pair uncovered (the array has no spare row)
    assert any(_wrong_pairs(fs, rows[:i] + rows[i + 1:], costly) for i in range(len(rows)))


@pytest.mark.parametrize("name, pass_", STRUCTURED)
def test_the_cases_are_the_same_on_every_call_and_reach_their_levels(name, pass_):
    op = ops.OPS[name]
    first = B.cases(op, pass_, "ci")
    assert first == B.cases(op, pass_, "ci") and B.cases(op, pass_, "quick") == []
    levels = B.t_levels(op.structure, pass_, "ci")
    assert sorted({c.T for _, c in first}) == levels
    reached = B.reached(op, pass_, "ci", [c for _, c in first])
    assert all(not f["missing"] for f in reached.values()), reached


@pytest.mark.parametrize("name, pass_", STRUCTURED)
def test_each_case_goes_to_a_check_that_keeps_its_options(name, pass_):
    op = ops.OPS[name]
    regimes = {r: op.regimes[r] for r in op.decode.regimes} if pass_ == "decode" else op.regimes
    assigned = B.assign(op, pass_, "ci", regimes)
    flat = [c for cases in assigned.values() for c in cases]
    assert len(flat) == len(B.cases(op, pass_, "ci"))
    for (dtype, regime), cs in assigned.items():
        for c in cs:
            assert B.apply_regime(c, regimes[regime]) == c        # the regime's fixed fields hold
    for (dtype, case), placed in zip(B.cases(op, pass_, "ci"), _placement(assigned, B.cases(op, pass_, "ci"), regimes)):
        assert placed[0] == dtype and op.structure.present(placed[1]) == op.structure.present(case)


def _placement(assigned, cases, regimes):
    """(dtype, assigned case) for each case, matched by seed (each boundary case has its own seed)."""
    by_seed = {c.seed: (d, c) for (d, _), cs in assigned.items() for c in cs}
    return [by_seed[c.seed] for _, c in cases]


def test_a_missing_level_is_named(registry):
    op = ops.OPS["path_attn"]
    some = [c for _, c in B.cases(op, "bwd", "ci") if c.T < 500]
    reached = B.reached(op, "bwd", "ci", some)
    assert set(reached["T"]["missing"]) == {"514"}       # ci thins the super-block to c + 2


SHAPE_LEVELS = {   # the drawn examples' shape fields per op family and profile (pathmdn_verify.core.strategies.shape_rows)
    "path": lambda p: dict(zip(("D", "Dv", "heads"), attention.SIZES[p][1:4]),
                           batch=S.batch_levels(attention.SIZES[p][4]), gate=(False, True)),
    "gdn": lambda p: dict(zip(("Dk", "Dv", "H"), gdn.GDN_SIZES[p][1:4]), batch=S.batch_levels(gdn.GDN_SIZES[p][4])),
    "mdn": lambda p: dict(zip(("Dk", "Dv", "H", "batch"), mdn.MDN_SIZES[p][1:])),
}


def _uncovered(levels: dict, rows: list[dict]) -> list[dict]:
    """Pairs of levels of two fields that no row has."""
    return [{fa: a, fb: b} for (fa, la), (fb, lb) in itertools.combinations(levels.items(), 2)
            for a, b in itertools.product(la, lb) if not any(r.get(fa) == a and r.get(fb) == b for r in rows)]


@pytest.mark.parametrize("family", sorted(SHAPE_LEVELS))
@pytest.mark.parametrize("profile", ["quick", "ci", "full"])
def test_drawn_shapes_come_from_rows_of_a_pairwise_array(family, profile):
    levels = SHAPE_LEVELS[family](profile)
    factors = tuple((n, tuple(v)) for n, v in levels.items() if len(v) > 1)
    rows = [dict(r) for r in S._rows(factors)]
    varied = dict(factors)
    assert _uncovered(varied, rows) == []
    assert rows == [dict(r) for r in S._rows(factors)]                     # the same on every call
    if len(varied) > 1:
        assert len(rows) < len(list(itertools.product(*varied.values())))      # far fewer compile keys
        # negative control: a row dropped leaves some pair uncovered
        assert any(_uncovered(varied, rows[:i] + rows[i + 1:]) for i in range(len(rows)))
    # the cases an op draws take their shape fields from the rows: a hundred draws show no other shape
    strategy = {"path": lambda: attention.path_cases({}, profile), "gdn": lambda: gdn.gdn_cases({}, profile),
                "mdn": lambda: mdn.mdn_cases({}, profile)}[family]()
    fields = {"path": ("D", "Dv", "HQ", "H"), "gdn": ("Dk", "Dv", "H"), "mdn": ("Dk", "Dv", "H")}[family]
    seen = set()

    @settings(max_examples=100, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(case):
        seen.add(tuple(getattr(case, f) for f in fields))
    draw()
    shapes = {tuple(r.get(f, levels.get(f, (None,))[0]) for f in fields) if family != "path" else
              (r.get("D", levels["D"][0]), r.get("Dv", levels["Dv"][0]), *r.get("heads", levels["heads"][0]))
              for r in rows}
    assert seen <= shapes and (len(seen) > 1 or len(shapes) == 1)
