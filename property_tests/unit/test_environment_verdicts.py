"""Old code is not judged as broken code.  A tree's own input conventions are read off it (fla's PaTH took w and
beta in q's dtype before 721a205a, and its kernels then meet a bf16 x fp32 tl.dot, which the compiler refuses as the
interpreter does: env.interpreter.mixed_dot_refused), and code written for another Triton is kind incompatible,
with the reason, never a kernel failure."""
import pytest
import torch

from pathmdn_verify.core.errors import triton_incompatibility
from pathmdn_verify.kernels import fla_ops


def since_721a205a(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None, use_cache=False):
    assert w.dtype == beta.dtype == torch.float32, 'w, beta should be float32 to preserve precision.'


def before_721a205a(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None, use_cache=False):
    return None


@pytest.mark.parametrize("entry, fp32_w", [(since_721a205a, True), (before_721a205a, False)])
def test_the_trees_w_dtype_is_read_off_its_entry_point(monkeypatch, entry, fp32_w):
    monkeypatch.setattr(fla_ops, "_path_entry", lambda: entry)
    fla_ops.path_takes_fp32_w.cache_clear()
    try:
        x = {"q": torch.ones(1, 4, 1, 16, dtype=torch.bfloat16), "w": torch.full((1, 4, 1, 16), 1 / 3),
             "beta": torch.full((1, 4, 1), 1 / 3)}
        taken = fla_ops.path_inputs_as_taken(x)
        assert fla_ops.path_takes_fp32_w() is fp32_w
        assert taken["w"].dtype == taken["beta"].dtype == (torch.float32 if fp32_w else torch.bfloat16)
        fp32 = fla_ops.path_inputs_as_taken({**x, "q": x["q"].float()})
        assert fp32["w"].dtype == torch.float32                         # fp32 q: nothing to round
    finally:
        fla_ops.path_takes_fp32_w.cache_clear()


def _raised(exc_type, text, cause=None):
    try:
        try:
            raise cause if cause is not None else RuntimeError("no cause")
        except BaseException:
            raise exc_type(text)
    except BaseException as exc:
        return exc


def test_a_name_the_installed_triton_lacks_is_incompatible():
    removed = _raised(AttributeError, "module 'triton.language' has no attribute 'make_block_ptr'")
    assert "written for another Triton than the installed" in triton_incompatibility(removed)
    wrapped = _raised(ImportError, "cannot import fla.ops.x", cause=removed)
    assert "make_block_ptr" in triton_incompatibility(wrapped)          # found through the causes
    from_triton = _raised(ImportError, "cannot import name 'autotune_v2' from 'triton.runtime' (...)")
    assert triton_incompatibility(from_triton) is not None


@pytest.mark.parametrize("exc", [
    _raised(AttributeError, "module 'fla.ops' has no attribute 'path_attn'"),     # the tree's own name
    _raised(AttributeError, "'NoneType' object has no attribute 'shape'"),        # a kernel's bug
    _raised(AssertionError, "Both operands must be same dtype. Got bf16 and fp32"),
])
def test_other_errors_stay_the_kernels(exc):
    assert triton_incompatibility(exc) is None


@pytest.mark.parametrize("source, grouped", [("H, HV = q.shape[2], v.shape[2]\n", True), ("H = q.shape[2]\n", False)])
def test_grouped_value_heads_are_read_off_the_tree(tmp_path, monkeypatch, source, grouped):
    """A tree whose GDN module never names HV (chunk before 8bcc1057) takes no grouped value heads: such a case is
    not run there, with the reason; one that names it is judged."""
    module = tmp_path / "chunk.py"
    module.write_text(f"def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,\n"
                      f"        output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None):\n"
                      f"    {source}")
    namespace = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    monkeypatch.setattr(fla_ops, "_entry", lambda *a: namespace["chunk_gated_delta_rule"])
    fla_ops.gdn_takes_grouped_values.cache_clear()
    try:
        x = {"k": torch.zeros(1, 4, 2, 16), "v": torch.zeros(1, 4, 4, 16)}
        why = fla_ops.gdn_unsupported(True)(x)
        assert (why is None) is grouped and (grouped or "no grouped value heads" in why)
        assert fla_ops.gdn_unsupported(True)({**x, "v": torch.zeros(1, 4, 2, 16)}) is None   # HV == H: always taken
    finally:
        fla_ops.gdn_takes_grouped_values.cache_clear()
