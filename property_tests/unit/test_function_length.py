"""No function (or method, or nested function) longer than MAX_LINES lines, decorators and docstring included, in
the folders of THIN: a longer one is split along its seams.  The control plants a long function's source."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
THIN = ("verify/platform", "verify/stages")
MAX_LINES = 60


def long_functions(source: str, where: str = "<planted>") -> list[str]:
    """'where:line name (n lines)' of every function in source longer than MAX_LINES."""
    return [f"{where}:{node.lineno} {node.name} ({n} lines)" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n := node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1) > MAX_LINES]


def test_no_function_in_the_thin_folders_is_long():
    files = [f for folder in THIN for f in sorted((REPO / folder).rglob("*.py"))]
    assert len(files) > 5
    found = [hit for f in files for hit in long_functions(f.read_text(), str(f.relative_to(REPO)))]
    assert not found, found


def test_a_long_function_is_found():
    """The control: a function of MAX_LINES + 1 lines (a method of a class, the lines of its decorator counted) is
    found; one of MAX_LINES lines is not."""
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_LINES - 2))
    planted = f"class C:\n    @staticmethod\n    def f():\n{body}        return 0\n"
    assert long_functions(planted) == [f"<planted>:3 f ({MAX_LINES + 1} lines)"]
    assert long_functions(planted.replace("    @staticmethod\n", "")) == []
