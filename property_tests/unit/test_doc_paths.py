"""The documents name what exists: property_tests/README.md lists every test file of each tier in that tier's section
and none that is not there; every path, file name and pathmdn_verify.<module>[.<name>] docs/design.md names exists.
Each check has a planted control."""
import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "property_tests"
TIERS = ("unit", "cli", "slow")
FOLDERS = {"verify": "pathmdn_verify", "kernels": "pathmdn_verify.kernels", "references": "pathmdn_verify.references"}


def listed(readme: str) -> dict[str, set[str]]:
    """tier -> the test files (`test_*.py`) its section ("## <tier>/") names."""
    out, tier = {t: set() for t in TIERS}, None
    for line in readme.splitlines():
        if m := re.match(r"## (\w+)/", line):
            tier = m.group(1) if m.group(1) in out else None
        elif tier:
            out[tier] |= set(re.findall(r"`(test_\w+\.py)`", line))
    return out


def readme_mismatches(readme: str, root: Path) -> list[str]:
    """'<tier>/<file>: not in the README' for a test file its tier's section leaves out, '...: no such file' for one
    it names that is not there."""
    named, out = listed(readme), []
    for tier in TIERS:
        files = {f.name for f in (root / tier).glob("test_*.py")}
        out += [f"{tier}/{f}: not in the README" for f in sorted(files - named[tier])]
        out += [f"{tier}/{f}: no such file" for f in sorted(named[tier] - files)]
    return out


def test_the_readme_lists_every_test_file():
    assert readme_mismatches((TESTS / "README.md").read_text(), TESTS) == []


def test_a_test_file_left_out_or_gone_is_found():
    """The controls: the README without a row of unit/, and with a row naming a file that is not there."""
    readme = (TESTS / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `test_precision.py`"))
    assert readme_mismatches(readme.replace(row + "\n", ""), TESTS) == ["unit/test_precision.py: not in the README"]
    assert readme_mismatches(readme.replace(row, row + "\n| `test_gone.py` | x |"), TESTS) == \
        ["unit/test_gone.py: no such file"]


def _module_file(module: str, root: Path) -> Path | None:
    """The source file of pathmdn_verify.<...> (pyproject.toml's package-dir), None when there is none."""
    for folder, package in sorted(FOLDERS.items(), key=lambda fp: -len(fp[1])):
        if module == package or module.startswith(package + "."):
            rest = module[len(package):].lstrip(".").split(".") if module != package else []
            base = root / folder / Path(*rest) if rest else root / folder
            return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    return None


def _defines(source: Path, names: list[str]) -> bool:
    """Whether the module defines names[0] at its top level or lists it in __all__ (a name it exports on first
    use), and names[1] in that class, when given."""
    tree = ast.parse(source.read_text())
    exported = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and any(getattr(t, "id", None) == "__all__" for t in n.targets)), [])
    if len(names) == 1 and names[0] in exported:
        return True
    body = tree.body
    for name in names:
        found = next((n for n in body if getattr(n, "name", None) == name or
                      any(getattr(t, "id", None) == name for t in getattr(n, "targets", [getattr(n, "target", None)])) or
                      name in [a.asname or a.name for a in getattr(n, "names", [])]), None)
        if found is None:
            return False
        body = getattr(found, "body", [])
    return True


def missing_names(text: str, root: Path) -> list[str]:
    """Every repository path (verify/..., kernels/..., property_tests/..., docs/..., .ci/...), bare file name and
    pathmdn_verify.<module>[.<name>] that text names and the checkout lacks."""
    out = []
    for path in sorted(set(re.findall(r"(?<![\w/.])((?:verify|references|kernels|property_tests|docs|reports|\.ci)"
                                      r"/[\w/.\-*]*)", text))):
        if not list(root.glob(path.rstrip("/") or ".")):
            out.append(path)
    files = {p.name for top in root.iterdir() if top.name not in (".venv", ".git")
             for p in ([top] if top.is_file() else top.rglob("*"))}
    out += sorted(n for n in set(re.findall(r"(?<![\w/.\-])(\w+\.(?:py|toml|json|md))\b", text)) if n not in files)
    for dotted in sorted(set(re.findall(r"\bpathmdn_verify(?:\.\w+)+", text))):
        words = dotted.split(".")
        cut = next((i for i in range(len(words), 0, -1) if _module_file(".".join(words[:i]), root)), 0)
        if not cut or (words[cut:] and not _defines(_module_file(".".join(words[:cut]), root), words[cut:])):
            out.append(dotted)
    # `<oracle module>.<name>`: a function of references/ named by its module (ops' methods and the symbolic
    # check ids are other things)
    stems = {f.stem for f in (root / "references").glob("*.py")} - {"__init__", "ops"}
    out += sorted(f"{stem}.{name}" for stem, name in set(re.findall(r"`(\w+)\.(\w+)", text))
                  if stem in stems and name != "py" and not _defines(root / "references" / f"{stem}.py", [name]))
    return out


def test_the_design_names_what_exists():
    assert missing_names((REPO / "docs" / "design.md").read_text(), REPO) == []


def test_a_name_that_does_not_exist_is_found():
    """The controls: a moved file, a file name, a module and a function that are not there."""
    planted = ("`verify/layers/cache.py`, `verify/core/nothing/`, `gone_module.py`, `pathmdn_verify.core.nowhere`, "
               "`pathmdn_verify.core.budget.no_such_function`, `pathmdn_verify.core.records.OpRecord.no_method`, "
               "`path_oracle.no_walk`")
    assert missing_names(planted, REPO) == [
        "verify/core/nothing/", "verify/layers/cache.py", "gone_module.py", "pathmdn_verify.core.budget.no_such_function",
        "pathmdn_verify.core.nowhere", "pathmdn_verify.core.records.OpRecord.no_method", "path_oracle.no_walk"]
    assert missing_names("`verify/core/budget.py`, `pathmdn_verify.core.budget.verdict`, `pathmdn_verify.OpRecord`, "
                         "`pathmdn_verify.core.records.OpRecord.check_id`, `budget.py`, `path_oracle.path_logits`",
                         REPO) == []
