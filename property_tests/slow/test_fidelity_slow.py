"""The Triton-interpreter fidelity layer (verify/platform/fidelity.py) and its canaries, in child processes.

TRITON_INTERPRET and the patches are process-global, and another test module may already have
imported triton, so everything that runs a kernel runs in a child process:
  1. every env.interpreter.* canary with the whole layer on (fp32_dot tf32 and ieee), then with each
     part switched off in turn (fidelity.restore() + activate(parts=...) in the same child);
  2. fla's PaTH, FoX and GDN kernels end to end at a tiny size against the float64 references;
  3. activation refused after triton was imported without the interpreter; the bf16 constants of Triton's
     own builder, the performance and lowering canaries' negative controls, interpreter gaps told from
     kernel errors.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from test_fidelity import PARTS


def run_child(code: str, timeout: float = 300) -> dict:
    """Run code in a fresh interpreter; it prints one JSON line last."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"child failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------
# canaries, layer on and each part off

# which canaries must turn red when a part is off
RED_WHEN_OFF = {
    "bf16_dot": ["env.interpreter.bf16_dot"],
    "bf16_round": ["env.interpreter.bf16_round", "env.interpreter.bf16_cast_other"],
    "autotune": ["env.interpreter.autotune"],
    "tf32": ["env.interpreter.tf32_dot"],
    "dot_order": ["env.interpreter.dot_order"],
    "numpy_index": ["env.interpreter.numpy_index", "env.interpreter.loop_index"],   # a tensor loop bound
    "loop_index": ["env.interpreter.loop_index"],
    "bf16_arith": ["env.interpreter.bf16_arith", "env.interpreter.bf16_scalar"],   # x * 0.3 is a bf16 multiply
    "bf16_scalar": ["env.interpreter.bf16_scalar"],
    "tl_alias": ["env.interpreter.tl_alias"],
    "torch_cpu_device": ["env.interpreter.torch_cpu_device"],
    "lang_cache": ["env.interpreter.lang_cache"],
    "np_dtypes": ["env.interpreter.np_dtypes"],
    "lazy_types": ["env.interpreter.lazy_types"],
    "device_calls": ["env.interpreter.device_calls"],
    "bounds": ["env.interpreter.bounds"],
    "bf16_guard": ["env.interpreter.bf16_guard"],
    "fp32_fma": ["env.interpreter.fp32_fma"],
}

CANARY_CHILD = """
import json, warnings
warnings.filterwarnings("ignore")
from pathmdn_verify.platform import fidelity
import pathmdn_verify.checks.fidelity_canaries  # registers; defines no kernel
from pathmdn_verify.core.registry import REGISTRY, Context
FUNCTIONAL = set(json.loads(%r))   # the canaries the part-off runs judge (RED_WHEN_OFF)
runs = [("on", list(fidelity.PARTS), "tf32"), ("on_ieee", list(fidelity.PARTS), "ieee")]
runs += [("off:" + p, [q for q in fidelity.PARTS if q != p], "tf32") for p in fidelity.PARTS]
out = {}
for label, parts, mode in runs:
    fidelity.restore()
    fidelity.activate(fp32_dot=mode, parts=parts)
    ctx = Context(device="cpu", fp32_dot=mode)
    for cid, c in REGISTRY.items():
        if not cid.startswith("env.interpreter.") or (label.startswith("off:") and cid not in FUNCTIONAL):
            continue
        try:
            r = c.run(ctx)
            out[label + "|" + cid] = [r.status, r.message]
        except Exception as exc:
            out[label + "|" + cid] = ["error", repr(exc)]
    out[label + "|active"] = fidelity.active_parts()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def canaries():
    """Every canary with the whole layer on (tf32, ieee); with each part off, the functional ones only."""
    return run_child(CANARY_CHILD % json.dumps(sorted({c for ids in RED_WHEN_OFF.values() for c in ids})))


def canary_ids():
    import pathmdn_verify.checks.fidelity_canaries  # noqa: F401
    from pathmdn_verify.core.registry import REGISTRY
    return sorted(c for c in REGISTRY if c.startswith("env.interpreter."))


def test_import_is_cheap():
    """Importing the family module defines no kernel, sets no env var, imports no triton."""
    out = run_child("""
        import json, os, sys
        import pathmdn_verify.checks.fidelity_canaries
        print(json.dumps({"triton": "triton" in sys.modules, "env": os.environ.get("TRITON_INTERPRET")}))
    """)
    assert out == {"triton": False, "env": None}


@pytest.mark.parametrize("cid", canary_ids())
def test_canary_passes_with_layer_on(canaries, cid):
    status, msg = canaries["on|" + cid]
    assert status == "pass", msg


@pytest.mark.parametrize("cid", canary_ids())
def test_canary_passes_in_ieee_mode(canaries, cid):
    """fp32_dot="ieee": tf32_dot then expects exact fp32 dots; everything else is unchanged."""
    status, msg = canaries["on_ieee|" + cid]
    assert status == "pass", msg


@pytest.mark.parametrize("part", PARTS)
def test_canary_turns_red_with_part_off(canaries, part):
    assert part not in canaries[f"off:{part}|active"]["parts"]
    for cid in RED_WHEN_OFF[part]:
        status, msg = canaries[f"off:{part}|{cid}"]
        assert status in ("fail", "error"), f"{cid} stayed {status} with {part} off: {msg}"
    # the other functional canaries stay green
    others = [c for p, ids in RED_WHEN_OFF.items() if p != part for c in ids if c not in RED_WHEN_OFF[part]]
    for cid in others:
        status, msg = canaries[f"off:{part}|{cid}"]
        assert status == "pass", f"{cid} went {status} with only {part} off: {msg}"


def test_active_parts_recorded(canaries):
    on = canaries["on|active"]
    assert on["parts"] == list(PARTS) and on["fp32_dot"] == "tf32" and on["triton"].startswith("3.6.")
    assert "tf32" not in canaries["on_ieee|active"]["parts"]


def test_activation_refused_after_triton_import():
    out = run_child("""
        import json, triton
        from pathmdn_verify.platform import fidelity
        from pathmdn_verify.core.errors import UsageError
        try:
            fidelity.activate(); print(json.dumps({"raised": None}))
        except UsageError as e:
            print(json.dumps({"raised": str(e)}))
    """)
    assert out["raised"] and "too late" in out["raised"] and "triton.language" in out["raised"]


BF16_CONSTANTS_CHILD = """
import json, re
import numpy as np
from triton._C.libtriton import ir
from pathmdn_verify.core.bits import f64_to_bf16_bits
from pathmdn_verify.platform.fidelity import bf16_constant_bits
values = [1e-7, 5e-7, 1.5e-6, 3e-6, 0.3, 1 / 3, 1.00390625, 1.01171875, -2.5e-4, 123456.789, 1e30]
values += list(np.random.default_rng(0).standard_normal(40) * np.exp2(np.arange(40) % 24 - 12))
ctx = ir.context()
ir.load_dialects(ctx)
b = ir.builder(ctx)
mod = b.create_module()
fn = b.get_or_insert_function(mod, "f", b.get_function_ty([], []), "public", False)
mod.push_back(fn)
b.set_insertion_point_to_start(fn.add_entry_block())
for v in values:
    b.get_bf16(float(v))
b.ret([])
printed = [float(x) for x in re.findall(r"arith.constant ([-+.e0-9]+) : bf16", str(mod))]
got = [int(f64_to_bf16_bits(np.array([p]))[0]) for p in printed]     # 7 digits name a bf16 exactly
print(json.dumps({"printed": printed, "got": got, "want": [int(bf16_constant_bits(v)[0]) for v in values]}))
"""


def test_bf16_constants_as_the_compiler_builds_them():
    """bf16_scalar against Triton's own compiled builder (ir.cc get_bf16, no GPU needed): the constants
    it emits for a Python float, read back from the printed IR, equal bf16_constant_bits bit for bit.
    In a child: importing triton here, without the interpreter, would make later in-process activations
    of the fidelity layer refuse (test_bad_input run after this file failed 9 tests that way)."""
    out = run_child(BF16_CONSTANTS_CHILD)
    assert out["got"] == out["want"]
    assert out["printed"][0] == 0.0 and out["printed"][1] == 0.0        # std::to_string prints 0.000000


def test_performance_canaries_catch_a_wrong_answer():
    """np_dtypes and lazy_types are performance patches: their canaries compare with the originals, so a
    table that answers a wrong dtype, or a name read wrong, turns them red (not only a missing patch)."""
    out = run_child("""
        import json, warnings
        warnings.filterwarnings("ignore")
        import numpy as np
        from pathmdn_verify.platform import fidelity
        fidelity.activate()
        import triton.language as tl
        from triton.runtime import interpreter
        import pathmdn_verify.checks.fidelity_canaries as canaries
        from pathmdn_verify.core.registry import Context
        ctx = Context(device="cpu")
        good = [canaries.np_dtypes(ctx).status, canaries.lazy_types(ctx).status]
        patched = interpreter._get_np_dtype
        interpreter._get_np_dtype = lambda t: np.dtype(np.float16) if t == tl.bfloat16 else patched(t)
        tl.core.tuple_type.name = property(lambda self: "[]")
        bad = [canaries.np_dtypes(ctx).status, canaries.lazy_types(ctx).status]
        print(json.dumps({"good": good, "bad": bad}))
    """)
    assert out == {"good": ["pass", "pass"], "bad": ["fail", "fail"]}


def test_bf16_lowering_canary_rejects_the_unfused_model():
    """Negative control: expecting x*y + x to compile to mul.bf16 + add.bf16 (two roundings) fails."""
    out = run_child("""
        import json, warnings
        warnings.filterwarnings("ignore")
        from pathmdn_verify.platform import fidelity
        fidelity.activate()
        import pathmdn_verify.checks.fidelity_canaries as I
        from pathmdn_verify.core.registry import Context
        I._BF16_PTX[9] = {"mul.bf16", "add.bf16"}
        r = I.bf16_lowering(Context(device="cpu"))
        print(json.dumps([r.status, r.details["x * y + x"]]))
    """)
    assert out == ["fail", ["fma.rn.bf16"]]


def test_fp32_fma_lowering_canary_rejects_the_unfused_model():
    """Negative control: expecting x*y - z to compile with the product rounded first (no fma.rn.f32) fails."""
    out = run_child("""
        import json, warnings
        warnings.filterwarnings("ignore")
        from pathmdn_verify.platform import fidelity
        fidelity.activate()
        import pathmdn_verify.checks.fidelity_canaries as I
        from pathmdn_verify.core.registry import Context
        I._FUSED[0] = False
        r = I.fp32_fma_lowering(Context(device="cpu"))
        print(json.dumps([r.status, r.details["x * y - z"]]))
    """)
    assert out == ["fail", ["fma.rn.f32"]]


def test_fp32_fma_follows_tritons_switch():
    """TRITON_DEFAULT_FP_FUSION=0 (the GPU then rounds every product): the emulation rounds too, and the canary,
    which expects the default, fails."""
    out = run_child("""
        import json, os, warnings
        warnings.filterwarnings("ignore")
        os.environ["TRITON_DEFAULT_FP_FUSION"] = "0"
        from pathmdn_verify.platform import fidelity
        fidelity.activate()
        import pathmdn_verify.checks.fidelity_canaries as I
        from pathmdn_verify.core.registry import Context
        r = I.fp32_fma(Context(device="cpu"))
        print(json.dumps([r.status, r.details["x * y - z"]]))
    """)
    assert out == ["fail", "rounded"]


GAP_CHILD = """
import json, warnings
warnings.filterwarnings("ignore")
from pathmdn_verify.core import errors
from pathmdn_verify.platform import fidelity
fidelity.activate(parts=[p for p in fidelity.PARTS if p != "bf16_scalar"])
import torch, triton, triton.language as tl

@triton.jit
def k(x_ptr, o_ptr, N: tl.constexpr, CASE: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r)
    if CASE == 0:
        tl.store(o_ptr, tl.sum(x, 0))                     # bf16 reduction: guard refuses
    elif CASE == 1:
        tl.store(o_ptr + r, x * 0.5)                      # bf16 * float: builder.get_bf16 (part off)
    elif CASE == 2:
        tl.store(o_ptr + r, tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                                      is_pure=True, pack=1))
    elif CASE == 3:
        tl.store(o_ptr + x, x)                            # kernel error: a pointer plus a float offset
    elif CASE == 4:
        tl.static_assert(N == 3, "InterpreterBuilder mentioned in a kernel's own message")
    else:
        i = 3
        tl.store(o_ptr + r, x * i.to(tl.float32))        # a Python int has no .to: the kernel's error

out = {}
for case, dtype in [(0, torch.bfloat16), (1, torch.bfloat16), (2, torch.float32), (3, torch.float32),
                    (4, torch.float32), (5, torch.float32)]:
    x = torch.ones(16, dtype=dtype)
    try:
        k[(1,)](x, torch.zeros(16, dtype=dtype), 16, case)
        out[case] = ["ran", None]
    except Exception as exc:
        out[case] = [errors.is_interpreter_gap(exc), repr(exc)[:300]]
out["plain"] = errors.is_interpreter_gap(ValueError("'InterpreterBuilder' object has no attribute 'x'"))
def no_backward():                                        # a package's own NotImplementedError (a fork's
    raise NotImplementedError("Backward pass is not implemented yet")   # recurrent backward): not a gap
try:
    no_backward()
except NotImplementedError as exc:
    out["plain_nie"] = errors.is_interpreter_gap(exc)
print(json.dumps(out))
"""


def test_is_interpreter_gap_on_real_errors():
    """Real interpreter errors are gaps (guard refusal, missing builder method, inline asm); kernel
    errors and look-alike messages are not."""
    out = run_child(GAP_CHILD)
    assert [out[str(c)][0] for c in range(6)] == [True, True, True, False, False, False], out
    assert "get_bf16" in out["1"][1] and "inline_asm" in out["2"][1], out
    assert out["plain"] is False and out["plain_nie"] is False


GDN_CHILD = """
import json, warnings
warnings.filterwarnings("ignore")
from pathmdn_verify.core import errors
from pathmdn_verify.platform import fidelity
fidelity.prepare_cpu_kernels()
from pathmdn_verify.core.engine import measure
from pathmdn_verify.ops.gdn_ops import GdnCase
from pathmdn_verify.ops import OPS
from pathmdn_verify.core.precision import Precision
op, out = OPS["gdn_chunk"], {}
for dt in ("fp32", "bf16"):
    prec = Precision.of(dt, op.dot or "tf32")
    x = op.inputs(GdnCase(T=64, Dk=32, Dv=32, gate="near1", seed=0), prec.torch_dtype)
    out[dt] = {v.name: v.err_rel for v in measure(op, "fwd", x, prec, 0)}
    try:
        out[dt].update({v.name: v.err_rel for v in measure(op, "bwd", x, prec, 0)})
    except Exception as exc:
        out[dt]["backward_gap"] = errors.is_interpreter_gap(exc)
print(json.dumps(out))
"""


def test_fla_gdn_chunk_runs():
    """fla's GDN chunk kernels under the layer (loop_index, bf16_arith): fp32 forward and backward at
    TF32 level against the float64 recurrence, bf16 forward at bf16 level; the bf16 backward's bf16
    reduction (chunk_o.py, tl.sum(b_h * b_dh)) is refused as an interpreter gap, not run wrongly."""
    out = run_child(GDN_CHILD)
    print("\nfla GDN chunk under the interpreter, normwise relative error vs float64:", json.dumps(out, indent=1))
    assert len(out["fp32"]) >= 6, out                          # outputs and the gradients of q, k, v, g, beta
    for key, err in out["fp32"].items():
        assert 1e-5 < err < 1e-2, (key, out)                   # TF32 level: about 1.5e-3 measured at T=256
    assert 1e-4 < out["bf16"]["o"] < 2e-2 and out["bf16"]["S_T"] < 2e-2, out
    assert out["bf16"]["backward_gap"] is True, out


# ------------------------------------------------------------------------------------------------
# end to end: fla PaTH and FoX under the interpreter vs float64

E2E_CHILD = """
import json, time, warnings
warnings.filterwarnings("ignore")
from pathmdn_verify.platform import fidelity
fidelity.activate()
import torch
from fla.ops.path_attn import parallel_path_attn
from fla.ops.forgetting_attn import parallel_forgetting_attn
from pathmdn_verify.references.path_oracle import path_attn, fox_attn

B, T, H, D = 1, 128, 1, 32
torch.manual_seed(0)
q, k, v, do = (torch.randn(B, T, H, D) for _ in range(4))
w = torch.nn.functional.normalize(torch.randn(B, T, H, D), dim=-1)
beta = torch.rand(B, T, H) * 1.5 + 0.25
g = torch.nn.functional.logsigmoid(torch.randn(B, T, H) + 2)

def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()

def one(dt, backward=False):
    qq, kk, vv = (x.to(dt).requires_grad_(backward) for x in (q, k, v))
    o_p, _ = parallel_path_attn(qq, kk, vv, w, beta, g, use_cache=True)
    o_f = parallel_forgetting_attn(qq, kk, vv, g)
    ref_in = [x.to(dt).double().requires_grad_(backward) for x in (q, k, v)]
    ref_p = path_attn(*ref_in, w.double(), beta.double(), g.double(), gate_scaled=True)
    ref_f = fox_attn(*ref_in, g.double())
    out = {"path": rel(o_p, ref_p), "fox": rel(o_f, ref_f),
           "path_paper_gate": rel(o_p, path_attn(*(x.detach() for x in ref_in), w.double(), beta.double(),
                                                  g.double()).detach())}
    if backward:
        o_p.backward(do.to(dt)); ref_p.backward(do.double())
        out["path_dq"] = rel(qq.grad, ref_in[0].grad)
        out["path_dk"] = rel(kk.grad, ref_in[1].grad)
        out["path_dv"] = rel(vv.grad, ref_in[2].grad)
    return out

res = {}
t = time.time()
res["bf16"] = one(torch.bfloat16, backward=True)
res["fp32_tf32"] = one(torch.float32)
fidelity.activate(fp32_dot="ieee")                     # same parts, emulation off
res["fp32_ieee"] = one(torch.float32)
fidelity.restore(); fidelity.activate(parts=[p for p in fidelity.PARTS if p != "bf16_dot"])
res["bf16_no_bf16_dot"] = one(torch.bfloat16)
fidelity.restore(); fidelity.activate(parts=[p for p in fidelity.PARTS if p != "bf16_round"])
res["bf16_no_bf16_round"] = one(torch.bfloat16)
res["seconds"] = time.time() - t
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def e2e():
    out = run_child(E2E_CHILD, timeout=600)
    print("\nfla PaTH/FoX under the interpreter, normwise relative error vs float64:", json.dumps(out, indent=1))
    return out


def test_fla_bf16(e2e):
    r = e2e["bf16"]
    for key in ("path", "fox", "path_dq", "path_dk", "path_dv"):
        assert 1e-4 < r[key] < 1e-2, (key, r)           # bf16 level: about 2e-3 measured
    assert r["path_paper_gate"] > 0.1, r                # fla's PaTH scales the gate (gate_scaled=True)


def test_fla_fp32_tf32(e2e):
    r, ieee = e2e["fp32_tf32"], e2e["fp32_ieee"]
    for key in ("path", "fox"):
        assert 2e-4 < r[key] < 5e-3, (key, r)            # TF32 level: about 1e-3 measured
        assert r[key] > 10 * ieee[key], (key, r, ieee)  # the emulation is really on


def test_fla_fp32_ieee(e2e):
    r = e2e["fp32_ieee"]
    assert r["fox"] < 5e-6, r
    # fla's PaTH forward casts w and the UT factor to fp16 (parallel.py: w_fp16, w2_fp16): ~5e-5, not 1e-6
    assert r["path"] < 3e-4, r


def test_fla_bf16_garbage_without_dot_fix(e2e):
    """Garbage: an error above 1 or not a number at all (NaN compares False with every bound)."""
    r = e2e["bf16_no_bf16_dot"]
    assert all(not r[k] <= 1.0 for k in ("path", "fox")), r


def test_fla_bf16_truncating_casts_visible(e2e):
    r, good = e2e["bf16_no_bf16_round"], e2e["bf16"]
    assert r["path"] > 1.5 * good["path"], (r, good)
