"""Every way a layer is called (verify/layers/calls.py): each record's cases cover every feasible pair of levels,
start with the defaults and keep their ids; the options a signature reads.  Against the installed layer classes
(every parameter exercised or explained, a record missing one flagged): cli/test_layer_calls_cli.py."""
import itertools

import pytest

from pathmdn_verify import layers
from pathmdn_verify.layers import calls as C

RECORDS = layers.load()


def test_signature_options_read_the_kwargs_keys_and_the_training_switch():
    class Layer:
        def __init__(self, width: int = 4, *, bias=False, **kwargs):
            pass

        def forward(self, x, mask=None, **kwargs):
            if self.training:
                pass
            return kwargs.get("cu_seqlens"), kwargs["offsets"]
    got = C.signature_options(Layer)
    assert got == {"constructor": {"width", "bias", "**kwargs"},
                   "forward": {"x", "mask", "**kwargs", "cu_seqlens", "offsets", "phase"}}


def _constrained(calls):
    """The factors any constraint names (validity rules, exclusions): a pair is feasible iff some assignment of
    these (the others free) keeps it."""
    names = set(C.CALL_FACTORS) | {k for combo, _ in calls.excluded for k in combo}
    return [(n, v) for n, v in calls.factor_levels() if n in names]


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_cases_cover_every_feasible_pair(name):
    calls = RECORDS[name].calls
    rows = C.covering(calls)
    fs = calls.factor_levels()
    constrained = _constrained(calls)
    feasible = []
    for combo in itertools.product(*[v for _, v in constrained]):
        named = dict(zip([n for n, _ in constrained], combo))
        if C._valid(named) and not any(C._matches(named, c) for c, _ in calls.excluded):
            feasible.append(named)
    for (a, la), (b, lb) in itertools.combinations(fs, 2):
        for x, y in itertools.product(la, lb):
            if not any(f.get(a, x) == x and f.get(b, y) == y for f in feasible):
                continue                                      # no valid case can hold this pair
            assert any(r[a] == x and r[b] == y for r in rows), f"{name}: no case has {a}={x}, {b}={y}"
    for r in rows:
        assert C._valid(r) and not any(C._matches(r, c) for c, _ in calls.excluded), r


def test_the_cases_start_with_the_defaults_and_are_the_same_every_time():
    for record in RECORDS.values():
        first = C.covering(record.calls)[0]
        assert all(first[n] == v[0] for n, v in record.calls.factor_levels()), first
        assert C._covering(record.calls) == C.covering(record.calls)


def test_pairwise_ids_follow_the_layer_id_scheme():
    ids = [cid for r in RECORDS.values() for cid, *_ in r.ids() if ".pairwise." in cid]
    assert ids and all(len(cid.split(".")) == 6 for cid in ids)
    assert len(ids) == sum(len(C.covering(r.calls)) for r in RECORDS.values())
