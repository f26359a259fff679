"""docs/commands.md is generated from the parsers: regenerating it gives the committed file, and a changed help
string makes the comparison fail (the negative control)."""
from pathlib import Path

from pathmdn_verify import cli
from pathmdn_verify.tools import command_reference

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def test_the_committed_reference_is_the_generated_one():
    assert REFERENCE.read_text() == command_reference.render(), (
        "docs/commands.md is stale: python -m pathmdn_verify.tools.command_reference docs/commands.md")


def test_the_reference_holds_every_subcommand_and_option():
    text = REFERENCE.read_text()
    parser = cli.build_parser()
    for name, sub in command_reference.subcommands(parser).items():
        assert f"## verify {name}\n" in text
        for action in sub._actions:
            for option in action.option_strings:
                assert option in text, (name, option)


def test_a_changed_help_string_makes_the_comparison_fail(tmp_path, capsys):
    parser = cli.build_parser()
    action = next(a for a in command_reference.subcommands(parser)["bisect"]._actions if "--fixed" in a.option_strings)
    action.help = "a help text that the committed reference does not hold"
    assert command_reference.render(parser) != REFERENCE.read_text()
    stale = tmp_path / "commands.md"
    stale.write_text(command_reference.render(parser))
    assert command_reference.main(["--check", str(stale)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert command_reference.main([str(stale)]) == 0 and command_reference.main(["--check", str(stale)]) == 0
