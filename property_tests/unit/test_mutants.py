"""Proof of teeth, the records: every planted bug of the op and layer records (pathmdn_verify.ops,
pathmdn_verify.layers) applies to the installed kernels and names registered killer checks, every op has regimes,
conventions and a mutant, and mutants are judged by `verify mutants`, never registered as checks.  `verify
mutants` killing them all is test_mutants_slow.py."""
import pytest

from pathmdn_verify import cli
from pathmdn_verify.commands.mutants import every
from pathmdn_verify.platform.mutation import fla_package_dir, materialize

MUTANTS = every()      # the op records' and the layer records' planted bugs


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_applies_and_names_registered_killers(name, tmp_path, registry):
    m = MUTANTS[name]
    assert m.killers and all(k in registry for k in m.killers)
    assert m.description and "\n" not in m.description and f"mutant.{name}" not in registry
    root = materialize(m, tmp_path)
    assert m.new in (root / "fla" / m.path).read_text()


def test_every_op_has_regimes_conventions_and_a_mutant(registry):
    """The registry meta-test: every op of pathmdn_verify.ops has a regime check per pass and dtype, at least one
    convention check, and at least one planted bug that its own checks must catch (the bad-input tests of
    test_bad_input.py and test_bad_input_cli.py are parametrized over the same registry)."""
    from pathmdn_verify.ops import OPS
    for name, op in OPS.items():
        ids = {op.check_id(p, d, r) for p in op.passes for d in op.dtypes for r in op.regimes}
        assert op.regimes and op.passes and ids <= set(registry), name
        assert any(i.startswith(f"kernel.fla.{name}.convention.") for i in registry), name
        assert any(name in m.ops for m in MUTANTS.values()), f"{name}: no mutant names one of its checks"
        # its own code in the kernel package: verify bisect imports it, verify coverage counts its lines (looked
        # up as folders: importing fla here, without the interpreter, would break later in-process activations)
        assert op.package and all((fla_package_dir() / m.split(".", 1)[1].replace(".", "/")).is_dir()
                                  for m in op.package), name


def test_mutants_are_judged_by_their_command_not_run_as_checks(tmp_path, capsys):
    """No mutant is a registered check (`verify all` cannot run one); `verify mutants --list` names each with its
    killers; a selection that names no mutant is a usage error."""
    assert cli.main(["list", "-k", "mutant"]) == 2
    assert cli.main(["mutants", "--list", "-k", "path_kv_dims_swapped"]) == 0
    printed = capsys.readouterr().out
    assert "mutant.path_kv_dims_swapped" in printed and "killers: kernel." in printed
    assert cli.main(["mutants", "--id", "mutant.no_such_bug", "--device", "cpu"]) == 2


def _stand_in(tmp_path):
    from pathmdn_verify.platform.mutation import Mutant
    src = tmp_path / "src" / "fla"
    (src / "ops").mkdir(parents=True)
    (src / "__init__.py").write_text("__version__ = '0.0.1'\n")
    (src / "ops" / "k.py").write_text("x = 1\n")
    return src, Mutant("stand_in", "x is 2", "ops/k.py", "x = 1", "x = 2", ())


def _patched_source_files(tmp_path, monkeypatch=None) -> tuple[str, str, bool]:
    src, m = _stand_in(tmp_path)
    if monkeypatch is not None:     # the control: the patch written into the linked file, not a new one
        from pathlib import Path
        monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: None)
    root = materialize(m, tmp_path / "dest", source=src)
    linked = (root / "fla" / "__init__.py").stat().st_ino == (src / "__init__.py").stat().st_ino
    return (root / "fla" / "ops" / "k.py").read_text(), (src / "ops" / "k.py").read_text(), linked


def test_a_materialized_tree_links_the_source_and_never_writes_into_it(tmp_path, monkeypatch):
    """The copy's files are hard links (no 17 MB copied per mutant), and the patch reaches the copy alone."""
    patched, source, linked = _patched_source_files(tmp_path / "a")
    assert (patched, source, linked) == ("x = 2\n", "x = 1\n", True)
    patched, source, _ = _patched_source_files(tmp_path / "b", monkeypatch)
    assert source == "x = 2\n"       # written through the link: what the test above would catch
