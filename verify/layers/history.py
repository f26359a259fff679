"""What changed in fla's layers between versions, declared as data: each convention is its value in the oldest tree
and the commits (of fla-org/flash-linear-attention) that changed it.  History explains a verdict, it never
excuses one.  A convention is of one of three kinds:

  form    how the tree computes the same function (what the layer hands its op, a state layout, an op's name, a
          norm's form, a dtype): the literal and the probes read `value(name)` for the tree under test, and the
          convention-* comparisons probe that the tree really follows it (a tree that changes a form fails);
  option  an option the layer's constructor takes from the change on: a tree before it that refuses the option by
          its signature makes the case unsupported (pathmdn_verify.layers.common.build), one that swallows it
          (**kwargs) builds a layer without it and fails against the literal, which takes the option as asked;
  fix     a defect the change removed (an ignored argument, an assertion or a raise on a valid call): a tree
          before it computes something other than the literal, or raises, and fails.

`explain(name)` says, for a tree before the change, which commit changed it: the checks add it to a failing or
unsupported result's message, so that a failure and `verify bisect` name the same commit.

Where a tree lies: a git checkout by its HEAD (`git merge-base --is-ancestor`); a tree without git (the installed
package, an archive) by the __version__ its fla/__init__.py says against the version each change was made in.  A
tree of the very version a change was made in, without git, is on both sides: ConventionUnknown, whose reason the
check reports as unsupported where a form decides the literal (give a git checkout), and "may predate" in an
explanation.  Changes made after the mirror's HEAD (fla 0.6.0, not in its history) are declared by version alone
(commit None).
"""
from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version


class ConventionUnknown(Exception):
    """The tree's place in history cannot decide a convention (no git, and the version the change was made in)."""


@dataclass(frozen=True)
class Change:
    commit: str | None     # the commit that made it (None: after the mirror's HEAD, decided by version)
    date: str
    version: str           # the __version__ fla/__init__.py says at that commit
    what: str

    def __str__(self):
        return f"{self.commit or 'fla ' + self.version} ({self.date}: {self.what})"


KINDS = ("form", "option", "fix")


@dataclass(frozen=True)
class Convention:
    name: str
    what: str
    oldest: object                               # the value before the first change
    changes: tuple[tuple[Change, object], ...]   # (change, value from it on), oldest first
    kind: str = "form"                           # form, option or fix (the module docstring)


def _c(commit, date, version, what):
    return Change(commit, date, version, what)


CONVENTIONS = {c.name: c for c in (
    Convention("gdn.g_arg", "what GatedDeltaNet hands its op as g", "log_alpha", (
        (_c("e3c88963", "2026-04-06", "0.5.0", "chunk path: raw a_proj(x), gate in the kernel"), "g_raw chunk"),
        (_c("1feb67a9", "2026-04-19", "0.5.0", "recurrent path too"), "g_raw"))),
    Convention("gdn.beta_arg", "what GatedDeltaNet hands its op as beta", "beta", (
        (_c("19b5a3f4", "2026-05-25", "0.5.1", "raw b_proj(x), sigmoid and doubling in the kernel"), "beta_raw"),)),
    Convention("gdn.state", "GatedDeltaNet's recurrent state layout in the cache", "[N,H,K,V]", (
        (_c("fd3b8b91", "2026-05-18", "0.5.1", "state_v_first"), "[N,H,V,K]"),)),
    Convention("gdn.allow_neg_eigval", "GatedDeltaNet's constructor takes allow_neg_eigval (its **kwargs "
               "swallowed it before)", False, ((_c("ea8f1ee3", "2025-06-17", "0.3.0", "allow_neg_eigval"), True),),
               "option"),
    Convention("gdn.num_v_heads", "GatedDeltaNet's constructor takes num_v_heads (grouped value heads; its "
               "**kwargs swallowed it before)", False, ((_c("77b701b9", "2025-06-04", "0.2.2", "GVA"), True),),
               "option"),
    Convention("gdn.no_short_conv", "GatedDeltaNet builds with use_short_conv=False (raised UserWarning before)",
               False, ((_c("b52d4ee6", "2025-06-05", "0.2.2", "warnings.warn instead of raise"), True),), "fix"),
    Convention("gdn.train_short", "GatedDeltaNet trains at q_len <= 64 (asserted chunk mode in training before)",
               False, ((_c("feb153a3", "2025-11-09", "0.4.0", "mode by q_len only in eval"), True),), "fix"),
    Convention("gdn.fp32_chunk", "GatedDeltaNet's chunk path (training, eval past 64 tokens) takes float32 (its "
               "op asserted bfloat16 before)", False, (
        (_c("38cc6191", "2025-10-24", "0.4.0", "chunk_delta_h / chunk_o type handling"), True),), "fix"),
    Convention("gdn.gva_qk", "GatedDeltaNet with num_v_heads > num_heads: q and k as its op receives them",
               "repeated", ((_c("8bcc1057", "2026-04-05", "0.5.0", "the kernels group the value heads"), "grouped"),)),
    Convention("gdn.conv_bias", "GatedDeltaNet's short convolutions take conv_bias (ignored before)", False, (
        (_c("4e719f2f", "2025-06-09", "0.2.2", "conv_bias passed on"), True),), "fix"),
    Convention("gdn.train_recurrent_mode", "GatedDeltaNet built with mode='fused_recurrent' trains (asserted chunk "
               "mode in training before)", False, ((_c(None, "2026-09", "0.6.0", "chunk whenever grad is on"), True),),
               "fix"),
    Convention("gdn.output_gate_activation", "GatedDeltaNet's constructor takes output_gate_activation (its "
               "**kwargs swallowed it before)", False, (
        (_c(None, "2026-09", "0.6.0", "swish / silu / sigmoid output gate"), True),), "option"),
    Convention("gdn.mask_and_cu_seqlens", "GatedDeltaNet given cu_seqlens and an attention_mask keeps the caller's "
               "cu_seqlens (recomputed them from the mask before, overwriting them)", False, (
        (_c("9b3c930c", "2026-04-17", "0.5.0", "a passed cu_seqlens wins, then repadding by the mask's indices "
            "raises UnboundLocalError"), False),
        (_c("f7c2c191", "2026-08-03", "0.5.2", "the output repadded only where the mask unpadded it"), True)), "fix"),
    Convention("fox.mask_and_cu_seqlens", "ForgettingAttention given cu_seqlens and an attention_mask keeps the "
               "caller's cu_seqlens (recomputed them from the mask before)", False, (
        (_c("f7c2c191", "2026-08-03", "0.5.2", "a passed cu_seqlens wins"), True),), "fix"),
    Convention("path.mask_and_cu_seqlens", "PaTHAttention takes cu_seqlens with an attention_mask (asserted not "
               "both before)", False, (
        (_c("f7c2c191", "2026-08-03", "0.5.2", "a passed cu_seqlens wins (the training branch)"), True),), "fix"),
    Convention("path.op", "the name of the PaTH op PaTHAttention calls", "parallel_path_attention", (
        (_c("3d70f7de", "2025-09-02", "0.3.1", "renamed"), "parallel_path_attn"),)),
    Convention("path.qk_norm", "PaTHAttention's q/k RMSNorm", "flat", (
        (_c("721a205a", "2025-10-03", "0.3.2", "per head, training branch only"), "per_head"),)),
    Convention("path.gate_dtype", "the dtype of PaTHAttention's beta and w as the op receives them", "layer", (
        (_c("721a205a", "2025-10-03", "0.3.2", "float32"), "fp32"),)),
    Convention("path.w_options", "PaTHAttention's constructor takes use_low_rank_w, conv_size and conv_bias "
               "(before: low-rank w only without GQA)", False, (
        (_c("7046e319", "2025-07-08", "0.3.0", "use_low_rank_w, conv_size, conv_bias"), True),), "option"),
    Convention("modules.short_conv", "what fla's ShortConvolution runs on a CPU without causal-conv1d: decoding "
               "and its cache", "causal-conv1d", (
        (_c("a46f204c", "2025-06-05", "0.2.2", "triton kernels, power-of-2 widths only"), "triton pow2"),
        (_c("b48a2451", "2025-06-15", "0.2.2", "any width"), "triton"))),
)}


@dataclass(frozen=True)
class Tree:
    version: str | None
    commit: str | None      # HEAD of the git checkout that tracks fla/__init__.py
    root: str | None        # that checkout's directory

    def __str__(self):
        return f"fla {self.version}" + (f"@{self.commit[:12]}" if self.commit else " (no git)")


@functools.lru_cache(maxsize=None)
def _tree_at(init: str) -> Tree:
    from pathmdn_verify.kernels.fla_import import read_version
    from pathmdn_verify.platform.environment import git_commit
    path = Path(init)
    return Tree(read_version(path), git_commit(path), str(path.parent))


def current() -> Tree:
    """The fla that `import fla` loads (the --kernel-root tree or the installed package)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        return Tree(None, None, None)
    return _tree_at(spec.origin)


def _version(v: str | None) -> Version | None:
    try:
        return Version(v) if v else None
    except InvalidVersion:
        return None


@functools.lru_cache(maxsize=None)
def _ancestor(root: str, commit: str, head: str) -> bool | None:
    from pathmdn_verify.platform.environment import git_is_ancestor
    return git_is_ancestor(root, commit, head)


def contains(tree: Tree, change: Change) -> bool:
    """Whether the tree has the change; ConventionUnknown when its place cannot tell."""
    if change.commit and tree.commit:
        found = _ancestor(tree.root, change.commit, tree.commit)
        if found is not None:
            return found
    mine, then = _version(tree.version), _version(change.version)
    if mine is None or then is None or (mine == then and change.commit):
        raise ConventionUnknown(f"{tree} cannot be placed against {change}: fla {change.version} has the "
                                "change in some of its commits only; verify a git checkout")
    return mine >= then


def value(name: str, tree: Tree | None = None):
    """The convention's value for the tree (default: the fla under test)."""
    conv = CONVENTIONS[name]
    tree = tree or current()
    out = conv.oldest
    for change, v in conv.changes:
        if not contains(tree, change):
            break
        out = v
    return out


def explain(name: str, tree: Tree | None = None) -> str | None:
    """For a tree before one of the convention's changes, the first such change in words (what a failing or
    unsupported result adds to its message); None for a tree that has them all."""
    conv, tree = CONVENTIONS[name], tree or current()
    for change, _ in conv.changes:
        try:
            if not contains(tree, change):
                return f"{tree} predates {change}: {conv.what}"
        except ConventionUnknown:
            return f"{tree} may predate {change}: {conv.what}"
    return None


def declared(tree: Tree | None = None) -> dict:
    """Every convention's value for the tree (or the reason it is unknown): the layer checks' details."""
    out = {}
    for name in CONVENTIONS:
        try:
            out[name] = value(name, tree)
        except ConventionUnknown as exc:
            out[name] = f"unknown: {exc}"
    return out
