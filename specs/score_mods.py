"""The score modifications attention kernels ship beyond the seeds (issue 21), checked and applied for the oracle.

Beyond the seeds: FlashAttention's flash_attn_func (window_size, softcap, alibi_slopes), SDPA's float attn_mask (an
additive bias), attention sinks (a learned per-head logit in each row's softmax denominator, gpt-oss). The order,
on the scaled scores s = scale * q.k of query i and key j, with offset = n_k - n_q under the bottom-right causal
alignment and 0 under top-left (also when causal is off: FlashAttention always aligns its window bottom-right,
jax top-left):

1. softcap > 0: s <- softcap * tanh(s / softcap) (0 or negative: no cap);
2. ALiBi: s <- s - slope[b, h] * |i + offset - j|, neither scaled nor capped (FlashAttention applies it so);
3. bias: s <- s + bias[b, h, i, j], after the cap (transformers' gemma2 eager attention); -inf hides the key;
4. window_size=(left, right): key j is visible iff i + offset - left <= j <= i + offset + right, a negative side
   unbounded; with causal the right bound is 0 (causal's own j <= i + offset);
5. sinks: sink[h] joins each row's softmax denominator and carries no value, neither scaled nor capped; the
   log-sum-exp includes it, and a row that sees no key has output 0 and log-sum-exp sink[h].
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from specs.dtypes import is_float
from specs.validation import AttentionInputError, AttentionShape


@dataclass(frozen=True)
class ScoreMods:
    """The checked score modifications of one call; every field None (or softcap 0) means none."""

    bias: np.ndarray | None = None  # broadcast to (batch, heads, n_q, n_k)
    window: tuple[int, int] | None = None  # (left, right), negative = unbounded
    softcap: float = 0.0
    alibi_slopes: np.ndarray | None = None  # (batch, heads)
    sinks: np.ndarray | None = None  # (heads,)

    @property
    def any(self) -> bool:
        return (self.bias is not None or self.window is not None or self.softcap > 0
                or self.alibi_slopes is not None or self.sinks is not None)


NO_MODS = ScoreMods()


def check_score_mods(shape: AttentionShape, *, bias: object = None, window_size: object = None,
                     softcap: object = 0.0, alibi_slopes: object = None, sinks: object = None) -> ScoreMods:
    """Each keyword against the protocol, or an AttentionInputError naming the keyword and its value."""
    return ScoreMods(bias=_check_bias(bias, shape), window=_check_window(window_size),
                     softcap=_check_softcap(softcap), alibi_slopes=_check_slopes(alibi_slopes, shape),
                     sinks=_check_sinks(sinks, shape))


def _float_array(name: str, value: object) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise AttentionInputError(f"{name} must be a numpy array or None, got {type(value).__name__}")
    if not is_float(value.dtype):
        raise AttentionInputError(f"{name} must be floating point, got dtype {value.dtype}")
    return value


def _first(where: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(where)[0])


def check_bias_values(bias: object) -> np.ndarray:
    """`bias` as the protocol takes its values, whatever its shape: a floating-point array with no NaN and no +inf
    (-inf hides a key), or an AttentionInputError naming the first wrong value and where it is."""
    bias = _float_array("bias", bias)
    wrong = np.isnan(bias) | (bias == np.inf)
    if wrong.any():
        at = _first(wrong)
        raise AttentionInputError(f"bias holds {bias[at]} at {at}: a bias is finite, or -inf to hide a key")
    return bias


def _check_bias(bias: object, shape: AttentionShape) -> np.ndarray | None:
    if bias is None:
        return None
    bias = check_bias_values(bias)
    try:
        return np.broadcast_to(bias, shape.scores_shape)
    except ValueError:
        raise AttentionInputError(f"bias of shape {bias.shape} does not broadcast to (batch, heads, n_q, n_k) = "
                                  f"{shape.scores_shape}") from None


def _check_window(window_size: object) -> tuple[int, int] | None:
    if window_size is None:
        return None
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2 or not all(
            isinstance(side, numbers.Integral) and not isinstance(side, (bool, np.bool_)) for side in window_size):
        raise AttentionInputError(f"window_size must be a pair of integers (left, right), negative = unbounded, "
                                  f"got {window_size!r}")
    left, right = (int(side) for side in window_size)
    return None if left < 0 and right < 0 else (left, right)


def _check_softcap(softcap: object) -> float:
    if isinstance(softcap, np.ndarray) and softcap.ndim == 0:
        softcap = softcap[()]
    if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, numbers.Real):
        raise AttentionInputError(f"softcap must be a real number (0 or negative: none), got {softcap!r}")
    if not math.isfinite(float(softcap)):
        raise AttentionInputError(f"softcap must be finite (0 or negative: none), got {softcap!r}")
    return max(float(softcap), 0.0)


def _check_slopes(slopes: object, shape: AttentionShape) -> np.ndarray | None:
    if slopes is None:
        return None
    slopes = _float_array("alibi_slopes", slopes)
    if slopes.shape not in ((shape.heads,), (shape.batch, shape.heads)):
        raise AttentionInputError(f"alibi_slopes has shape {slopes.shape}; expected (heads,) = ({shape.heads},) or "
                                  f"(batch, heads) = ({shape.batch}, {shape.heads})")
    if not np.all(np.isfinite(slopes)):
        at = _first(~np.isfinite(slopes))
        raise AttentionInputError(f"alibi_slopes holds {slopes[at]} at {at}: slopes are finite")
    return np.broadcast_to(slopes, (shape.batch, shape.heads))


def _check_sinks(sinks: object, shape: AttentionShape) -> np.ndarray | None:
    if sinks is None:
        return None
    sinks = _float_array("sinks", sinks)
    if sinks.shape != (shape.heads,):
        raise AttentionInputError(f"sinks has shape {sinks.shape}; expected (heads,) = ({shape.heads},)")
    if np.isnan(sinks).any():
        at = _first(np.isnan(sinks))
        raise AttentionInputError(f"sinks holds nan at {at}: a sink is a logit (-inf: no sink)")
    return sinks


def alignment_offset(shape: AttentionShape, causal_alignment: str) -> int:
    """Where query i's diagonal meets the keys: i + offset (0 top-left, n_k - n_q bottom-right)."""
    return 0 if causal_alignment == "top_left" else shape.n_k - shape.n_q


def relative_positions(rows: range, keys: range, offset: int) -> np.ndarray:
    """(len(rows), len(keys)): j - (i + offset), key j's distance past query i's diagonal."""
    return np.arange(keys.start, keys.stop)[None, :] - (np.arange(rows.start, rows.stop)[:, None] + offset)


def causal_window(window: tuple[int, int] | None, causal: bool) -> tuple[int, int] | None:
    """The window causal leaves: its right bound 0 (causal alone is the window (-1, 0)); None: no bound."""
    if not causal:
        return window
    return (-1, 0) if window is None else (window[0], 0)


def visible_key_range(rows: range, n_k: int, window: tuple[int, int] | None, offset: int) -> range:
    """The keys some query of `rows` may see under `window` (causal_window's, with causal folded in) at this
    alignment offset: a tiled kernel skips the key blocks outside it."""
    first, last = 0, n_k - 1
    left, right = window or (-1, -1)
    if left >= 0:
        first = max(first, rows.start + offset - left)
    if right >= 0:
        last = min(last, rows.stop - 1 + offset + right)
    first = min(first, n_k)  # rows whose window starts past the last key see none
    return range(first, max(first, last + 1))


def window_visible(past: np.ndarray, window: tuple[int, int]) -> np.ndarray:
    """Boolean like `past` (relative_positions): key within (left, right) of the diagonal, a negative side
    unbounded."""
    left, right = window
    inside = np.ones(past.shape, bool)
    if left >= 0:
        inside &= past >= -left
    if right >= 0:
        inside &= past <= right
    return inside


def modify_scores(scores: np.ndarray, mods: ScoreMods, shape: AttentionShape, offset: int) -> np.ndarray:
    """Softcap, then ALiBi, then bias, each step rounded to the scores' dtype (the naive formula's precision)."""
    dtype = scores.dtype
    if mods.softcap > 0:
        cap = dtype.type(mods.softcap)
        scores = (cap * np.tanh(scores / cap)).astype(dtype, copy=False)
    if mods.alibi_slopes is not None:
        distance = np.abs(relative_positions(range(shape.n_q), range(shape.n_k), offset)).astype(dtype)
        slopes = mods.alibi_slopes.astype(dtype)[:, :, None, None]
        scores = (scores - slopes * distance).astype(dtype, copy=False)
    if mods.bias is not None:
        scores = (scores + mods.bias.astype(dtype)).astype(dtype, copy=False)
    return scores
