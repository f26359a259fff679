"""The options several commands share are declared once, in verify/commands/options.py: no other command module
declares --device, --profile, -k, --seed, --fp32-dot or --debug itself.  The control plants a redeclaration."""
import ast
from pathlib import Path

from pathmdn_verify.commands import options

COMMANDS = Path(options.__file__).parent
SHARED = ("--device", "--profile", "-k", "--seed", "--fp32-dot", "--debug")
# declared by hand still, in modules outside this change: each to move onto options.py, then out of this list
PENDING = {("localize.py", "--seed"), ("manifest.py", "--debug"), ("merge.py", "--debug")}


def redeclared(source: str, module: str) -> set[tuple[str, str]]:
    """(module, flag) of every add_argument call in source that declares a SHARED flag."""
    return {(module, node.args[0].value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in SHARED}


def test_the_shared_options_are_declared_once():
    found = set().union(*(redeclared(f.read_text(), f.name) for f in sorted(COMMANDS.glob("*.py"))
                          if f.name != "options.py"))
    assert found - PENDING == set()
    assert redeclared((COMMANDS / "options.py").read_text(), "options.py") >= {("options.py", f) for f in SHARED}


def test_a_redeclared_option_is_found():
    source = (COMMANDS / "report.py").read_text() + '\np.add_argument("--seed", type=int, default=0, help="x")\n'
    assert redeclared(source, "report.py") == {("report.py", "--seed")}
