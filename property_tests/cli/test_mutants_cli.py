"""--repeat reports per check how many seeds failed (a planted check that fails on odd seeds)."""
from helpers import load

from pathmdn_verify import cli

PLANTED = ["test.planted.odd_seeds"]     # in planted_checks.py


def test_repeat_counts_failures_per_check(planted, tmp_path, capsys):
    out = tmp_path / "o.json"
    code = cli.main(["all", "--id", PLANTED[0], "--repeat", "3", "--seed-from", "4", "--device", "cpu",
                     "--json", str(out)])
    doc = load(out)
    assert code == 1 and doc["environment"]["seeds"] == [4, 5, 6]
    assert [c["status"] for c in doc["checks"]] == ["pass", "fail", "pass"]
    assert "--seed 5" in doc["checks"][1]["repro"]
    printed = capsys.readouterr().out
    assert "3 runs, seeds 4..6" in printed and "fail 1/3 FLAKY; worst: seed 5" in printed
    assert cli.main(["all", "--id", PLANTED[0], "--repeat", "2", "--seed-from", "2", "--device", "cpu"]) == 1
    assert cli.main(["all", "--id", PLANTED[0], "--repeat", "1", "--seed-from", "2", "--device", "cpu"]) == 0
