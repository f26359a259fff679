"""fla refuses the gated chunk backward on Hopper with Triton >= 3.4.0 and < 3.7.1 (its guard in
fla.ops.common.chunk_o.chunk_bwd_dqkwg, issue #640 of fla).  The toolkit decides that refusal before anything
launches, by fla's own flags, and raises fla's own exception: on this CPU the flags are planted as a Hopper GPU's.
The controls: Triton 3.7.1, a backend of fla's 'common' registry that takes the call, a forward-only call, and the
flags as this CPU has them each run the kernel."""
import pytest
import torch

from pathmdn_verify.kernels import fla_ops

fla_chunk_o = None      # fla.ops.common.chunk_o, imported with the interpreter on (the fixture below)


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    """fla imported only with the interpreter on (never at collection: later tests of this process need it)."""
    global fla_chunk_o
    from pathmdn_verify.platform import fidelity
    fidelity.prepare_cpu_kernels()
    fla_chunk_o = pytest.importorskip("fla.ops.common.chunk_o")


def _inputs(grad: bool) -> dict:
    gen = torch.Generator().manual_seed(0)
    B, T, H, D = 1, 4, 1, 8
    x = dict(q=torch.randn(B, T, H, D, generator=gen), k=torch.nn.functional.normalize(torch.randn(B, T, H, D,
             generator=gen), dim=-1), v=torch.randn(B, T, H, D, generator=gen),
             g=-torch.rand(B, T, H, generator=gen), beta=torch.rand(B, T, H, generator=gen))
    return {n: t.requires_grad_(grad) for n, t in x.items()}


def _plant(monkeypatch, above_371=False, taken=False, launches=None):
    monkeypatch.setattr(fla_chunk_o, "IS_NVIDIA_HOPPER", True)
    monkeypatch.setattr(fla_chunk_o, "TRITON_ABOVE_3_4_0", True)
    monkeypatch.setattr(fla_chunk_o, "TRITON_ABOVE_3_7_1", above_371)
    import fla.backends
    registry = fla.backends._load_operation_registry("common")
    monkeypatch.setattr(registry, "get_active", lambda: object() if taken else None)
    if launches is not None:                    # the entry point counts its calls instead of launching
        monkeypatch.setattr(fla_ops, "_call", lambda fn, **kw: launches.append(fn) or (kw["v"] * 1, None))


def test_the_refusal_is_fla_own_and_comes_before_any_launch(monkeypatch):
    launches = []
    _plant(monkeypatch, launches=launches)
    with pytest.raises(RuntimeError, match="#640") as raised:
        fla_ops.gated_delta_rule(**_inputs(grad=True), chunk=True)
    assert launches == []
    last = raised.tb
    while last.tb_next is not None:
        last = last.tb_next
    assert last.tb_frame.f_code.co_filename == fla_chunk_o.__file__      # raised by fla's guard itself


@pytest.mark.parametrize("plant", [dict(above_371=True), dict(taken=True)])
def test_where_fla_would_run_the_backward_it_runs(monkeypatch, plant):
    launches = []
    _plant(monkeypatch, launches=launches, **plant)
    fla_ops.gated_delta_rule(**_inputs(grad=True), chunk=True)
    assert len(launches) == 1


def test_a_forward_is_never_refused(monkeypatch):
    launches = []
    _plant(monkeypatch, launches=launches)
    fla_ops.gated_delta_rule(**_inputs(grad=False), chunk=True)
    with torch.no_grad():
        fla_ops.gated_delta_rule(**_inputs(grad=True), chunk=True)
    fla_ops.gated_delta_rule(**_inputs(grad=True), chunk=False)        # the fused recurrent path has no such guard
    assert len(launches) == 3


def test_on_this_cpu_fla_flags_refuse_nothing():
    assert fla_ops.gdn_chunk_backward_refusal() is None
