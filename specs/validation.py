"""Argument checking for the attention protocol (docs/design.md, CONTRACT 1).

Every public entry point that takes q, k, v runs `check_attention_args` first, so
bad input fails with a message that names the argument and the rule it breaks
instead of a broadcasting error deep inside NumPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specs.dtypes import is_float

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


class AttentionInputError(ValueError):
    """An argument does not satisfy the attention protocol."""


@dataclass(frozen=True)
class AttentionShape:
    """The sizes named by the protocol: q (batch, heads, n_q, d), k (.., heads_kv, n_k, d), v (.., d_v)."""

    batch: int
    heads: int
    heads_kv: int
    n_q: int
    n_k: int
    d: int
    d_v: int

    @property
    def group(self) -> int:
        """Query heads per kv head (1 for MHA, `heads` for MQA)."""
        return self.heads // self.heads_kv

    @property
    def scores_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.n_q, self.n_k)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.n_q, self.d_v)


def _as_float_array(name: str, x: object, finite: bool) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise AttentionInputError(f"{name} must be a numpy array, got {type(x).__name__}")
    if not is_float(x.dtype):
        raise AttentionInputError(f"{name} has dtype {x.dtype}; expected a floating-point dtype")
    if x.ndim != 4:
        raise AttentionInputError(
            f"{name} must be 4-D (batch, heads, seq, dim); got {x.ndim}-D with shape {x.shape}"
        )
    if finite and not np.all(np.isfinite(x)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise AttentionInputError(f"{name} contains a non-finite value {x[bad]} at index {bad}")
    return x


def check_shapes(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, finite: bool = True) -> AttentionShape:
    """Check q, k, v against the protocol and return the named sizes.

    finite=True (the oracle's default) rejects NaN and Inf; implementations pass finite=False, since
    non-finite values in positions a query may not see (padding) must simply not reach its output.
    """
    q, k, v = (_as_float_array(n, x, finite) for n, x in (("q", q), ("k", k), ("v", v)))
    batch, heads, n_q, d = q.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise AttentionInputError(
            f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}"
        )
    heads_kv, n_k, d_k = k.shape[1:]
    if v.shape[1] != heads_kv:
        raise AttentionInputError(f"k has {heads_kv} heads but v has {v.shape[1]}")
    if v.shape[2] != n_k:
        raise AttentionInputError(f"k has n_k={n_k} keys but v has {v.shape[2]} values")
    if d_k != d:
        raise AttentionInputError(f"q has d={d} but k has d={d_k}; q and k must share the last dim")
    for name, size in (("batch", batch), ("heads", heads), ("heads_kv", heads_kv),
                       ("n_q", n_q), ("n_k", n_k), ("d", d), ("d_v", v.shape[3])):
        if size == 0:
            raise AttentionInputError(f"empty input: {name} = 0 (q {q.shape}, k {k.shape}, v {v.shape})")
    if heads % heads_kv:
        raise AttentionInputError(
            f"heads={heads} (q.shape[1]) is not a multiple of heads_kv={heads_kv} (k.shape[1])"
        )
    return AttentionShape(batch, heads, heads_kv, n_q, n_k, d, v.shape[3])


def resolve_scale(scale: object, d: int) -> float:
    """`None` means 1/sqrt(d); anything else must be a finite real number: a Python int or float, a NumPy
    scalar, or a 0-d NumPy array of a real dtype (what `np.asarray(0.5)` or a reduction kept as an array gives)."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, np.ndarray) and scale.ndim == 0 and (np.issubdtype(scale.dtype, np.floating)
                                                             or np.issubdtype(scale.dtype, np.integer)):
        scale = scale[()]
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)):
        raise AttentionInputError(f"scale must be a real number or None, got {type(scale).__name__}")
    if not math.isfinite(float(scale)):
        raise AttentionInputError(f"scale must be finite, got {scale}")
    return float(scale)


def check_mask(mask: object, shape: AttentionShape) -> np.ndarray | None:
    """A mask is boolean, True = may attend, broadcastable to (batch, heads, n_q, n_k)."""
    if mask is None:
        return None
    if not isinstance(mask, np.ndarray):
        raise AttentionInputError(f"mask must be a numpy array or None, got {type(mask).__name__}")
    if mask.dtype != np.bool_:
        raise AttentionInputError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    try:
        return np.broadcast_to(mask, shape.scores_shape)
    except ValueError:
        raise AttentionInputError(
            f"mask of shape {mask.shape} does not broadcast to "
            f"(batch, heads, n_q, n_k) = {shape.scores_shape}"
        ) from None


def check_causal(causal: object, alignment: object) -> None:
    if not isinstance(causal, (bool, np.bool_)):
        raise AttentionInputError(f"causal must be a bool, got {causal!r}")
    if alignment not in CAUSAL_ALIGNMENTS:
        raise AttentionInputError(
            f"causal_alignment must be one of {CAUSAL_ALIGNMENTS}, got {alignment!r}"
        )
