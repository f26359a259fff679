"""Which tile config each autotuned Triton kernel runs: `--configs cover|all|autotune|first`.

On a GPU Triton's autotuner times every config of a kernel and keeps the fastest; on the CPU the
interpreter has nothing to time (fidelity part "autotune" returns a zero timing, so the FIRST config
always wins) and every other config of every autotuned kernel would never run.  This module replaces
the choice, per check, in the process that runs the check (patch on ``Autotuner.run``, installed on
first use, on both devices):

  cover     the k-th fresh launch of kernel K in a check runs config (offset + k) mod n of the configs
            left after Triton's pruning, offset = sha256(op group, K, seed) + floor((i + j / J) n / P): the check
            the i-th of the P registered checks of its op and pass, the pass the j-th of its group's J
            (:func:`offset`).  Once the check has run all n configs of K (n fresh launches), a launch of a
            specialization it launched before (what Triton compiles a launch for: :func:`_specialization`) runs
            that specialization's config again and is not fresh: on a GPU the rest of the check compiles once per
            specialization, not once per launch, and a check runs the same configs of K as a fresh config per
            launch would (reusing earlier, after a share of the rotation, loses configs of a kernel that only
            some checks of the pass launch).
            Deterministic from the check id and seed, independent of the machine, the worker count, the selection
            and the checks that ran before in the same worker (the state is reset per check by ``begin``).  A check
            that launches K L times runs min(L, n) of its configs, the P checks of a pass starting n / P configs
            apart over the whole rotation, so they cover every config of K when each launches it ceil(n / P) times
            (a kernel that several passes launch, sooner); :func:`coverage` measures what a run covered from the
            configs each check recorded (a run says so when it left some unrun: never assumed).
  first     always the first config left after pruning (today's CPU behaviour; on a GPU: no timing).
  autotune  Triton's own timing (GPU only: on the CPU every config ties), its choices kept in Triton's cache
            directory (TRITON_CACHE_AUTOTUNING, set by pathmdn_verify.platform.setup.prepare), so a second run with
            that directory times none; each check records the configs Triton timed (`configs_timed`).
  all       every config on every example: the example runs in rounds r = 0, 1, ... until every kernel's
            configs that fit ran, round r launching config r mod n of each autotuned kernel (n: its configs
            left after pruning; an unfit one passes to the next); the example's verdict is its worst round's, and a failing check names the rounds
            that failed and those that passed (:func:`every_config`).  Deterministic, so a replay sees the
            same configs.

A generated hypothesis example that failed is replayed at the end of the search; the replay must see
the same configs or hypothesis calls the test flaky.  So an assignment is remembered by the example's
choice sequence (hypothesis' BuildContext) and the launch's ordinal in it: a replay, and any re-run of
the same example, gets the configs its first run had.

A config that does not fit the device (OutOfResources, a ptxas error or a compile-time assertion at
launch, as Triton's own _bench treats them) is recorded as unfit and the next config of the rotation
runs.  On the CPU nothing is unfit: the interpreter has no shared-memory or register limit, and it
ignores num_warps / num_stages, so configs that differ only in those compute the same bits there
(:func:`coverage` also counts the distinct meta-parameter sets).

Per check, :func:`attach` writes into Result.details:
  configs           {kernel: [indices into the kernel's declared configs that ran]}
  configs_declared  {kernel: number of declared configs}
  configs_unfit     {kernel: [indices that did not fit]}                    (only when some)
  configs_failing_example  {kernel: ["index: config", ...]} of the failing example reported (failing checks only; the
                    last example hypothesis runs is the replay of the minimal failing one), also named in
                    the message.
Outside a check (begin not called: `verify compare`, the report, tests) and in the env.interpreter.*
canaries of the other fidelity parts (which test the autotune part alone), the patch does nothing.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import sys
from dataclasses import dataclass, field

MODES = ("cover", "all", "autotune", "first")
DEFAULT = "cover"
OFF = "off"                 # internal: leave Triton (and fidelity's zero timing) alone, record nothing
# canaries that test a fidelity part alone see Triton's choice untouched (e.g. env.interpreter.autotune
# expects the first config on the CPU, the tiles canaries a launch's own tiles); the configs canaries do not
EXEMPT_PREFIX = "env.interpreter."
OWN_PREFIX = "env.interpreter.configs"


@dataclass
class _CheckState:
    check_id: str
    mode: str
    seed: int
    fresh: dict = field(default_factory=dict)       # kernel -> fresh assignments so far (k)
    memo: dict = field(default_factory=dict)        # (example choices, kernel, ordinal) -> declared index
    declared: dict = field(default_factory=dict)    # kernel -> [config strings]
    ran: dict = field(default_factory=dict)         # kernel -> {declared index: launches}
    unfit: dict = field(default_factory=dict)       # kernel -> {declared index: error line}
    log: list = field(default_factory=list)         # (kernel, declared index) per launch, in order
    example: object = None                          # marker of the example being run
    example_launches: list = field(default_factory=list)   # (kernel, index) of the current example
    ordinal: dict = field(default_factory=dict)     # kernel -> launches in the current example
    round: int = 0                                  # --configs all: the round being run
    width: dict = field(default_factory=dict)       # --configs all: kernel -> configs left after pruning
    timed: dict = field(default_factory=dict)       # --configs autotune: kernel -> configs Triton's timing ran
    compiled: dict = field(default_factory=dict)    # cover: (kernel, specialization) -> declared index it ran


_state: _CheckState | None = None
_installed = [False]


def mode_for(check_id: str, mode: str) -> str:
    if check_id.startswith(EXEMPT_PREFIX) and not check_id.startswith(OWN_PREFIX):
        return OFF
    return mode


def begin(check_id: str, ctx) -> None:
    """At the start of each check (pathmdn_verify.run.runner.execute): a fresh assignment and collector."""
    global _state
    mode = mode_for(check_id, getattr(ctx, "configs", DEFAULT))
    _state = None if mode == OFF else _CheckState(check_id, mode, int(getattr(ctx, "seed", 0)))
    # on the CPU never the first import of triton (the fidelity layer's job, which installs the patch itself); on
    # a GPU the first check of a process (--workers 0) may import the kernel package only as it runs
    if _state is not None and ("triton" in sys.modules or getattr(ctx, "device", "cpu") != "cpu"):
        install()


@contextlib.contextmanager
def scope(check_id: str, mode: str, seed: int = 0):
    """Run the body under its own assignment and collector (the canary's experiments); yields the state
    (None for mode "off"); the enclosing check's state comes back afterwards."""
    global _state
    saved = _state
    _state = None if mode == OFF else _CheckState(check_id, mode, seed)
    install()
    try:
        yield _state
    finally:
        _state = saved


_groups: dict = {}           # (number of registered checks, group) -> sorted ids of the group


def _group(check_id: str) -> tuple[str, list[str]]:
    """(check_id's group, the sorted registered ids of the group; none for an id that does not parse)."""
    from pathmdn_verify.core.errors import UsageError
    from pathmdn_verify.core.ids import CheckId
    from pathmdn_verify.core.registry import REGISTRY
    try:
        group = CheckId.parse(check_id).group
    except UsageError:
        return check_id, []
    key = (len(REGISTRY), group)
    if key not in _groups:
        _groups[key] = sorted(i for i in REGISTRY if CheckId.parse(i).group == group)
    return group, _groups[key]


def _pass(check_id: str) -> tuple[str, ...]:
    """A check's op and pass: its id's first four words (kernel.fla.l2norm.bwd)."""
    return tuple(check_id.split(".")[:4])


def _position(check_id: str) -> tuple[str, int, int, int, int]:
    """(group, i, P, j, J): check_id the i-th of the P sorted registered checks of its op and pass, that pass the
    j-th of the J sorted passes of its group; the same in every process of one toolkit version, whatever the
    selection (0, 1, 0, 1 for an id that is not registered)."""
    group, ids = _group(check_id)
    passes = sorted({_pass(i) for i in ids})
    own = [i for i in ids if _pass(i) == _pass(check_id)]
    if check_id not in own:
        return group, 0, 1, 0, 1
    return group, own.index(check_id), len(own), passes.index(_pass(check_id)), len(passes)


def offset(check_id: str, kernel: str, seed: int, n: int) -> int:
    """The rotation's start for kernel (n configs) in check: sha256(group, kernel, seed) + floor((i + j / J) n / P)
    (:func:`_position`).  The P checks of a pass start n / P apart over the whole rotation (the passes a fraction
    of that step from each other), so that they cover all n configs when each launches the kernel ceil(n / P)
    times: a kernel only one pass launches, such as a backward kernel, included.  Spread over the
    whole group instead, one pass's checks started within part of the rotation (measured: fla's l2norm backward
    checks, 4 of the op's 9, started 3 configs apart and ran 12 of the backward kernel's 25); one apart, a kernel
    of 48 configs shared by PaTH and FoX kept 6 unrun; by a hash of the check id alone, configs were left unrun by
    chance."""
    group, i, count, j, passes = _position(check_id)
    digest = hashlib.sha256(f"{group}\0{kernel}\0{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big") + (i * passes + j) * n // (count * passes)


def short(config) -> str:
    """BK=32,BV=32,w2,s3: the meta-parameters, num_warps and num_stages of a triton.Config."""
    kw = ",".join(f"{k}={v}" for k, v in config.kwargs.items())
    return ",".join(p for p in (kw, f"w{config.num_warps}", f"s{config.num_stages}") if p)


def _example_key(st: _CheckState, kernel: str):
    """(memo key or None, launch ordinal of kernel in the current example); notes a new example."""
    try:
        from hypothesis.control import _current_build_context
        bctx = _current_build_context.value
    except (ImportError, AttributeError):        # hypothesis absent or changed: no memo (a replay may then see other configs)
        bctx = None
    marker = bctx if bctx is not None else "no-example"
    if marker is not st.example:
        st.example, st.example_launches, st.ordinal = marker, [], {}
    j = st.ordinal.get(kernel, 0)
    st.ordinal[kernel] = j + 1
    if bctx is None:
        return None, j
    try:
        choices = tuple(bctx.data.choices)
        hash(choices)
    except (AttributeError, TypeError):
        return None, j
    if not choices:          # an explicit example: run once, never replayed
        return None, j
    return (choices, kernel, j), j


def _choose(st: _CheckState, tuner, kernel: str, pruned: list, compiled: tuple):
    """The pruned configs in the order to try them (the first that fits runs) and the memo key."""
    index = {id(c): i for i, c in enumerate(tuner.configs)}
    key, _ = _example_key(st, kernel)
    if st.mode == "first":
        return pruned, key
    n = len(pruned)
    if st.mode == "all":
        st.width[kernel] = n
        start = st.round % n
        return pruned[start:] + pruned[:start], None
    ran_all = st.fresh.get(kernel, 0) >= n          # the check ran every config of the kernel
    known = st.memo.get(key) if key is not None and key in st.memo else \
        st.compiled.get((kernel, compiled)) if ran_all else None
    if known is not None:
        start = next((p for p, c in enumerate(pruned) if index.get(id(c)) == known), 0)
    else:
        k = st.fresh.get(kernel, 0)
        st.fresh[kernel] = k + 1
        start = (offset(st.check_id, kernel, st.seed, n) + k) % n
    return pruned[start:] + pruned[:start], key


def _count_launch(st: _CheckState, tuner, kernel: str, config) -> int | None:
    idx = next((i for i, c in enumerate(tuner.configs) if c is config), None)
    if idx is None:          # not a declared config (fla's config cache): by value
        idx = next((i for i, c in enumerate(tuner.configs) if c.__dict__ == config.__dict__), None)
    st.declared.setdefault(kernel, [short(c) for c in tuner.configs])
    st.ran.setdefault(kernel, {})
    st.ran[kernel][idx] = st.ran[kernel].get(idx, 0) + 1
    st.log.append((kernel, idx))
    st.example_launches.append((kernel, idx))
    return idx


def _tuning_key(tuner, args, kwargs) -> tuple:
    """The key Autotuner.run caches its choice under (triton 3.6, runtime/autotuner.py)."""
    all_args = {**tuner.nargs, **kwargs}
    _args = {k: v for (k, v) in all_args.items() if k in tuner.arg_names}
    key = [_args[k] for k in tuner.keys if k in _args]
    for arg in _args.values():
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key)


@functools.cache
def _constexprs(fn) -> frozenset:
    """The parameters of a kernel's Python function annotated constexpr (as triton's KernelParam.is_constexpr reads
    them), read once per function: _specialization asks on every launch."""
    return frozenset(name for name, p in inspect.signature(fn).parameters.items() if "constexpr" in str(p.annotation))


def _specialization(tuner, args, kwargs) -> tuple:
    """What Triton compiles a launch for, less the pointers' alignment (triton 3.6, runtime/jit.py: KernelParam,
    specialize_impl): each constexpr argument's value, each integer's class (1, else its width, 32 or 64 bits, and
    whether 16 divides it), each tensor's dtype.  The alignment is left out so that the key is the same on every
    machine."""
    fn = tuner.fn
    while not inspect.isfunction(fn) and hasattr(fn, "fn"):        # a Heuristics or JITFunction around it
        fn = fn.fn
    constexprs = _constexprs(fn)
    values = {**dict(zip(tuner.arg_names, args)), **kwargs}
    out = []
    for name in tuner.arg_names:
        v = values.get(name)
        if name in constexprs:
            out.append(repr(v))
        elif hasattr(v, "dtype"):
            out.append(str(v.dtype))
        elif isinstance(v, int) and not isinstance(v, bool):
            out.append("1" if v == 1 else ("i32" if -2**31 <= v < 2**31 else "i64") + ("D" if v % 16 == 0 else ""))
        else:
            out.append(type(v).__name__)
    return tuple(out)


def _make_run(original):
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources, PTXASError
    unfit_errors = (OutOfResources, CompileTimeAssertionFailure, PTXASError)

    def run(self, *args, **kwargs):
        st = _state
        if st is None:
            return original(self, *args, **kwargs)
        kernel = self.base_fn.__name__
        if st.mode == "autotune" or len(self.configs) <= 1:
            _example_key(st, kernel)
            ret = original(self, *args, **kwargs)
            _count_launch(st, self, kernel, self.best_config)
            return ret
        self.nargs = dict(zip(self.arg_names, args))
        key = _tuning_key(self, args, kwargs)
        first_time = key not in self.cache
        pruned = self.prune_configs(kwargs)
        spec = _specialization(self, args, kwargs)
        order, memo_key = _choose(st, self, kernel, pruned, spec)
        if first_time:       # what Autotuner.run does after timing a new key (reset_to_zero arguments)
            self.pre_hook({**self.nargs, **kwargs, **order[0].all_kwargs()}, reset_only=True)
        last = None
        for config in order:
            self.cache[key] = config
            try:
                ret = original(self, *args, **kwargs)
            except unfit_errors as exc:
                idx = self.configs.index(config) if config in self.configs else None
                st.unfit.setdefault(kernel, {})[idx] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                st.declared.setdefault(kernel, [short(c) for c in self.configs])
                last = exc
                continue
            idx = _count_launch(st, self, kernel, config)
            if memo_key is not None:
                st.memo.setdefault(memo_key, idx)
            st.compiled.setdefault((kernel, spec), idx)
            return ret
        raise last

    run._verify_configs = True
    return run


def install() -> None:
    """Patch Autotuner.run once per process (inert while no check state is set).  Called by begin when
    triton is loaded, by scope, and by fidelity.activate (part autotune) before any kernel module exists."""
    if _installed[0]:
        return
    from triton.runtime.autotuner import Autotuner
    if not getattr(Autotuner.run, "_verify_configs", False):
        Autotuner.run = _make_run(Autotuner.run)
        original_bench = Autotuner._bench

        def bench(self, *args, **kwargs):         # one config timed (what --configs autotune costs)
            if _state is not None:
                name = self.base_fn.__name__
                _state.timed[name] = _state.timed.get(name, 0) + 1
            return original_bench(self, *args, **kwargs)
        Autotuner._bench = bench
    _installed[0] = True


def every_config(fn) -> list:
    """[fn()] once per round under --configs all (module docstring: round r runs config r mod n of every
    autotuned kernel, until the kernel with the most configs that fit ran each), else [fn()].  A round that
    launched the same configs as an earlier one (its own fell through as unfit) is left out."""
    st = _state
    if st is None or st.mode != "all":
        return [fn()]
    out, seen = [], set()
    fitting = lambda: max((n - len(st.unfit.get(k, {})) for k, n in st.width.items()), default=1)
    try:
        while st.round < fitting():
            start = len(st.log)
            value = fn()
            launched = tuple(st.log[start:])
            if launched not in seen:
                seen.add(launched)
                out.append(value)
            st.round += 1
    finally:
        st.round = 0
    return out


def collected() -> dict:
    """What the current check ran, as attach writes it (empty when nothing autotuned ran)."""
    st = _state
    if st is None or not (st.ran or st.unfit):
        return {}
    kernels = sorted(set(st.ran) | set(st.unfit))
    out = {"configs": {k: sorted(i for i in st.ran.get(k, {}) if i is not None)
                       + (["undeclared"] if None in st.ran.get(k, {}) else []) for k in kernels},
           "configs_declared": {k: len(st.declared.get(k, ())) for k in kernels}}
    if st.unfit:
        out["configs_unfit"] = {k: sorted(i for i in v if i is not None) for k, v in st.unfit.items()}
    if st.mode == "autotune":
        out["configs_timed"] = dict(sorted(st.timed.items()))
    return out


def last_example() -> dict:
    """{kernel: ["index: config", ...]} of the launches of the last example the check ran."""
    st = _state
    out: dict = {}
    if st is None:
        return out
    for kernel, idx in st.example_launches:
        name = f"{idx}: {st.declared[kernel][idx]}" if idx is not None else "undeclared"
        if name not in out.setdefault(kernel, []):
            out[kernel].append(name)
    return out


def attach(result) -> None:
    """Add what the check ran to its Result (runner.execute, after the check returned)."""
    found = collected()
    if not found:
        return
    result.details.update(found)
    if result.status == "fail" and (ex := result.details.get("configs_failing_example") or last_example()):
        result.details["configs_failing_example"] = ex
        named = "; ".join(f"{k} {', '.join(v)}" for k, v in ex.items())
        result.message += f" [configs of its failing example ({_state.mode}): {named}]"


def _details(check) -> dict:
    """A check's details: an Outcome's result's, or a results JSON check dict's."""
    return check["details"] if isinstance(check, dict) else check.result.details


def coverage(checks) -> dict:
    """Per kernel, over a run's checks (Outcomes, or the check dicts of a results JSON): configs run /
    declared, and which declared configs ran nowhere.  {kernel: {declared, ran, unrun, unfit, checks}}."""
    out: dict = {}
    for c in checks:
        details = _details(c)
        declared = details.get("configs_declared") or {}
        for kernel, ran in (details.get("configs") or {}).items():
            row = out.setdefault(kernel, {"declared": declared.get(kernel, 0), "ran": set(), "unfit": set(),
                                          "checks": 0})
            row["declared"] = max(row["declared"], declared.get(kernel, 0))
            row["ran"].update(i for i in ran if isinstance(i, int))
            row["unfit"].update((details.get("configs_unfit") or {}).get(kernel, ()))
            row["checks"] += 1
    for row in out.values():
        row["unfit"] -= row["ran"]
        row["unrun"] = sorted(set(range(row["declared"])) - row["ran"] - row["unfit"])
        row["ran"], row["unfit"] = sorted(row["ran"]), sorted(row["unfit"])
    return dict(sorted(out.items()))


def summary(mode: str, checks) -> dict:
    """What a run's results say about its configs: the mode, per kernel "ran/declared", and complete
    (every declared config that fits ran somewhere in the run) or the configs left unrun."""
    cov = coverage(checks)
    out = {"mode": mode,
           "complete": all(not r["unrun"] for r in cov.values()),
           "kernels": {k: {"ran": f"{len(r['ran'])}/{r['declared']}", "unrun": r["unrun"], "unfit": r["unfit"]}
                       for k, r in cov.items()}}
    if mode == "autotune":      # configs Triton timed in this run: 0 once its choices are in the cache directory
        out["timed"] = sum(sum((_details(c).get("configs_timed") or {}).values()) for c in checks)
    return out


def summary_line(s: dict) -> str | None:
    """A note for the console: under autotune the configs Triton timed; under cover the kernels this run launched
    whose configs it left unrun (None when there is none)."""
    if s["mode"] == "autotune":
        return f"note: --configs autotune: Triton timed {s['timed']} configs in this run (its choices are kept in " \
               "TRITON_CACHE_DIR for the next run)"
    left = [f"{k} {v['ran']} (unrun: {v['unrun']})" for k, v in s["kernels"].items() if v["unrun"]]
    if s["mode"] != "cover" or not left:
        return None
    return f"note: --configs cover left configs unrun in this run: {'; '.join(left)}"
