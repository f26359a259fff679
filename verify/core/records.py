"""The shape of a kernel op's record (`OpRecord`, PyTorch's OpInfo is the model), its convention probes,
its decode pass, the budget factors c, and the helpers the records and the checks share.

Every callable of a record takes the op's canonical inputs by name plus `scale` (the attention scale; the
checks pass 1/sqrt(D) explicitly, the scale_default probe passes None to the kernel).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pathmdn_verify.core.ids import DTYPES, NAME, PASSES, CheckId

# Budget factors c: how many times the same-dtype implementation's error a kernel may make (pathmdn_verify.core.budget).
# Forward passes: the kernel performs the same rounded operations as the same-dtype implementation (same
# block size, same operand formats) in a different order of accumulation, so its error should be of the
# same size: c = 4 leaves a factor 2 for ordering and 2 for the spread between random inputs.  Backward
# passes chain several rounded stages (recomputed logits, dP, the UT-transform backward), each of which
# can round where the same-dtype implementation does not: c = 8.
BUDGET_FACTOR_BLOCKWISE = {"fwd": 4.0, "bwd": 8.0, "decode": 4.0}
# A token-by-token recurrence (fla's fused_recurrent MDN and GDN) is a different algorithm class from the
# chunkwise same-dtype implementation: its rounding errors accumulate over T sequential state updates
# instead of within one chunk, so the same constant would judge the algorithm, not the implementation.
# Measured before choosing: over 20 seeds at T <= 160 fla's fp32 MDN recurrence reached 10 u normwise and
# 9x the chunkwise implementation's max-abs error (deta); c doubles.  Bugs of the kind the checks exist
# for (wrong coefficient, dropped state, wrong gate) give errors of order 1.
BUDGET_FACTOR_SEQUENTIAL = {"fwd": 8.0, "bwd": 16.0}


@dataclass(frozen=True)
class Conventions:
    """What an implementation's entry point means by its arguments, each measured by a ConventionProbe."""
    scale_default: str                 # what scale=None means
    gate_scaled: bool | None = None    # True: softmax(scale * (logit + gate)); False: scale * logit + gate
    head_dims: tuple[int, ...] = ()    # supported D (and Dv)
    dtypes: tuple[str, ...] = ()       # input dtypes q, k, v may have
    varlen: bool = False               # cu_seqlens supported
    chunk_sizes: tuple[int, ...] = ()  # MDN chunk sizes
    residual: str = ""                 # MDN: what multiplies S_{t-1} in v~_t
    eta_placement: str = ""            # MDN: where eta enters
    final_state: str = ""              # MDN: final-state semantics
    notes: str = ""

    def __post_init__(self):
        if not self.scale_default or not set(self.dtypes) <= set(DTYPES) or self.gate_scaled not in (None, True, False) \
                or not all(isinstance(n, int) and n > 0 for n in (*self.head_dims, *self.chunk_sizes)):
            raise ValueError(f"conventions: scale_default says what scale=None means, dtypes are some of {DTYPES}, "
                             f"gate_scaled is None or a bool, head_dims and chunk_sizes positive ints: {self}")


@dataclass(frozen=True)
class ConventionProbe:
    """One declared convention, measured: on `case` in fp32 the kernel must agree with the oracle under the
    declared convention (within its forward budget) and differ from `alternative` by more than 10x it.
    alternative(op, x64, scale) -> the oracle's outputs under the other convention.

    Three other kinds measure an option of the entry point that the boundary cases leave at one value (`Fixed`),
    `given(op, x, scale)` being the kernel's outputs with the option given: "option": they must agree with
    `meaning(fn, x, scale)`, the option's meaning applied to a reference fn(**inputs, scale) (the oracle; the
    same-dtype implementation for the budget), and differ by more than 10x from `alternative` (default: the
    oracle without the option); "no_effect": they must be the same bits as the kernel's outputs without it (a
    performance knob, precomputed metadata); "refused": `given` must raise, its error matching the regular
    expression `what_else` (the implementation refuses the option here)."""
    name: str
    description: str
    what_else: str                      # the alternative, in words (kind "refused": the error it must raise)
    case: object
    alternative: Callable | None = None
    output: str = "o"
    kernel_scale_none: bool = False     # call the kernel with scale=None (the scale_default probe)
    kind: str = "convention"            # "convention" | "option" | "no_effect" | "refused"
    given: Callable | None = None       # (op, inputs, scale) -> the kernel's outputs with the option given
    options: tuple[str, ...] = ()       # the entry point's parameters the probe gives (every kind but convention)
    meaning: Callable | None = None     # kind option: (fn, inputs, scale) -> fn's outputs under the option
    discriminates: bool = True          # kind option: False where the option leaves the judged output's value as it
    #                                     is (a chunk size, the final state not requested): no alternative to rule out

    def __post_init__(self):
        if self.kind not in PROBE_KINDS:
            raise ValueError(f"probe {self.name!r}: kind {self.kind!r} is not one of {PROBE_KINDS}")
        convention, option = self.kind == "convention", self.kind == "option"
        if (convention and self.alternative is None) or (not convention and (self.given is None or not self.options)) \
                or option != (self.meaning is not None):
            raise ValueError(f"probe {self.name!r}: a convention has an alternative; the other kinds `given` and the "
                             "options it gives; kind option (only) its meaning")


PROBE_KINDS = ("convention", "option", "no_effect", "refused")


@dataclass(frozen=True)
class Fixed:
    """A parameter of the entry point that the boundary cases do not vary, and the reason, verified:
    "probe": the record's ConventionProbes named in `by` (comma-separated) give it its other value classes (scale=None:
    scale_default; an option probe, a refusal);
    "no_effect" / "refused": the record's probe `by`, of that kind, gives it (a knob shown not to change the
    results; a value the implementation refuses here); "pass": the record's pass `by` gives it (PaTH's
    use_cache=True: the decode pass); "variant": the records named in `by` (comma-separated) each give it one
    value (MDN's chunk_size: mdn_chunk16 / 32 / 64); "multi_device": a parameter of type `by` that spreads the
    call over the ranks of a process group (context parallelism), outside what one device's check can call.
    property_tests/cli/test_entry_options.py verifies each."""
    kind: str
    by: str
    why: str

    def __post_init__(self):
        if self.kind not in FIXED_KINDS or not self.by or not self.why:
            raise ValueError(f"Fixed({self.kind!r}, {self.by!r}): kind must be one of {FIXED_KINDS}, with by and why")


FIXED_KINDS = ("probe", "no_effect", "refused", "pass", "variant", "multi_device")


@dataclass(frozen=True)
class Decode:
    """A decode pass: its own kernel output, oracle and same-dtype implementation, over some regimes."""
    kernel: Callable
    oracle: Callable
    same_dtype: Callable
    output: str
    regimes: tuple[str, ...]
    cases: Callable                     # (regime fields, profile) -> hypothesis strategy

    def __post_init__(self):
        if not all(callable(f) for f in (self.kernel, self.oracle, self.same_dtype, self.cases)) or not self.output \
                or not self.regimes or not all(isinstance(r, str) for r in self.regimes):
            raise ValueError("decode: kernel, oracle, same_dtype and cases callable, the output named, regimes a "
                             f"non-empty tuple of their names (got output {self.output!r}, regimes {self.regimes!r})")


@dataclass(frozen=True)
class Structure:
    """Where an op's kernels change code path, read off the kernels and their launchers on the H200's tiles
    (the tiles every CPU run emulates), and the factors its boundary cases cover pairwise (pathmdn_verify.core.boundaries).
    build(T, D, Dv, HQ, H, cu_seqlens, seed, **options) -> a case; present(case) -> {option: present?}."""
    lengths: dict                       # pass -> {constant: tokens}: PaTH {"chunk": 64, "block": 128, ...}
    dims: dict                          # profile -> (a, b), a < b: the head dims the cases pair (D, Dv)
    build: Callable
    present: Callable
    options: dict = field(default_factory=dict)   # pass -> optional inputs, each present and absent
    heads: tuple = ((1, 1),)            # (HQ, H) pairs: the GQA ratios
    varlen: bool = True                 # cases with cu_seqlens (short sequences then one long one)
    levels: dict = field(default_factory=dict)    # constant -> profile -> its T levels, where thinned for cost
    costly: dict = field(default_factory=dict)    # profile -> T above which a case is never D == Dv
    # regimes about the input values that take no boundary case, so that what a check reports is its regime's
    # own failure (PaTH's magnitude: non-finite output at |q| > 65504 would stand in for every case given to it)
    value_regimes: tuple = ()
    # option -> its levels, where they are not (False, True): value classes (a width 3 or 4, an activation
    # left out (None) or "silu"), in the order the covering array takes them (its filler rows take the last)
    option_levels: dict = field(default_factory=dict)
    dims_pair: bool = True              # False: one dim (a or b, given as D = Dv), where the op has no second one
    notes: str = ""                     # where each constant is in the kernel package, and why a level is left out

    def __post_init__(self):
        def bad(what: str):
            raise ValueError(f"structure: {what}")
        if not callable(self.build) or not callable(self.present):
            bad("build and present must be callable")
        if not all(p in PASSES and all(isinstance(c, int) and c > 0 for c in consts.values())
                   for p, consts in self.lengths.items()):
            bad(f"lengths {self.lengths} must map a pass to {{constant: tokens > 0}}")
        if not all(p in PASSES for p in self.options):
            bad(f"options {self.options} must map a pass to its optional inputs")
        if not all(len(ab) == 2 and 0 < ab[0] <= ab[1] for ab in self.dims.values()):
            bad(f"dims {self.dims} must map a profile to head dims (a, b), 0 < a <= b")
        if not all(len(h) == 2 and h[1] > 0 and h[0] % h[1] == 0 for h in self.heads):
            bad(f"heads {self.heads} must be (HQ, H) pairs with HQ a multiple of H")


@dataclass(frozen=True)
class OpRecord:
    name: str                           # check ids: kernel.<impl>.<name>.<pass>.<dtype>.<regime>
    title: str                          # the op in words, for descriptions
    kernel: Callable                    # the adapter: kernel(**inputs, scale) -> outputs
    conventions: Conventions
    oracle: Callable                    # float64: oracle(**inputs, scale) -> outputs
    same_dtype: Callable                # same_dtype(**fp32 inputs, prec, scale) -> outputs
    make_inputs: Callable               # (case, torch dtype, device) -> {name: tensor or None}
    required: tuple[str, ...]
    optional: tuple[str, ...]
    grad_inputs: tuple[str, ...]        # the backward pass judges d<name> for each present one
    outputs: tuple[str, ...]            # what the kernel returns: that tensor alone, or a tuple of them
    regimes: dict
    cases: Callable                     # (regime fields, profile, max_T) -> hypothesis strategy
    budget_factor: dict                 # pass -> c
    error_inputs: Callable              # validation: raises UsageError naming the tensor
    sample_case: object                 # a small valid input (OpInfo's sample inputs), for the bad-input tests
    passes: tuple[str, ...] = ("fwd", "bwd")
    fp32_outputs: tuple[str, ...] = ()  # outputs always float32 (final states); the others are in the dtype checked
    fp32_when: Callable | None = None   # (inputs) -> the outputs float32 in that call (an option asks for it)
    dot: str | None = None              # fp32 dot format the kernel uses (None: the run's --fp32-dot)
    references: str = "device"          # where the oracle and same-dtype run under --references auto: "device"
    #                                     (the run's) or "cpu" (measured faster there on a GPU run)
    terms: Callable | None = None       # the oracle with terms: (**float64 inputs, scale) -> (oracle's outputs,
    #                                     {output: magnitude of its summed terms}), one evaluation for both
    grad_terms: Callable | None = None  # (upstream, scale, **float64 inputs) -> {input: magnitude of the summands
    #                                     of its gradient}, for the gradients that are cancelling sums (budget.py);
    #                                     upstream(outputs) -> the backward's upstream gradients
    regression_cases: dict = field(default_factory=dict)   # "<pass>.<dtype>.<regime>" -> [cases]
    probes: tuple[ConventionProbe, ...] = ()
    decode: Decode | None = None
    examples: dict | None = None        # hypothesis examples per check by profile (None: pathmdn_verify.core.search's default)
    device_cases: tuple = ()            # (dtype, case) pairs that pathmdn_verify.tools.device_compare runs on CPU and GPU
    impl: str = "fla"                   # the kernel package, the second word of its check ids
    query_inputs: tuple[str, ...] = ()  # inputs whose head axis counts query heads (HQ), not key heads (H)
    stages: dict = field(default_factory=dict)   # pass -> stages(op, x, dtype, fp32_dot) -> [Stage] (localize)
    mutants: tuple = ()                 # planted bugs in a copy of the kernel package (pathmdn_verify.platform.mutation.Mutant)
    not_reached: dict = field(default_factory=dict)   # regex -> (kind, why): package lines verify coverage excludes
    structure: Structure | None = None  # where the kernels change path: the boundary cases (pathmdn_verify.core.boundaries)
    report: str | None = None           # the report's family for this op (path | fox | mdn), None: not measured
    package: tuple[str, ...] = ()       # the kernel package's modules that are this op's own code: verify bisect
    #                                     imports them, verify coverage counts their lines
    refusal: Callable | None = None     # (exception) -> reason when it is the implementation's own refusal of a
    #                                     variant raised outside its entry point (fla's missing backward), else None
    offered: Callable | None = None     # (pass, dtype) -> why the implementation does not offer it, else None
    unsupported: Callable | None = None   # (inputs) -> why the implementation does not take them, else None
    layout: str = ""                    # the canonical call in words: each input's shape, dtype and meaning; outputs
    adapt_inputs: Callable | None = None   # (canonical inputs) -> the inputs as the implementation takes them (a
    #                                     convention that changed across its versions), before anything sees them
    dtype_inputs: tuple[str, ...] = ("q", "k", "v")   # the inputs in the checked dtype (`verify compare --inputs`)
    entry: Callable | None = None       # () -> the production entry point the adapter calls (its signature's options)
    entry_params: dict = field(default_factory=dict)   # each parameter of the entry point with a default -> the
    #                                     record's optional input or structure option that varies it, or a Fixed

    def __post_init__(self):
        """A bad record is refused when it is made (PyTorch's OpInfo does the same), naming the field."""
        def bad(what: str):
            raise ValueError(f"op record {self.name!r}: {what}")
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            bad("name must be lower-case letters, digits and _ (it is a word of check ids)")
        if not self.impl or not NAME.fullmatch(self.impl):
            bad(f"impl {self.impl!r} must be lower-case letters, digits and _")
        for field_ in ("kernel", "oracle", "same_dtype", "make_inputs", "cases", "error_inputs"):
            if not callable(getattr(self, field_)):
                bad(f"{field_} must be callable")
        if not isinstance(self.conventions, Conventions):
            bad("conventions must be a Conventions")
        if not self.required or not self.outputs:
            bad("required inputs and outputs must not be empty")
        if not set(self.fp32_outputs) <= set(self.outputs):
            bad(f"fp32_outputs {sorted(set(self.fp32_outputs) - set(self.outputs))} are not outputs")
        if set(self.required) & set(self.optional):
            bad(f"inputs both required and optional: {sorted(set(self.required) & set(self.optional))}")
        if not set(self.grad_inputs) <= set(self.required) | set(self.optional):
            bad(f"grad_inputs {sorted(set(self.grad_inputs) - set(self.required) - set(self.optional))} are not inputs")
        if not self.passes or not set(self.passes) <= {"fwd", "bwd"}:
            bad(f"passes {self.passes} must be fwd and/or bwd (decode is the decode field)")
        if missing := [p for p in (*self.passes, *(("decode",) if self.decode else ())) if p not in self.budget_factor]:
            bad(f"budget_factor has no factor c for {missing}")
        if not self.regimes:
            bad("regimes must not be empty")
        if not self.dtypes or not set(self.dtypes) <= {"bf16", "fp32"}:
            bad(f"conventions.dtypes {self.dtypes} must be bf16 and/or fp32")
        if self.dot not in (None, "ieee", "tf32"):
            bad(f"dot {self.dot!r} must be None (the run's --fp32-dot), 'ieee' or 'tf32'")
        if self.references not in ("device", "cpu"):
            bad(f"references {self.references!r} must be 'device' or 'cpu'")
        self._validate_parts(bad)

    def _validate_parts(self, bad) -> None:
        """The parts of a record that are records of their own (validated when made) and the names that tie them to
        the record: the conventions, probes, decode pass, structure, stages, regression cases, mutants and entry
        parameters."""
        if not all(isinstance(p, ConventionProbe) for p in self.probes):
            bad("probes must be ConventionProbes")
        if self.decode is not None and (not isinstance(self.decode, Decode) or
                                        not set(self.decode.regimes) <= set(self.regimes)):
            bad("decode must be a Decode whose regimes are regimes of the record")
        if self.structure is not None and not isinstance(self.structure, Structure):
            bad("structure must be a Structure")
        passes = (*self.passes, *(("decode",) if self.decode else ()))
        if not set(self.stages) <= set(passes) or not all(callable(f) for f in self.stages.values()):
            bad(f"stages must map some of the passes {passes} to stages(op, x, dtype, fp32_dot) -> [Stage]")
        for key in self.regression_cases:
            pass_, _, rest = key.partition(".")
            dtype, _, regime = rest.partition(".")
            if pass_ not in passes or dtype not in self.dtypes or regime not in self.regimes:
                bad(f"regression case key {key!r} must read <pass>.<dtype>.<regime> of the record")
        if not all(getattr(m, "killers", None) for m in self.mutants):
            bad("mutants must be Mutants, each with its killers")
        if not all(isinstance(v, (str, Fixed)) for v in self.entry_params.values()):
            bad("entry_params must map a parameter to the optional input or option that varies it, or a Fixed")

    @property
    def dtypes(self) -> tuple[str, ...]:
        return self.conventions.dtypes

    def check_id(self, pass_: str, dtype: str, regime: str) -> str:
        return str(CheckId.kernel(self.impl, self.name, pass_, dtype, regime))

    def convention_id(self, name: str) -> str:
        return str(CheckId.kernel(self.impl, self.name, "convention", name))

    def float32_outputs(self, x: dict | None = None) -> set[str]:
        """The outputs returned in float32 for inputs x: fp32_outputs, and those an option asks for (fp32_when)."""
        return set(self.fp32_outputs) | set(self.fp32_when(x) if self.fp32_when is not None and x is not None else ())

    def inputs(self, case, dtype, device="cpu") -> dict:
        return {n: t for n, t in self.make_inputs(case, dtype, device).items() if n in self.required + self.optional}


def as_tuple(x) -> tuple:
    """The outputs of a record's callable as a tuple (single-output ops return one tensor)."""
    return x if isinstance(x, tuple) else (x,)


def scale_of(x: dict) -> float | None:
    """The canonical attention scale 1/sqrt(D), D the key head dim (the last dim of q); None for an op without
    queries (fla's modules: a convolution, a norm), whose callables take and ignore `scale`."""
    return x["q"].shape[-1] ** -0.5 if "q" in x else None


def scale_default_probe(op_name: str, case) -> ConventionProbe:
    return ConventionProbe("scale_default", f"measures that fla {op_name} with scale=None uses 1/sqrt(D)",
                           "scale=None means 1", case, lambda op, x, s: op.oracle(**x, scale=1.0),
                           kernel_scale_none=True)
