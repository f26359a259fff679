"""The examples of README.md and docs/*.md cannot rot: every ```bash block after a `<!-- runnable -->` line runs
here, in bash with `set -e`, in a fresh temporary folder that holds links to the repository's top-level entries
(so `docs/examples/...` resolves as from a clone's top, and what a block writes stays in the folder), and must
exit 0 (`<!-- runnable: exit N -->`: exit N). A block after `<!-- needs: RESOURCE -->` runs only when the
resource is given: `fla-history`, a clone of fla's history named by $VERIFY_FLA_HISTORY (it stands for the
block's `~/fla`); `gpu`, a CUDA device. A planted broken block fails (the negative control), and a marker that
no bash block follows is refused. Also: docs/findings.md names exactly the checks of the expected-failure list,
and .ci/run runs the README's set-up and test commands."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- (runnable|needs: [\w-]+)(?:: exit (\d+))? -->$", re.M)
BLOCK = re.compile(r"```bash\n(.*?)\n```", re.S)


def blocks(path: Path) -> list[dict]:
    """The marked blocks of one document: {where, mark, exit, code}; a marker not followed by a bash block is an
    error."""
    text = path.read_text()
    found = []
    for m in MARKER.finditer(text):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{text.count(chr(10), 0, m.start()) + 1}"
        block = BLOCK.match(text, m.end() + 1)
        if block is None:
            raise ValueError(f"{where}: {m.group(0)} is not followed by a ```bash block")
        found.append({"where": where, "mark": m.group(1), "exit": int(m.group(2) or 0), "code": block.group(1)})
    return found


def missing(mark: str) -> str | None:
    """Why a block's resource is absent here, or None."""
    if mark == "runnable":
        return None
    resource = mark.split(": ", 1)[1]
    if resource == "fla-history":
        return None if os.environ.get("VERIFY_FLA_HISTORY") else "needs a clone of fla's history: VERIFY_FLA_HISTORY=PATH"
    if resource == "gpu":
        import torch
        return None if torch.cuda.is_available() else "needs a GPU"
    return f"unknown resource {resource!r}"


def run_block(block: dict, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv") and not (cwd / entry.name).exists():
            (cwd / entry.name).symlink_to(entry)
    code = block["code"]
    if os.environ.get("VERIFY_FLA_HISTORY"):
        code = code.replace("~/fla", os.environ["VERIFY_FLA_HISTORY"])
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def verdict(block: dict, cwd: Path) -> str | None:
    """None when the block exits as its marker says, else what it did."""
    done = run_block(block, cwd)
    if done.returncode == block["exit"]:
        return None
    return f"{block['where']}: exit {done.returncode}, not {block['exit']}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


ALL = [b for path in DOCUMENTS for b in blocks(path)]


def test_the_readme_has_runnable_examples():
    readme = [b for b in ALL if b["where"].startswith("README.md")]
    assert sum(b["mark"] == "runnable" for b in readme) >= 6
    assert any(b["mark"] == "needs: fla-history" and "verify bisect" in b["code"] for b in readme)


@pytest.mark.parametrize("block", ALL, ids=[b["where"] for b in ALL])
def test_example(block, tmp_path):
    why = missing(block["mark"])
    if why:
        pytest.skip(why)
    problem = verdict(block, tmp_path)
    assert problem is None, problem


def test_a_broken_block_fails(tmp_path):
    doc = tmp_path / "planted.md"
    doc.write_text("<!-- runnable -->\n```bash\nverify list -k path_attn\nverify all --no-such-option\n```\n"
                   "<!-- runnable: exit 1 -->\n```bash\ntrue\n```\n")
    broken, wrong_exit = blocks(doc)
    assert "exit 2, not 0" in verdict(broken, tmp_path)
    assert "exit 0, not 1" in verdict(wrong_exit, tmp_path)


def test_a_marker_without_a_bash_block_is_refused(tmp_path):
    doc = tmp_path / "planted.md"
    doc.write_text("<!-- runnable -->\n```\nverify all\n```\n")
    with pytest.raises(ValueError, match="not followed by a ```bash block"):
        blocks(doc)


# ------------------------------------------------------------------------------------------------ findings.md


def named_checks(text: str) -> set[str]:
    """The check ids and id patterns a document names: in backquotes or after --id; {a,b} expanded."""
    found = set(re.findall(r"`((?:kernel|layer|oracle)\.[\w.{},*-]+)`", text)) | set(re.findall(r"--id ((?:kernel|layer|oracle)\.[\w.-]+)", text))
    out, todo = set(), list(found)
    while todo:
        name = todo.pop()
        m = re.search(r"\{([^}]*)\}", name)
        if m:
            todo += [name[:m.start()] + alt + name[m.end():] for alt in m.group(1).split(",")]
        else:
            out.add(name)
    return out


def listed_checks() -> set[str]:
    import tomllib
    entries = tomllib.loads((ROOT / "verify" / "run" / "expected_failures.toml").read_text())["xfail"]
    return {i for e in entries for i in (e.get("ids") or [e["id"]])}


def disagreements(text: str, listed: set[str]) -> tuple[list[str], list[str]]:
    """(names in the text that match no listed check, listed checks that no name in the text covers)."""
    from fnmatch import fnmatchcase
    names = named_checks(text)
    return (sorted(n for n in names if not any(fnmatchcase(i, n) for i in listed)),
            sorted(i for i in listed if not any(fnmatchcase(i, n) for n in names)))


def test_findings_and_the_expected_failure_list_agree():
    unknown, unmentioned = disagreements((ROOT / "docs" / "findings.md").read_text(), listed_checks())
    assert not unknown, f"docs/findings.md names checks that verify/run/expected_failures.toml does not list: {unknown}"
    assert not unmentioned, f"listed checks that docs/findings.md does not name: {unmentioned}"


def test_a_finding_that_is_not_listed_or_an_entry_not_described_is_caught():
    listed = {"kernel.fla.path_attn.bwd.fp32.saturated", "layer.fla.mdn.default.fp32.padding"}
    assert disagreements("`kernel.fla.path_attn.bwd.*` and `layer.fla.mdn.default.fp32.{padding,mask}`", listed) == (
        ["layer.fla.mdn.default.fp32.mask"], [])
    assert disagreements("verify all --id kernel.fla.path_attn.bwd.fp32.saturated", listed) == (
        [], ["layer.fla.mdn.default.fp32.padding"])


# ------------------------------------------------------------------------------------------------ .ci/run


def commands_ci_lacks(readme: str, ci: str) -> list[str]:
    """The steps of the README's set-up and test commands (the plain ``` block under "Set up" and under "Tests",
    split at &&) that are no step of .ci/run (whose `-q` flags are ignored)."""
    def steps(text: str) -> list[str]:
        return [re.sub(r" -q\b", "", part).strip() for line in text.splitlines() for part in line.split(" && ")]
    wanted = [re.search(r"```\n(.*?)\n```", readme[readme.index(h):], re.S).group(1) for h in ("## Set up", "## Tests")]
    ran = set(steps(ci))
    return [s for s in steps("\n".join(wanted)) if s not in ran]


def test_ci_runs_the_readmes_set_up_and_test_commands():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    assert "```\npython -m pytest -q -n auto --dist worksteal property_tests\n```" in readme
    assert not commands_ci_lacks(readme, ci)
    assert commands_ci_lacks(readme, ci.replace("property_tests\n", "property_tests/unit\n"))
