"""Implementations for fully-masked-rows-zero (DESIGN.md, oracle: fully masked rows give zeros): three wrong
ones, one mistake each, and a correct one written unusually; tests/test_masked_rows_catches.py runs them all with
--impl over properties/test_masking.py.

Every one is bottom-right aligned and returns its log-sum-exp (return_lse=True), so both the masked rows and the
rows before the first key (n_q > n_k) reach them, and the LSE of those rows is checked too.
"""

from __future__ import annotations

import numpy as np

from impls.registry import attention_impl
from specs.reference import repeat_kv

CAPS = dict(backend="numpy", dtypes=("float64",), causal_alignment="bottom_right", lse=True)


def _scores(q, k, *, scale, causal, mask, first_key_for_all=False):
    """Scaled scores and the boolean visibility (batch, heads, n_q, n_k), causal bottom-right aligned;
    first_key_for_all lets the rows before the first key see key 0 (the clamped-offset mistake)."""
    k = repeat_kv(k, q.shape[1] // k.shape[1])
    s = q @ k.swapaxes(-1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    n_q, n_k = s.shape[-2:]
    visible = np.ones(s.shape, dtype=bool)
    if causal:
        last = np.arange(n_q)[:, None] + n_k - n_q  # the last key query i may see
        visible &= np.arange(n_k)[None, :] <= (np.maximum(last, 0) if first_key_for_all else last)
    if mask is not None:
        visible &= mask
    return s, visible


def _softmax_rows(s, visible):
    """exp(S - max) / sum over the visible keys; a row that sees nothing gives weights 0 and LSE -inf."""
    empty = ~visible.any(-1, keepdims=True)
    hidden = np.where(visible, s, -np.inf)
    top = np.where(empty, 0.0, hidden.max(-1, keepdims=True))
    e = np.exp(hidden - top)
    total = e.sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = (top + np.log(total))[..., 0]
    return e / np.where(empty, 1.0, total), lse


def _finish(w, v, lse, return_lse):
    out = w @ repeat_kv(v, w.shape[1] // v.shape[1])
    return (out, lse) if return_lse else out


# ---- wrong -----------------------------------------------------------------------------------------------

@attention_impl(name="wrong-only-first-empty-row-zeroed", **CAPS)
def only_first_empty_row_zeroed(q, k, v, *, scale=None, causal=False, mask=None, return_lse=False):
    """Hidden scores set to finfo.min, so an empty row averages every value; only query row 0 is checked for
    having no key and zeroed."""
    s, visible = _scores(q, k, scale=scale, causal=causal, mask=mask)
    filled = np.where(visible, s, np.finfo(s.dtype).min)
    with np.errstate(over="ignore"):
        e = np.exp(filled - filled.max(-1, keepdims=True))
    w = e / e.sum(-1, keepdims=True)
    w[:, :, 0] = np.where(visible[:, :, 0].any(-1, keepdims=True), w[:, :, 0], 0.0)
    return _finish(w, v, _softmax_rows(s, visible)[1], return_lse)


@attention_impl(name="wrong-finite-lse-of-empty-rows", **CAPS)
def finite_lse_of_empty_rows(q, k, v, *, scale=None, causal=False, mask=None, return_lse=False):
    """Output right; the LSE is taken over scores whose hidden entries were set to finfo.min, so an empty
    row's LSE is finfo.min + log(n_k), finite, instead of -inf."""
    s, visible = _scores(q, k, scale=scale, causal=causal, mask=mask)
    w, _ = _softmax_rows(s, visible)
    filled = np.where(visible, s, np.finfo(s.dtype).min)
    top = filled.max(-1)
    with np.errstate(over="ignore"):
        lse = top + np.log(np.exp(filled - top[..., None]).sum(-1))
    return _finish(w, v, lse, return_lse)


@attention_impl(name="wrong-rows-before-first-key-see-key-0", **CAPS)
def rows_before_first_key_see_key_0(q, k, v, *, scale=None, causal=False, mask=None, return_lse=False):
    """Bottom-right causal with the offset clamped at 0: when n_q > n_k the top n_q - n_k rows, which see no
    key, attend to key 0 (out = v_0, LSE = its score) instead of giving 0."""
    s, visible = _scores(q, k, scale=scale, causal=causal, mask=mask, first_key_for_all=True)
    w, lse = _softmax_rows(s, visible)
    return _finish(w, v, lse, return_lse)


# ---- correct, written unusually ----------------------------------------------------------------------------

@attention_impl(name="correct-lse-form-nan-to-num-on-empty-rows", **CAPS)
def lse_form_nan_to_num_on_empty_rows(q, k, v, *, scale=None, causal=False, mask=None, return_lse=False):
    """The LSE first (np.logaddexp.reduce over the visible scores: -inf for an empty row), then
    exp(S - LSE) V, which is NaN (-inf - -inf) on an empty row; np.nan_to_num turns exactly those rows to 0."""
    s, visible = _scores(q, k, scale=scale, causal=causal, mask=mask)
    hidden = np.where(visible, s, -np.inf)
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp.reduce(hidden, axis=-1)
        w = np.exp(hidden - lse[..., None])
    empty = ~visible.any(-1, keepdims=True)
    out = _finish(w, v, lse, False)
    out = np.where(empty, np.nan_to_num(out), out)
    return (out, lse) if return_lse else out
