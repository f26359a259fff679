"""verify report's options: every default is the one its help states (the profile: quick)."""
import re

from pathmdn_verify import cli


def test_every_default_is_the_one_the_help_states():
    sub = cli.build_parser()._subparsers._group_actions[0]
    report = sub.choices["report"]
    stated = {}
    for action in report._actions:
        m = re.search(r"\(default (\w+)\)", action.help or "")
        if m:
            stated[action.dest] = (m.group(1), str(action.default))
    assert stated["profile"] == ("quick", "quick")
    assert all(said == default for said, default in stated.values()), stated
