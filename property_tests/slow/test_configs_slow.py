"""`--configs` end to end: the same seed gives the same configs, first runs config 0, and a bug that lives in one
non-first config (a copy of fla) is caught by cover and missed by first."""
from __future__ import annotations

from helpers import run_cli
from test_configs import GDN, _check


# a planted bug that matters only under chunk_fwd_kernel_o's third config (BK=32): the inter-chunk term
# q @ h dropped, seen by any example past one chunk or with an initial state.  Which check's examples reach BK=32
# under cover moves with the registry (a check's rotation starts by its rank among its op's checks); the op's fp32
# forward checks together reach every config (configs.offset), so the test runs them all.
BK32 = {"path": "ops/common/chunk_o.py", "old": "        else:\n            b_o = tl.dot(b_q, b_h, b_o)\n",
        "new": "        elif BK != 32:\n            b_o = tl.dot(b_q, b_h, b_o)\n"}
BK32_KILLERS = "gdn_chunk and fwd and fp32"


def test_same_seed_same_configs_and_first_is_index_0(tmp_path):
    got = []
    for n, mode in enumerate(("cover", "cover", "first")):
        r, doc = run_cli("kernels", "--id", GDN, "--profile", "quick", "--configs", mode, "--json",
                         tmp_path / f"{n}.json")
        assert r.returncode == 0, r.stdout + r.stderr
        details = _check(doc, GDN)["details"]
        assert set(details["configs"]) == set(details["configs_declared"]) and details["configs"]
        assert all(0 <= i < details["configs_declared"][k] for k, v in details["configs"].items() for i in v)
        assert doc["environment"]["configs"]["mode"] == mode
        got.append(details["configs"])
    assert got[0] == got[1]
    assert all(v == [0] for v in got[2].values()), got[2]
    assert got[0] != got[2]         # cover does not merely run the first config


def test_a_bug_only_in_a_non_first_config_is_caught_by_cover_and_missed_by_first(tmp_path):
    from pathmdn_verify.platform.mutation import Mutant, materialize
    tree = materialize(Mutant("gdn_chunk_o_bk32", "test", killers=(), **BK32), tmp_path / "tree")
    codes, failing = {}, {}
    for mode in ("first", "cover"):
        r, doc = run_cli("kernels", "--kernel-root", tree, "-k", BK32_KILLERS, "--profile", "ci", "--configs", mode,
                         "--json", tmp_path / f"{mode}.json")
        codes[mode] = r.returncode
        failing[mode] = [c for c in doc["checks"] if c["status"] == "fail"]
        if mode == "first":
            assert all(c["details"]["configs"]["chunk_fwd_kernel_o"] == [0] for c in doc["checks"])
    assert codes == {"first": 0, "cover": 1} and not failing["first"] and failing["cover"], codes
    for c in failing["cover"]:
        assert "BK=32" in c["message"], c["message"]
        assert any("BK=32" in s for s in c["details"]["configs_failing_example"]["chunk_fwd_kernel_o"])
