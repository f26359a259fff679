"""Implementations of anyone: registration through the public API refuses a bad declaration at once; what an
implementation does not offer (a dtype, a pass, an optional input, GQA, a head dim) is declared; expected-failure
entries name an implementation and a version range; op records are validated when made.  The checks of an
implementation run (pathmdn_verify.check) in cli/test_impls_cli.py, with `exact` (the float64 oracle) standing in
for a kernel and the fixture that forgets a test's registrations."""
import dataclasses
import sys

import pytest
import torch

import pathmdn_verify as pv
from pathmdn_verify.core.registry import Result
from pathmdn_verify.references.path_oracle import path_attn as oracle
from pathmdn_verify.run import xfail_list


@pytest.fixture(autouse=True)
def registrations_end_with_the_test():
    """The implementations a test registers, and their checks, are gone after it: a later test in this process
    that goes through the registry (test_ops.py: every searched check id) sees the built-in checks only."""
    from pathmdn_verify.checks import kernel_checks
    from pathmdn_verify.core.registry import REGISTRY
    from pathmdn_verify.ops import impls
    before = set(impls.IMPLS)
    yield
    for name, op in set(impls.IMPLS) - before:
        del impls.IMPLS[name, op]
        kernel_checks._DECLARED.discard((name, op))
        for cid in [c for c in REGISTRY if c.startswith(f"kernel.{name}.{op}.")]:
            del REGISTRY[cid]


def exact(q, k, v, w, beta, g=None, scale=None):
    """A PaTH 'kernel' that is the float64 oracle (fla's gate convention), rounded to q's dtype; it takes no
    cu_seqlens (no varlen)."""
    g = None if g is None else g.double()
    return oracle(q.double(), k.double(), v.double(), w.double(), beta.double(), g, scale=scale,
                  gate_scaled=True).to(q.dtype)


def test_the_public_api_names_each_op_and_its_call():
    specs = pv.op_specs()
    assert {"path_attn", "forgetting_attn", "mdn_chunk64", "mdn_recurrent", "gdn_chunk", "gdn_recurrent"} <= set(specs)
    path = specs["path_attn"]
    assert path.signature == "path_attn(q, k, v, w, beta, g=None, cu_seqlens=None, scale=None) -> o"
    assert "w [B, T, H, D] fp32" in path.layout and path.outputs == ("o",)


@pytest.mark.parametrize("declared, says", [  # says: a regular expression
    (dict(name="fla", fp32_dot="ieee"), "not 'fla'"),
    (dict(name="Mine", fp32_dot="ieee"), "lower-case"),
    (dict(name="t_dot", fp32_dot="fp32"), r"fp32_dot='fp32'"),
    (dict(name="t_dtype", fp32_dot="ieee", dtypes=("fp16",)), r"dtypes \['fp16'\]"),
    (dict(name="t_pass", fp32_dot="ieee", passes=("decode",)), r"passes \['decode'\]"),
])
def test_a_bad_declaration_is_refused_when_made(declared, says):
    with pytest.raises(ValueError, match=says):
        pv.implement("path_attn", exact, **declared)


def test_a_function_that_lacks_a_required_input_is_refused():
    with pytest.raises(ValueError, match="lacks w"):
        pv.implement("path_attn", lambda q, k, v, beta, scale=None: q, name="t_no_w", fp32_dot="ieee")
    with pytest.raises(ValueError, match="no op 'path'"):
        pv.implement("path", exact, name="t_no_op", fp32_dot="ieee")


def test_capabilities_follow_the_declaration():
    impl = pv.implement("path_attn", exact, name="t_caps", fp32_dot="ieee", gqa=False, head_dims=(16,))
    x = {"q": torch.zeros(1, 8, 2, 16), "k": torch.zeros(1, 8, 1, 16), "v": torch.zeros(1, 8, 1, 16),
         "cu_seqlens": None, "g": None}
    assert "does not offer GQA" in impl.unsupported(x)
    x["q"] = x["q"][:, :, :1]
    assert impl.unsupported(x) is None                                 # the control: what it takes
    assert "takes no cu_seqlens" in impl.unsupported({**x, "cu_seqlens": torch.tensor([0, 3, 8])})
    assert "head dims (16,)" in impl.unsupported({**x, "v": torch.zeros(1, 8, 1, 32)})
    assert impl.record.offered("bwd", "bf16") is None and impl.record.offered("decode", "fp32") is not None


def test_an_op_record_is_validated_when_made():
    from pathmdn_verify.ops import OPS
    base = OPS["path_attn"]
    assert dataclasses.replace(base, name="t_ok").name == "t_ok"       # the control: a valid record is made
    for change, says in ((dict(passes=("fwd", "decode")), "passes"), (dict(grad_inputs=("z",)), "grad_inputs"),
                         (dict(name="Bad Name"), "name"), (dict(dot="fp16"), "dot"),
                         (dict(budget_factor={"fwd": 4.0}), "budget_factor")):
        with pytest.raises(ValueError, match=says):
            dataclasses.replace(base, **change)


@pytest.mark.parametrize("listed, identity, matches", [
    ("fla >=0.6.0", "fla 0.6.0", True), ("fla >=0.6.0", "fla 0.6.2@0123456789ab", True),
    ("fla >=0.6.0", "fla 0.5.2", False), ("fla 0.6.0", "fla 0.6.1", False), ("fla", "fla 0.3.2", True),
    ("fla 0.6.0@0123456", "fla 0.6.0@0123456789ab", True), ("fla 0.6.0@0123456", "fla 0.6.0", False),
    ("my_impl", "my_impl", True), ("my_impl >=1.0", "my_impl 1.2", True), ("my_impl", "fla 0.6.0", False),
])
def test_entries_name_versions_and_ranges(listed, identity, matches):
    assert xfail_list.package_matches(listed, identity) is matches


def test_an_entry_of_an_implementation_applies_to_its_checks_only(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('[[xfail]]\nid = "kernel.my_impl.path_attn.fwd.fp32.beta_two"\npackages = ["my_impl >=1.0"]\n'
                 'kinds = ["over_budget"]\nregime = "r"\nmeasured = "m"\ncause = "c"\n')
    scope = xfail_list.Scope("fla 0.6.0", "cpu", "ci", impls=(("my_impl", "my_impl 1.1"),))
    assert "kernel.my_impl.path_attn.fwd.fp32.beta_two" in xfail_list.applicable(scope, f)
    older = dataclasses.replace(scope, impls=(("my_impl", "my_impl 0.9"),))
    assert not xfail_list.applicable(older, f)                           # outside its range
    result = xfail_list.apply("kernel.my_impl.path_attn.fwd.fp32.beta_two", Result("fail", 2.0, 1.0, "m"), scope, f)
    assert result.status == "xfail" and result.details["expected_failure"]["list"] == str(f)


def test_without_the_layers_extra_a_layer_check_is_a_skip(tmp_path, monkeypatch):
    """fla-core alone (ops, no layers or models folder) on the import path: every layer check says how to install
    the extra, as a skip; with flash-linear-attention installed, nothing is missing."""
    from pathmdn_verify.checks import layer_checks
    assert layer_checks._missing_package() is None                       # the control: installed here
    (tmp_path / "fla" / "ops").mkdir(parents=True)
    (tmp_path / "fla" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fla", raising=False)               # found again, on the path
    assert "fla.layers is not installed: pip install 'pathmdn-verify[layers]'" in layer_checks._missing_package()
