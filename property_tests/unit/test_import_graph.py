"""The import graph of the installed package's sources: no circles, no import that runs back up a layer (by an
import statement or by a dotted name in a string), and the core importing nothing above it.  Each rule has a
negative control on a small planted tree."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = {"verify": "pathmdn_verify", "kernels": "pathmdn_verify.kernels",
           "references": "pathmdn_verify.references"}          # pyproject.toml's package-dir
# bottom up (docs/design.md); a module may import its own layer and those before it
LAYERS = ("references", "core", "kernels", "platform", "same_dtype", "stages", "ops", "layers", "checks", "run",
          "report", "repro", "commands", "cli", "tools", "__main__", "pytest_plugin", "")      # "": the package's __init__
STRING = re.compile(r"""["'](pathmdn_verify(?:\.\w+)+)["']""")


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for f in sorted((root / folder).rglob("*.py")):
            parts = [p for p in f.relative_to(root / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = f
    return out


def layer(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def edges(mods: dict[str, Path]) -> set[tuple[str, str, str]]:
    """(importer, imported module, how: "import" or "string")."""
    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out = set()
    for m, f in mods.items():
        tree = ast.parse(f.read_text())
        names = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
                    base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
                names += [f"{base}.{a.name}" for a in node.names]
        out |= {(m, t, "import") for t in map(known, names) if t and t != m}
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        out |= {(m, t, "string") for s in strings for name in STRING.findall(f'"{s}"')
                if (t := known(name)) and t != m}
    return out


def upward(graph) -> list[tuple[str, str, str]]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    return sorted(e for e in graph if rank[layer(e[0])] < rank[layer(e[1])])


def circles(graph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    succ: dict[str, set[str]] = {}
    for a, b, _ in graph:
        succ.setdefault(a, set()).add(b)
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v), on.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while not comp or w != v:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(succ):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_circle_and_no_import_up_a_layer():
    mods = modules(REPO)
    assert "pathmdn_verify.core.engine" in mods and "pathmdn_verify.kernels.fla_ops" in mods
    graph = edges(mods)
    assert len(graph) > 300                       # the graph was read, not empty
    assert upward(graph) == []
    assert circles(graph) == []
    assert not [e for e in graph if layer(e[0]) == "core" and layer(e[1]) in ("kernels", "platform")]


def _plant(tmp_path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for folder in FOLDERS:
        (tmp_path / folder).mkdir(exist_ok=True)
    return modules(tmp_path)


@pytest.mark.parametrize("text, how", [
    ("from pathmdn_verify.run.runner import Workers\n", "import"),
    ("def f():\n    from ..run import runner\n", "import"),
    ("import importlib\nimportlib.import_module('pathmdn_verify.run.runner')\n", "string"),
])
def test_an_import_up_a_layer_is_found(tmp_path, text, how):
    """The negative controls: the core importing the runner, by an absolute or relative import or by name."""
    mods = _plant(tmp_path, {"verify/core/engine.py": text, "verify/run/runner.py": "X = 1\n",
                             "verify/run/__init__.py": "", "verify/core/__init__.py": ""})
    assert upward(edges(mods)) == [("pathmdn_verify.core.engine", "pathmdn_verify.run.runner", how)]


def test_a_circle_is_found(tmp_path):
    mods = _plant(tmp_path, {"verify/layers/__init__.py": "from pathmdn_verify.layers.calls import X\n",
                             "verify/layers/calls.py": "from pathmdn_verify.layers import Y\nX = 1\n"})
    assert circles(edges(mods)) == [{"pathmdn_verify.layers", "pathmdn_verify.layers.calls"}]


def commands_imported_outside_the_cli(graph) -> list[tuple[str, str, str]]:
    """Imports of verify/commands/ from anything but the CLI and the commands themselves (library code runs
    through pathmdn_verify.run.session; a command is a thin entry point)."""
    return sorted(e for e in graph if layer(e[1]) == "commands" and layer(e[0]) not in ("commands", "cli"))


def report_importing_a_check_family(graph) -> list[tuple[str, str, str]]:
    return sorted(e for e in graph if layer(e[0]) == "report" and layer(e[1]) == "checks")


def test_only_the_cli_imports_the_commands_and_the_report_no_check_family():
    graph = edges(modules(REPO))
    assert commands_imported_outside_the_cli(graph) == []
    assert report_importing_a_check_family(graph) == []


def test_a_library_module_importing_a_command_or_the_report_a_family_is_found(tmp_path):
    """The negative controls: the pytest plugin driving a command, the report importing a check family (both
    above them in the layers, so only these rules see them)."""
    mods = _plant(tmp_path, {"verify/pytest_plugin.py": "from pathmdn_verify.commands.checks import run\n",
                             "verify/commands/checks.py": "def run():\n    pass\n", "verify/commands/__init__.py": "",
                             "verify/report/measure.py": "from pathmdn_verify.checks import state_tracking\n",
                             "verify/report/__init__.py": "", "verify/checks/state_tracking.py": "X = 1\n",
                             "verify/checks/__init__.py": ""})
    graph = edges(mods)
    assert commands_imported_outside_the_cli(graph) == [
        ("pathmdn_verify.pytest_plugin", "pathmdn_verify.commands.checks", "import")]
    assert report_importing_a_check_family(graph) == [
        ("pathmdn_verify.report.measure", "pathmdn_verify.checks.state_tracking", "import")]
