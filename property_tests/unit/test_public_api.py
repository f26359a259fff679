"""What an op author imports is the public API (pathmdn_verify's __all__) and nothing else: plugins/toy_op.py, the
stand-in for an op defined outside the toolkit, imports only `pathmdn_verify` (besides torch, hypothesis and the
standard library) and uses only its public names; each public part of a record refuses a malformed value when made;
`import pathmdn_verify` imports nothing of the toolkit until a name is used.  Each rule has a planted control."""
import ast
import dataclasses
import sys
from pathlib import Path

import pytest

import pathmdn_verify as pv

HERE = Path(__file__).resolve().parents[1]
TOY = HERE / "plugins" / "toy_op.py"
OUTSIDE = {"torch", "hypothesis"}          # what an outside op may import beside the toolkit and the standard library


def foreign(source: str) -> list[str]:
    """What source imports or uses of the toolkit beyond its public API: an import of another module of it, a
    non-public name imported from it or read off it (`pv.X`, X not in pathmdn_verify.__all__), and any import
    that is neither the toolkit, OUTSIDE nor the standard library."""
    tree, found, aliases = ast.parse(source), [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "pathmdn_verify":
                    aliases.add(a.asname or a.name)
                elif a.name.split(".")[0] not in OUTSIDE | set(sys.stdlib_module_names) or \
                        a.name.startswith("pathmdn_verify."):
                    found.append(f"import {a.name}")
        elif isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            if node.module == "pathmdn_verify":
                found += [f"from pathmdn_verify import {a.name}" for a in node.names if a.name not in pv.__all__]
            elif node.level or top == "pathmdn_verify" or top not in OUTSIDE | set(sys.stdlib_module_names):
                found.append(f"from {'.' * node.level}{node.module} import ...")
    found += [f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Name) and n.value.id in aliases and n.attr not in pv.__all__]
    return found


def test_the_toy_op_uses_the_public_api_alone():
    source = TOY.read_text()
    assert "pv.declare_op(pv.OpRecord(" in source       # it is the test of the claim: it does add an op
    assert foreign(source) == []


@pytest.mark.parametrize("planted", [
    "from pathmdn_verify.checks.kernel_checks import declare\n",
    "import pathmdn_verify.core.records\n",
    "from pathmdn_verify import ops\n",
    "import pathmdn_verify as pv\npv.ops.OPS\n",
    "import pathmdn_verify as pv\nx = pv._LAZY\n",
    "import fla\n",
    "from kernels import fla_ops\n",
    "from . import helpers\n",
])
def test_an_internal_import_or_name_is_found(planted):
    """The controls: each way past the public API, planted in a copy of the toy."""
    assert foreign(TOY.read_text() + planted) != []


def test_every_public_name_resolves():
    for name in pv.__all__:
        assert getattr(pv, name) is not None, name
    with pytest.raises(AttributeError):
        pv.KernelOp        # noqa: B018   one name per thing: the record type is OpRecord


def test_importing_the_package_imports_nothing_of_the_toolkit():
    """Its top level imports only the standard library (the public names load on first use)."""
    def toplevel_imports(source: str) -> set[str]:
        tree = ast.parse(source)
        return {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names} | \
            {(n.module or ".").split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom)}
    source = Path(pv.__file__).read_text()
    assert toplevel_imports(source) <= set(sys.stdlib_module_names)
    assert not toplevel_imports(source + "from pathmdn_verify.ops import OPS\n") <= set(sys.stdlib_module_names)


def _fox():
    return pv.op_record("forgetting_attn")


@pytest.mark.parametrize("make, says", [
    (lambda: dataclasses.replace(_fox(), conventions={"scale_default": "1/sqrt(D)"}), "conventions must be"),
    (lambda: dataclasses.replace(_fox(), probes=("scale_default",)), "probes must be"),
    (lambda: dataclasses.replace(_fox(), stages={"decode": lambda *a: []}), "stages must map"),
    (lambda: dataclasses.replace(_fox(), regression_cases={"fwd.fp16.typical": []}), "regression case key"),
    (lambda: dataclasses.replace(_fox(), mutants=("a mutant's name",)), "mutants must be"),
    (lambda: dataclasses.replace(_fox(), entry_params={"scale": 1.0}), "entry_params"),
    (lambda: pv.Conventions(scale_default=""), "conventions"),
    (lambda: pv.Conventions(scale_default="1", dtypes=("fp16",)), "conventions"),
    (lambda: pv.Decode(print, print, print, "", ("typical",), print), "decode"),
    (lambda: pv.Decode(print, print, print, "o", (), print), "decode"),
    (lambda: dataclasses.replace(_fox().structure, lengths={"fwd": {"block": 0}}), "structure: lengths"),
    (lambda: dataclasses.replace(_fox().structure, heads=((3, 2),)), "structure: heads"),
    (lambda: dataclasses.replace(_fox().structure, build=None), "structure: build"),
    (lambda: pv.Mutant("Bad Name", "d", "ops/x.py", "a", "b", ("kernel.fla.x.fwd.fp32.y",)), "name must be"),
    (lambda: pv.Mutant("m", "d", "/abs/x.py", "a", "b", ("kernel.fla.x.fwd.fp32.y",)), "path"),
    (lambda: pv.Mutant("m", "d", "ops/x.py", "a", "a", ("kernel.fla.x.fwd.fp32.y",)), "old must be"),
    (lambda: pv.Mutant("m", "d", "ops/x.py", "a", "b", "kernel.fla.x.fwd.fp32.y"), "killers must be"),
    (lambda: pv.Mutant("m", "d", "ops/x.py", "a", "b", ("kernel.fla.x.fwd.fp16.y",)), "killer"),
    (lambda: pv.Stage("", "fn", pv.Precision.of("fp32")), "stage"),
    (lambda: pv.Stage("s", "fn", "fp32"), "stage"),
    (lambda: pv.Stage("s", "fn", pv.Precision.of("fp32"), pass_="forward"), "stage"),
])
def test_a_malformed_part_of_a_record_is_refused_when_made(make, says):
    with pytest.raises(ValueError, match=says):
        make()


def test_the_well_formed_parts_are_made():
    """The controls of the refusals above: the same parts, well formed."""
    fox = _fox()
    assert dataclasses.replace(fox, name="t_public_ok").name == "t_public_ok"
    assert dataclasses.replace(fox.structure, heads=((4, 2),)).heads == ((4, 2),)
    assert pv.Mutant("m", "d", "ops/x.py", "a", "b", ("kernel.fla.x.fwd.fp32.y",)).ops == {"x"}
    assert pv.Stage("s", "fn", pv.Precision.of("fp32")).pass_ == "fwd"
    assert pv.Conventions(scale_default="1/sqrt(D)", dtypes=("bf16",), head_dims=(16,)).dtypes == ("bf16",)


def test_declare_op_takes_a_record_only():
    with pytest.raises(TypeError, match="OpRecord"):
        pv.declare_op({"name": "x"})
    with pytest.raises(ValueError, match="no op 'nope'"):
        pv.op_record("nope")
