"""`--xfails FILE` replaces the built-in expected-failure list: a planted failure it lists is an xfail."""
import json

from test_xfails_scope import verify
import re


def test_xfails_file_turns_a_listed_failure_into_xfail(tmp_path, planted):
    f = tmp_path / "mine.toml"
    f.write_text('[[xfail]]\nid = "test.planted.xfail"\nkinds = ["over_budget"]\n'
                 'regime = "r"\nmeasured = "m"\ncause = "planted"\n')
    out = tmp_path / "run.json"
    r = verify("all", "--id", "test.planted.xfail", "--device", "cpu", "--profile", "quick", "--xfails", str(f),
               "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(out.read_text())["checks"][0]["status"] == "xfail"
    # --xfails adds to the built-in list (a maintainer keeps the known upstream defects); --xfails-only replaces it
    assert re.search(rf"expected failures: \d+ of \d\d+ entries apply to .*\(from {re.escape(str(f))}, and the built-in "
                     r"list\)", r.stdout) and f"listed in {f}" in r.stdout, r.stdout
    only = verify("all", "--id", "test.planted.xfail", "--device", "cpu", "--profile", "quick", "--xfails-only", str(f))
    assert only.returncode == 0 and "expected failures: 1 of 1 entries apply to" in only.stdout, only.stdout
    plain = verify("all", "--id", "test.planted.xfail", "--device", "cpu", "--profile", "quick")
    assert plain.returncode == 1                                              # the built-in list does not name it
