"""The generation cache a layer comparison hands to the layer: the tree's own Cache, found where the tree keeps it
(fla.models.cache_utils in fla 0.6.0, fla.models.utils in every earlier tree), or the harness's (HarnessCache)
where the tree's cannot serve here:

  * it cannot be built or updated with the installed transformers: trees up to 2025-08-20 call
    transformers' Cache.__init__() without layers (transformers >= 4.56 refuses), 2025-08-20 .. 09-10 pass
    layer_classes (gone in 4.56), 2025-09-10 .. 2026-07-10 give FLALayer no get_max_length, abstract in
    transformers 5 (TypeError at the first update);
  * the comparison needs reorder_cache, batch_repeat_interleave or crop and the tree's Cache does not define
    them for its own states (every tree before 0.6.0: transformers' base versions read key/value caches that
    fla's layers never fill).

Which one was used, and why, goes into the check's details (`cache`).  The harness's cache follows the protocol
the layers call (update, __getitem__, __len__, get_seq_length) and fla 0.6.0's semantics for it, written from
that protocol, not copied."""
from __future__ import annotations

import importlib

import torch

TREE_MODULES = ("fla.models.cache_utils", "fla.models.utils")    # where a tree keeps its Cache, newest first
OPERATIONS = ("reorder_cache", "batch_repeat_interleave", "crop")
STATES = ("recurrent_state", "attn_state", "conv_state", "ffn_state")


class HarnessCache:
    """Per layer a dict of recurrent_state, attn_state, conv_state, ffn_state.  Attention states (tuples of
    [B, T, ...] tensors) are appended along dim 1, keeping the last window_size tokens when cache_kwargs gives
    one; the others are replaced.  Every state tensor is batch-first: reorder_cache, batch_repeat_interleave and
    batch_select_indices act on dim 0 of each.  crop(n) keeps the first n tokens of the attention states and
    refuses (NotImplementedError) when a recurrent, convolution or ffn state is held, which cannot be rolled
    back, or a window has already dropped tokens.  get_seq_length counts the tokens seen per layer."""

    def __init__(self):
        self.states: list[dict] = []
        self.seen: list[int] = []
        self.window: list[int | None] = []

    def __len__(self):
        return len(self.states)

    def __getitem__(self, layer_idx: int) -> dict:
        if layer_idx >= len(self.states):
            raise KeyError(f"the cache holds {len(self.states)} layers, not layer {layer_idx}")
        return self.states[layer_idx]

    def __iter__(self):
        return iter(self.states)

    def get_seq_length(self, layer_idx: int | None = 0) -> int:
        i = layer_idx or 0
        return self.seen[i] if i < len(self.seen) else 0

    def update(self, recurrent_state=None, attn_state=None, conv_state=None, ffn_state=None, layer_idx: int = 0,
               offset: int | None = 1, cache_kwargs: dict | None = None, **_) -> dict:
        while len(self.states) <= layer_idx:
            self.states.append(dict.fromkeys(STATES))
            self.seen.append(0)
            self.window.append(None)
        state = self.states[layer_idx]
        window = (cache_kwargs or {}).get("window_size", self.window[layer_idx])
        self.window[layer_idx] = window
        for name, value in (("recurrent_state", recurrent_state), ("conv_state", conv_state),
                            ("ffn_state", ffn_state)):
            if value is not None:
                state[name] = value
        if attn_state is not None and attn_state[0] is not None:
            new = tuple(attn_state)
            old = state["attn_state"]
            joined = new if old is None else tuple(torch.cat([a, b], 1) for a, b in zip(old, new))
            state["attn_state"] = joined if window is None else tuple(t[:, -window:].contiguous() for t in joined)
            self.seen[layer_idx] += new[0].shape[1]
        else:
            self.seen[layer_idx] += 1 if offset is None else offset
        return state

    def _map(self, fn) -> None:
        def apply(v):
            if isinstance(v, torch.Tensor):
                return fn(v)
            if isinstance(v, (tuple, list)):
                return type(v)(apply(x) for x in v)
            return v
        self.states = [{k: apply(v) for k, v in s.items()} for s in self.states]

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        self._map(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.reorder_cache(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map(lambda t: t.repeat_interleave(repeats, dim=0))

    def crop(self, max_length: int) -> None:
        for i, state in enumerate(self.states):
            if max_length >= self.seen[i]:
                continue
            if any(state[k] is not None for k in ("recurrent_state", "conv_state", "ffn_state")):
                raise NotImplementedError("a recurrent or convolution state cannot be rolled back")
            if self.window[i] is not None and self.seen[i] > self.window[i]:
                raise NotImplementedError("the window has already dropped tokens")
            if state["attn_state"] is not None:
                state["attn_state"] = tuple(t[:, :max_length] for t in state["attn_state"])
            self.seen[i] = max_length


def tree_cache_class() -> tuple[type | None, str]:
    """(the tree's Cache class, where) or (None, why there is none)."""
    why = []
    for name in TREE_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            why.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        except Exception as exc:
            why.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if hasattr(module, "Cache"):
            return module.Cache, f"{name}.Cache"
    return None, "; ".join(why) or f"this fla has none of {', '.join(TREE_MODULES)}"


def _own(cls: type, operation: str) -> bool:
    """Whether fla itself defines `operation` on cls (not transformers' base class)."""
    for klass in cls.__mro__:
        if operation in vars(klass):
            return klass.__module__.startswith("fla.")
    return False


def new_cache(operations: tuple[str, ...] = ()) -> tuple[object, str]:
    """(an empty cache, which one and why): the tree's Cache when it can be built, updated once here and
    defines `operations` itself, else a HarnessCache."""
    cls, where = tree_cache_class()
    if cls is None:
        return HarnessCache(), f"the harness's cache (the tree has no Cache: {where})"
    try:
        probe = cls()
        probe.update(recurrent_state=torch.zeros(1), layer_idx=0, offset=1)
        probe[0]
    except Exception as exc:
        why = f"{where} cannot run with the installed transformers: {type(exc).__name__}: {exc}".splitlines()[0]
        return HarnessCache(), f"the harness's cache ({why})"
    lacking = [op for op in operations if not _own(cls, op)]
    if lacking:
        return HarnessCache(), (f"the harness's cache ({where} defines no {', '.join(lacking)} for fla's states: "
                                "transformers' base versions read key/value caches the layers never fill)")
    return cls(), where
