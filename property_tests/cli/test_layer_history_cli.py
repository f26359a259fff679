"""History explains, never excuses, through `verify layers --kernel-root` on stand-in trees (copies of the installed
fla edited at test time, nothing third-party committed):

  * a layer whose constructor takes conv_bias and ignores it fails (not a skip), and the fix history names the
    change where the tree's place in it says so; a layer whose constructor refuses conv_bias by its signature makes
    the case unsupported;
  * a call that reaches an optional dependency that is not installed (causal-conv1d) is unsupported for exactly the
    calls that reach it: the layer's other variants and the layers that never call it run and pass.
"""
import re
import shutil
from pathlib import Path

from helpers import by_id, run_cli

from pathmdn_verify import layers
from pathmdn_verify.layers import calls as C
from pathmdn_verify.platform.mutation import fla_package_dir

RECORDS = layers.load()
GDN_BIAS = C.case_ids("gdn", RECORDS["gdn"].calls, conv_bias=True, phase="eval", input="dense", q_len="short",
                      use_short_conv=True)[0]
PATH_BIAS = C.case_ids("path", RECORDS["path"].calls, conv_bias=True, phase="eval", input="dense", q_len="short")[0]
GDN_NO_CONV = C.case_ids("gdn", RECORDS["gdn"].calls, use_short_conv=False, phase="eval", q_len="short")[0]
FOX = "layer.fla.fox.pairwise.fp32.00"


def tree(tmp_path: Path, edits: dict) -> Path:
    """A copy of the installed fla (layers and models included) with {file: [(old, new, count)]} applied."""
    root = tmp_path / "tree"
    shutil.copytree(fla_package_dir(), root / "fla", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, changes in edits.items():
        f = root / "fla" / name
        text = f.read_text()
        for old, new, count in changes:
            assert text.count(old) == count, (name, old, text.count(old))
            text = text.replace(old, new)
        f.write_text(text)
    return root


def layers_run(root: Path, tmp_path: Path, *ids: str) -> dict:
    r, doc = run_cli("layers", *[a for i in ids for a in ("--id", i)], "--kernel-root", root, "--profile", "quick",
                     "--device", "cpu", "--workers", "2", "--no-cache", "--json", tmp_path / "r.json")
    assert doc is not None, r.stdout[-2000:] + r.stderr[-2000:]
    return by_id(doc)


def test_an_ignored_argument_fails_and_a_refused_one_is_unsupported(tmp_path):
    root = tree(tmp_path, {
        # GatedDeltaNet takes conv_bias and ignores it (fla before 4e719f2f)
        "layers/gated_deltanet.py": [("bias=conv_bias,", "bias=False,", 3),
                                     ("self.conv_bias = conv_bias", "self.conv_bias = False", 1)],
        # PaTHAttention's constructor has no conv_bias (and no **kwargs): refused by its signature
        "layers/path_attn.py": [("        conv_bias: bool = False,\n", "", 1), ("bias=conv_bias,", "bias=False,", 1)]})
    got = layers_run(root, tmp_path, GDN_BIAS, PATH_BIAS)
    gdn, path = got[GDN_BIAS], got[PATH_BIAS]
    assert gdn["status"] == "fail" and gdn["kind"] == "over_budget", gdn
    assert "holds no parameter q_conv1d.bias" in gdn["message"] and "swallowed or ignored" in gdn["message"]
    assert path["status"] == "skip" and path["kind"] == "unsupported", path
    assert "PaTHAttention's constructor takes no conv_bias (by its signature)" in path["message"]


def test_a_missing_optional_dependency_disables_only_the_calls_that_reach_it(tmp_path):
    """causal_conv1d() calls the CUDA package's function (None here: causal-conv1d is not installed), as fla's
    ShortConvolution did before 2025-06-05: GatedDeltaNet with short convolutions is unsupported, naming the
    package; without them, and ForgettingAttention (which has none), they pass."""
    ops = fla_package_dir() / "modules" / "causal_conv1d" / "ops.py"
    text = ops.read_text()
    head = re.search(r"\ndef causal_conv1d\(.*?\n    \"\"\".*?\"\"\"\n", text, re.S).group(0)
    root = tree(tmp_path, {"modules/causal_conv1d/ops.py": [(head, head + "    causal_conv1d_fn_cuda(x)\n", 1)]})
    got = layers_run(root, tmp_path, GDN_BIAS, GDN_NO_CONV, FOX)
    assert got[GDN_BIAS]["status"] == "skip" and got[GDN_BIAS]["kind"] == "unsupported", got[GDN_BIAS]
    assert "needs causal_conv1d (an optional dependency, not installed" in got[GDN_BIAS]["message"]
    assert got[GDN_NO_CONV]["status"] == "pass", got[GDN_NO_CONV]["message"]
    assert got[FOX]["status"] == "pass", got[FOX]["message"]
