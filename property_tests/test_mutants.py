"""Proof of teeth: every planted bug of the op and layer records (pathmdn_verify.ops, pathmdn_verify.layers) applies
to the installed kernels and names registered killer checks, and `verify mutants` kills every one at the ci profile;
mutants are judged by that command, never registered as checks; --repeat reports per check how many seeds failed."""
import pytest
from helpers import ids, load, run_cli

from pathmdn_verify import cli
from pathmdn_verify.commands.mutants import every
from pathmdn_verify.platform.mutation import fla_package_dir, materialize

MUTANTS = every()      # the op records' and the layer records' planted bugs

pytestmark = pytest.mark.slow     # end to end: subprocesses over copies of fla (the slow tier)


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
    property_tests/test_bad_input.py are parametrized over the same registry)."""
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


def test_every_mutant_is_killed(tmp_path):
    """The full `verify mutants` run at the ci profile (about 3 minutes on a quiet 2-core CPU)."""
    r, doc = run_cli("mutants", "--device", "cpu", "--json", tmp_path / "m.json")
    assert r.returncode == 0 and doc is not None, r.stdout[-4000:] + r.stderr[-2000:]
    assert ids(doc) == [f"mutant.{n}" for n in MUTANTS]
    for c in doc["checks"]:
        if c["status"] == "skip":     # no killer runs on the CPU interpreter here: said so, with the reason
            assert c["kind"] == "interpreter_gap" and c["message"].startswith("no killer runs here: "), c
            assert all(k in c["message"] for k in MUTANTS[c["id"][7:]].killers), c
            continue
        assert c["status"] == "pass" and c["details"]["killed_by"] in MUTANTS[c["id"][7:]].killers, c["message"]
    assert "mutation self-test" in r.stdout and "path_kv_dims_swapped" in r.stdout


PLANTED = ["test.planted.odd_seeds"]     # in planted_checks.py


def test_mutants_are_judged_by_their_command_not_run_as_checks(tmp_path, capsys):
    """No mutant is a registered check (`verify all` cannot run one); `verify mutants --list` names each with its
    killers; a selection that names no mutant is a usage error."""
    assert cli.main(["list", "-k", "mutant"]) == 2
    assert cli.main(["mutants", "--list", "-k", "path_kv_dims_swapped"]) == 0
    printed = capsys.readouterr().out
    assert "mutant.path_kv_dims_swapped" in printed and "killers: kernel." in printed
    assert cli.main(["mutants", "--id", "mutant.no_such_bug", "--device", "cpu"]) == 2


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
