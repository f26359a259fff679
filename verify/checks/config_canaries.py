"""Canary for `--configs` (verify/platform/configs.py): the tile config each autotuned kernel runs.

env.interpreter.configs_cover: a tiny autotuned kernel whose config is visible in its output (it writes its BLOCK
constexpr), with three configs that fit and a fourth that does not (its pre_hook raises OutOfResources, as a config
too large for the GPU does at launch).  Under cover, launched with six specializations (a constexpr) and then with
each again, and once more with the first one's under another autotune key, the configs read back from the outputs
must be the ones the collector recorded, follow the documented rotation over the specializations, run each one's
config again on its later launches, include all three that fit, record the fourth as unfit (and :func:`coverage` say
3/4 ran, 1 unfit, none unrun), and repeat exactly under the same check id and seed; a check launching one
specialization five times runs the rotation until it ran all 4 configs, then that specialization's config.  Under
first every launch runs the first config; with the assignment off (negative control) Triton's own choice decides:
one config for every launch (the first, on the CPU).  Under all, an
example of two launches run through `every_config` runs in 3 rounds (the kernel's 3 configs that fit), round r
running BLOCK r mod 3 on both launches, and the worst round's result comes back with every round's.  A hypothesis
search that fails only under one config must name that config and must not be reported flaky (the final replay of
the failing example gets the configs its first run had).

Importing this module defines no kernel: the kernel is built on first use, after the fidelity layer.
"""
from __future__ import annotations

from pathmdn_verify.core.registry import Context, Result, check

CHECK_ID = "env.interpreter.configs_cover"
SHARE_ID = "env.configs_share.cover"          # the id of a group no check is registered in
BLOCKS = (16, 32, 64)
N = 64
_KERNEL: dict = {}


def _kernel():
    if not _KERNEL:
        import triton
        import triton.language as tl

        @triton.jit
        def block_kernel(o_ptr, n, TAG: tl.constexpr, BLOCK: tl.constexpr):     # TAG: a specialization
            r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(o_ptr + r, tl.full([BLOCK], BLOCK, tl.int32), mask=r < n)

        _KERNEL.update(triton=triton, fn=block_kernel)
    return _KERNEL


def _unfit(_nargs):
    from triton.runtime.errors import OutOfResources
    raise OutOfResources(1 << 20, 228 * 1024, "shared memory")


def _tuned():
    """A fresh Autotuner (no cached choice): BLOCK 16, 32, 64 and 128 (the last does not fit)."""
    k = _kernel()
    triton = k["triton"]
    configs = [triton.Config({"BLOCK": b}) for b in BLOCKS] + [triton.Config({"BLOCK": 128}, pre_hook=_unfit)]
    return triton.autotune(configs=configs, key=["n"])(k["fn"]), configs


def _launches(torch, dev, kern, times: int, tags=None, sizes=None) -> list[int]:
    """BLOCK read back from the output of each launch, of TAG = tags[i] (0 if None) and n = sizes[i] (the autotune
    key; N if None)."""
    seen = []
    for i in range(times):
        n = N if sizes is None else sizes[i]
        o = torch.zeros(N, dtype=torch.int32, device=dev)
        kern[lambda meta: (_kernel()["triton"].cdiv(n, meta["BLOCK"]),)](o, n, 0 if tags is None else tags[i])
        vals = set(o[:n].cpu().tolist())
        seen.append(vals.pop() if len(vals) == 1 else -1)     # -1: not one config's output
    return seen


def _replay(torch, dev, seed: int) -> tuple[str, dict]:
    """A hypothesis search whose property fails only when BLOCK == 32: (outcome, configs of the last example)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    from hypothesis.errors import Flaky

    from pathmdn_verify.platform import configs
    kern, _ = _tuned()

    @hseed(seed)
    @settings(max_examples=12, database=None, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=False, report_multiple_bugs=False)
    @given(st.integers(0, 6))
    def prop(tag):
        assert _launches(torch, dev, kern, 1, [tag])[0] != 32

    try:
        prop()
    except Flaky as exc:
        return f"flaky: {type(exc).__name__}", configs.last_example()
    except AssertionError:
        return "failed", configs.last_example()
    return "passed", configs.last_example()


@check(CHECK_ID, "--configs cover runs every config of an autotuned kernel (read back from its outputs), "
                 "deterministically; all runs each example under each; first / off run one; an unfit config is "
                 "recorded, a replay is not flaky")
def configs_cover(ctx: Context) -> Result:
    from pathmdn_verify.checks.fidelity_canaries import _setup
    from pathmdn_verify.platform import configs
    torch, dev = _setup(ctx)
    problems: list[str] = []
    times = 6                                     # not a multiple of the 4 configs: a second launch continuing
    tags = [*range(times), *range(times), 0]      # the rotation would run another config; the last launch has
    sizes = [N] * 2 * times + [48]                # the first one's specialization under another autotune key
    runs = []
    for _ in range(2):                  # twice: the same check id and seed give the same configs
        kern, declared = _tuned()
        with configs.scope(CHECK_ID, "cover", ctx.seed) as st:
            seen = _launches(torch, dev, kern, len(tags), tags, sizes)
            logged = [declared[i].kwargs["BLOCK"] for _, i in st.log]
            found = configs.collected()
        runs.append(seen)
        if seen != logged:
            problems.append(f"cover: outputs ran BLOCK {seen}, the collector recorded {logged}")
    seen = runs[0]
    k0 = configs.offset(CHECK_ID, "block_kernel", ctx.seed, 4)
    rotation = [BLOCKS[i] if (i := (k0 + k) % 4) < 3 else BLOCKS[0] for k in range(times)]
    expected = rotation * 2 + rotation[:1]
    if seen != expected:
        problems.append(f"cover: ran {seen}, the rotation (offset + k) mod 4 over the specializations (unfit -> "
                        f"next), each one's config again on its later launches, gives {expected}")
    if set(seen) != set(BLOCKS):
        problems.append(f"cover: {len(tags)} launches ran BLOCK {sorted(set(seen))}, not all of {list(BLOCKS)}")
    if runs[1] != runs[0]:
        problems.append(f"cover is not deterministic: {runs[0]} then {runs[1]}")
    if found.get("configs_unfit", {}).get("block_kernel") != [3]:
        problems.append(f"the unfit config (index 3) was not recorded as unfit: {found}")
    cov = configs.coverage([{"details": found}]).get("block_kernel", {})
    if (cov.get("ran"), cov.get("unfit"), cov.get("unrun")) != ([0, 1, 2], [3], []):
        problems.append(f"coverage() says {cov}, not ran [0, 1, 2], unfit [3], unrun []")

    kern, _ = _tuned()         # fresh configs until all 4 ran, then the specialization's own
    with configs.scope(SHARE_ID, "cover", ctx.seed):
        share = _launches(torch, dev, kern, 6, [0, 0, 0, 0, 0, 1])
    k1 = configs.offset(SHARE_ID, "block_kernel", ctx.seed, 4)
    rotation = [BLOCKS[i] if (i := (k1 + k) % 4) < 3 else BLOCKS[0] for k in range(5)]
    if share != rotation[:4] + rotation[:1] + rotation[4:]:
        problems.append(f"cover, 4 configs: one specialization launched 5 times and another once ran "
                        f"{share}, not the rotation until all 4 ran, then the first config again, then the "
                        f"rotation: {rotation[:4] + rotation[:1] + rotation[4:]}")

    kern, declared = _tuned()
    with configs.scope(CHECK_ID, "first", ctx.seed) as st:
        first = _launches(torch, dev, kern, 4)
        first_logged = sorted({i for _, i in st.log})
    if first != [BLOCKS[0]] * 4 or first_logged != [0]:
        problems.append(f"first: ran {first}, recorded indices {first_logged}")

    kern, declared = _tuned()
    with configs.scope(CHECK_ID, configs.OFF) as st:     # negative control: Triton's own choice
        off = _launches(torch, dev, kern, 4)
    want_off = [BLOCKS[0]] * 4 if ctx.device == "cpu" else [off[0]] * 4
    if off != want_off or st is not None:
        problems.append(f"off: ran {off}, expected {want_off} (one config; the first on the CPU)")

    kern, declared = _tuned()
    with configs.scope(CHECK_ID, "all", ctx.seed):
        rounds = configs.every_config(lambda: _launches(torch, dev, kern, 2))
    if rounds != [[b, b] for b in BLOCKS]:
        problems.append(f"all: the rounds ran {rounds}, not {[[b, b] for b in BLOCKS]} (every config on the example)")

    with configs.scope(CHECK_ID, "cover", ctx.seed):
        outcome, last = _replay(torch, dev, ctx.seed)
    named = last.get("block_kernel", [])
    if outcome != "failed" or named != ["1: BLOCK=32,w4,s3"]:
        problems.append(f"a search failing only under BLOCK=32: {outcome}, its last example ran {named}")

    msg = (f"cover ran BLOCK {seen} over {times} specializations launched twice each and the first once more under "
           f"another autotune key (all 3 that fit, each one's config again on its later launches, the unfit one "
           f"recorded), the same twice, and {share} for one specialization launched 5 times; first ran {first}; "
           f"off ran {off}; all ran rounds {rounds}; a BLOCK=32-only failure was found, not flaky")
    if problems:
        return Result("fail", float(len(problems)), 0.0, "; ".join(problems), kind="over_budget",
                      details={"cover": runs, "first": first, "off": off})
    return Result("pass", 0.0, 0.0, msg, details={"cover": seen, "first": first, "off": off}, measure="problems")
