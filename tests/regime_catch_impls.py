"""Deliberately wrong implementations for `calls-are-independent` and `deterministic` (one mistake each), and
correct ones written in unusual ways; tests/test_regime_catches.py runs them with --impl, as a user would.

All compute the oracle's formula (specs.reference) in float64; what differs is what they keep between calls and
the order in which they sum.
"""

from __future__ import annotations

import numpy as np

from impls.registry import attention_impl
from specs.gradients import attention_backward, sum_groups
from specs.reference import attention, repeat_kv

CAPS = dict(backend="numpy", dtypes=("float64",))
ROWS_PER_BLOCK = 4  # query rows whose dK contribution one "thread block" adds, in the backwards below
LONG_KEYS = 1024  # past this many keys the long-only wrong implementation changes its order


def _attention_with_keys(q: np.ndarray, k_t: np.ndarray, v: np.ndarray, *, causal: bool,
                         mask: np.ndarray | None) -> np.ndarray:
    """softmax(q k_t) v, k_t = the kv heads' K^T, already scaled and repeated per query head."""
    scores = q @ k_t
    allowed = np.ones(scores.shape, dtype=bool)
    if causal:
        allowed &= np.tril(np.ones(scores.shape[-2:], dtype=bool))
    if mask is not None:
        allowed &= mask
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    weights = e / np.where(total > 0, total, 1.0)
    return weights @ np.where(allowed.any(axis=-2)[..., None], repeat_kv(v, q.shape[1] // v.shape[1]), 0.0)


def _transformed_keys(k: np.ndarray, heads: int, d: int, scale: float | None) -> np.ndarray:
    s = d ** -0.5 if scale is None else scale
    return np.ascontiguousarray(repeat_kv(k, heads // k.shape[1]).swapaxes(-1, -2) * s)


# ---- calls-are-independent -------------------------------------------------------------------------------

_BY_SHAPE: dict[tuple, np.ndarray] = {}


@attention_impl(name="wrong-k-cache-keyed-on-shape", **CAPS)
def k_cache_keyed_on_shape(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong: keeps the scaled, transposed K of the first call of each shape and reuses it, with the new Q and V,
    for every later call of that shape (a projection cache keyed on the layout, not the values)."""
    key = (q.shape, k.shape, scale)
    if key not in _BY_SHAPE:
        _BY_SHAPE[key] = _transformed_keys(k, q.shape[1], q.shape[-1], scale)
    return _attention_with_keys(q, _BY_SHAPE[key], v, causal=causal, mask=mask)


_LAST: dict[str, tuple] = {}


@attention_impl(name="correct-k-cache-checks-bytes", **CAPS)
def k_cache_checks_bytes(q, k, v, *, scale=None, causal=False, mask=None):
    """Correct: keeps the last call's scaled, transposed K and reuses it only when K's bytes, shape, dtype, the
    query heads and the scale are the same as then."""
    key = (k.tobytes(), k.shape, k.dtype.str, q.shape[1], q.shape[-1], scale)
    if _LAST.get("key") != key:
        _LAST.update(key=key, k_t=_transformed_keys(k, q.shape[1], q.shape[-1], scale))
    return _attention_with_keys(q, _LAST["k_t"], v, causal=causal, mask=mask)


# ---- deterministic: the backward ------------------------------------------------------------------------

def _backward_with_dk_block_order(q, k, v, d_out, order_of, **kwargs):
    """The oracle's dQ, dV; dK summed over query blocks of ROWS_PER_BLOCK rows, added in `order_of(blocks)`."""
    d_q, _, d_v = attention_backward(q, k, v, d_out, **kwargs)
    result = attention(q, k, v, **kwargs)
    d_p = d_out @ repeat_kv(v, q.shape[1] // v.shape[1]).swapaxes(-1, -2)
    d_s = result.weights * (d_p - np.sum(d_out * result.out, axis=-1, keepdims=True))
    starts = np.arange(0, q.shape[-2], ROWS_PER_BLOCK)
    d_k_all = np.zeros(d_s.shape[:2] + (k.shape[-2], k.shape[-1]))
    for start in np.asarray(order_of(starts)):
        rows = slice(int(start), int(start) + ROWS_PER_BLOCK)
        d_k_all += result.scale * (d_s[..., rows, :].swapaxes(-1, -2) @ q[..., rows, :])
    return d_q, sum_groups(d_k_all, k.shape[1]), d_v


def _oracle_out(q, k, v, *, scale=None, causal=False, mask=None):
    return attention(q, k, v, scale=scale, causal=causal, mask=mask).out


@attention_impl(name="wrong-backward-dk-atomic-order", **CAPS)
def backward_dk_atomic_order(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong in the backward only: each block of query rows adds its dK contribution in an order that changes
    from call to call (atomic adds, modelled by a generator seeded from the OS), so dK's rounding changes."""
    return _oracle_out(q, k, v, scale=scale, causal=causal, mask=mask)


backward_dk_atomic_order.attention_backward = lambda q, k, v, d_out, **kw: _backward_with_dk_block_order(
    q, k, v, d_out, np.random.default_rng().permutation, **kw)


@attention_impl(name="correct-backward-dk-last-block-first", **CAPS)
def backward_dk_last_block_first(q, k, v, *, scale=None, causal=False, mask=None):
    """Correct: the same block-by-block dK, added last block first, in that order on every call."""
    return _oracle_out(q, k, v, scale=scale, causal=causal, mask=mask)


backward_dk_last_block_first.attention_backward = lambda q, k, v, d_out, **kw: _backward_with_dk_block_order(
    q, k, v, d_out, lambda starts: starts[::-1], **kw)


# ---- deterministic: at length -----------------------------------------------------------------------------

def _in_key_order(q, k, v, order, *, scale, causal, mask):
    """The oracle's weights, multiplied into V with the keys visited in `order`."""
    result = attention(q, k, v, scale=scale, causal=causal, mask=mask)
    v_all = repeat_kv(v, q.shape[1] // v.shape[1])
    if result.allowed is not None:
        v_all = np.where(result.allowed.any(axis=-2)[..., None], v_all, 0.0)
    return result.weights[..., order] @ v_all[..., order, :]


@attention_impl(name="wrong-random-key-order-past-1024", **CAPS)
def random_key_order_past_1024(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong at length only: past LONG_KEYS keys it visits them in an order drawn anew each call (split-K work
    handed to whichever thread is free), so the output's rounding changes from call to call."""
    n_k = k.shape[-2]
    order = np.random.default_rng().permutation(n_k) if n_k > LONG_KEYS else np.arange(n_k)
    return _in_key_order(q, k, v, order, scale=scale, causal=causal, mask=mask)


@attention_impl(name="correct-key-order-from-length", **CAPS)
def key_order_from_length(q, k, v, *, scale=None, causal=False, mask=None):
    """Correct: visits the keys in a shuffled order that is a function of their number alone."""
    order = np.random.default_rng(k.shape[-2]).permutation(k.shape[-2])
    return _in_key_order(q, k, v, order, scale=scale, causal=causal, mask=mask)
