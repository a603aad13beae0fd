"""Implementations for the keyword-domain properties (properties/test_keyword_domain.py): each wrong one makes
one mistake at one keyword's edge, and the correct one is written in an unusual but legitimate way;
tests/test_keyword_edges.py runs them all with --impl."""

from __future__ import annotations

import math

import numpy as np

from impls.registry import attention_impl
from specs.dropout_mask import keep_mask

CAPS = dict(backend="numpy", dtypes=("float64",), gqa=False, lse=True)


def _attend(q, k, v, *, scale, mask, dropout_p=0.0, dropout_seed=0, return_lse=False, empty_lse=-math.inf):
    """softmax(q k^T scale) v, boolean mask, dropout by specs.dropout_mask, rows that see no key give 0 and
    lse `empty_lse`."""
    s = (q @ k.swapaxes(-1, -2)) * scale
    visible = np.ones(s.shape, dtype=bool) if mask is None else np.broadcast_to(mask, s.shape)
    s = np.where(visible, s, -np.inf)
    seen = visible.any(axis=-1, keepdims=True)
    top = np.where(seen, s.max(axis=-1, keepdims=True), 0.0)
    e = np.exp(s - top)
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(seen, total, 1.0)
    if dropout_p:
        w = np.where(keep_mask(dropout_seed, dropout_p, w.shape), w / (1 - dropout_p), 0.0)
    out = w @ np.where(visible.any(axis=-2)[..., None], v, 0.0)
    with np.errstate(divide="ignore"):
        lse = np.where(seen, top + np.log(total), empty_lse)[..., 0]
    return (out, lse) if return_lse else out


def _default(scale, d):
    return 1 / math.sqrt(d) if scale is None else float(scale)


# ---- wrong -----------------------------------------------------------------------------------------------

@attention_impl(name="wrong-scale-zero-as-default", **CAPS)
def scale_zero_as_default(q, k, v, *, scale=None, mask=None, return_lse=False):
    """`scale or 1/sqrt(d)`: a scale of 0 is taken for the default."""
    return _attend(q, k, v, scale=float(scale or 1 / math.sqrt(q.shape[-1])), mask=mask, return_lse=return_lse)


@attention_impl(name="wrong-scale-absolute", **CAPS)
def scale_absolute(q, k, v, *, scale=None, mask=None, return_lse=False):
    """Takes |scale|: a negative scale no longer reverses the ranking."""
    return _attend(q, k, v, scale=abs(_default(scale, q.shape[-1])), mask=mask, return_lse=return_lse)


@attention_impl(name="wrong-square-mask-transposed", **CAPS)
def square_mask_transposed(q, k, v, *, scale=None, mask=None, return_lse=False):
    """Accepts a key-major (n_k, n_q) rank-2 mask by transposing any rank-2 mask shaped (n_k, n_q), which a
    square one (n_q == n_k) also is."""
    if mask is not None and mask.ndim == 2 and mask.shape == (k.shape[2], q.shape[2]):
        mask = mask.T
    return _attend(q, k, v, scale=_default(scale, q.shape[-1]), mask=mask, return_lse=return_lse)


@attention_impl(name="wrong-dropout-zero-takes-dropout-path", **CAPS)
def dropout_zero_takes_dropout_path(q, k, v, *, scale=None, mask=None, dropout_p=None, dropout_seed=0,
                                    return_lse=False):
    """Any dropout_p, 0 included, takes the dropout path, whose weights are exp(S - lse) * keep / (1 - p):
    within every tolerance, but at p = 0 not the output of the call without dropout."""
    s = _default(scale, q.shape[-1])
    if dropout_p is None:
        return _attend(q, k, v, scale=s, mask=mask, return_lse=return_lse)
    _, lse = _attend(q, k, v, scale=s, mask=mask, return_lse=True)
    scores = (q @ k.swapaxes(-1, -2)) * s
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = np.exp(scores - np.where(np.isfinite(lse), lse, 0.0)[..., None])
    w = np.where(keep_mask(dropout_seed, dropout_p, w.shape), w / (1 - dropout_p), 0.0)
    out = w @ v
    return (out, lse) if return_lse else out


@attention_impl(name="wrong-empty-row-lse-zero", **CAPS)
def empty_row_lse_zero(q, k, v, *, scale=None, mask=None, return_lse=False):
    """Returns log-sum-exp 0 for a row that sees no key (log of the 1 it divides by)."""
    return _attend(q, k, v, scale=_default(scale, q.shape[-1]), mask=mask, return_lse=return_lse, empty_lse=0.0)


@attention_impl(name="wrong-empty-row-lse-nan", **CAPS)
def empty_row_lse_nan(q, k, v, *, scale=None, mask=None, return_lse=False):
    """Returns NaN (-inf - -inf) as the log-sum-exp of a row that sees no key."""
    return _attend(q, k, v, scale=_default(scale, q.shape[-1]), mask=mask, return_lse=return_lse,
                   empty_lse=math.nan)


# ---- correct, written unusually ----------------------------------------------------------------------------

@attention_impl(name="correct-scale-folded-into-q-base-2", **CAPS)
def scale_folded_into_q_base_2(q, k, v, *, scale=None, mask=None, dropout_p=0.0, dropout_seed=0,
                               return_lse=False):
    """The scale and log2(e) folded into q before the product, the softmax in base 2, the mask lifted to
    rank 4 by reshaping (not broadcasting), the LSE brought back to base e; rows that see no key give 0."""
    s = 1 / np.sqrt(q.shape[-1]) if scale is None else np.asarray(scale, dtype=np.float64)
    scores = (q * (s * math.log2(math.e))) @ k.swapaxes(-1, -2)
    if mask is not None:
        lifted = np.reshape(mask, (1,) * (4 - mask.ndim) + mask.shape)
        scores = np.where(lifted, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    seen = top > -np.inf
    e = np.exp2(scores - np.where(seen, top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(seen, total, 1.0)
    if dropout_p:
        w = w * keep_mask(dropout_seed, dropout_p, w.shape) / (1 - dropout_p)
    out = w @ v
    if not return_lse:
        return out
    with np.errstate(divide="ignore"):
        lse = np.where(seen, top + np.log2(total), -np.inf)[..., 0] / math.log2(math.e)
    return out, lse
