"""The correct zoo: attention written in unusual but legitimate ways, as an outside user would (CONTRACT 1,
no import of the suite). Every applicable property must pass on each, under `ci` and `thorough`:
a false alarm here is a bug in the suite (tests/suite_run/test_zoo.py).

Shared conventions: query head h reads kv head h // group; top-left causal; a key that no query of a
block may see is never multiplied (its value may be NaN padding); a row with no visible key gives 0.
"""

import math

import numpy as np

ALL_DTYPES = ("float64", "float32", "float16")


def _keys_and_values(q, k, v):
    """k and v with one kv head per query head; one value per key is checked, not assumed."""
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"k has {k.shape[2]} keys but v has {v.shape[2]} values")
    if q.shape[1] % k.shape[1] or k.shape[1] != v.shape[1]:
        raise ValueError(f"heads: q {q.shape[1]}, k {k.shape[1]}, v {v.shape[1]}")
    group = q.shape[1] // k.shape[1]
    return np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)


def _visible(n_q, n_k, causal, mask, rows=slice(None), cols=slice(None)):
    """Visibility of query rows `rows` to key columns `cols` (None: all visible)."""
    allowed = None
    if causal:
        allowed = np.arange(n_k)[cols][None, :] <= np.arange(n_q)[rows][:, None]
    if mask is not None:
        part = np.broadcast_to(mask, mask.shape[:-2] + (n_q, n_k))[..., rows, cols]
        allowed = part if allowed is None else allowed & part
    return allowed


def _unseen_to_zero(values, allowed):
    """Values of keys no row sees set to 0, so NaN padding is never multiplied."""
    if allowed is None:
        return values
    seen = np.broadcast_to(allowed, allowed.shape).any(axis=-2)[..., None]
    return np.where(seen, values, 0)


def _inner(dtype):
    """The scalar type computations run in: float32 for float16 storage, else the storage type."""
    return np.float32 if dtype == np.float16 else dtype.type


def _scale(scale, d):
    """The scale as a Python float: a NumPy float32 scalar times a Python float stays float32 (NEP 50), which
    would round the folded log2(e) factor in a float64 computation."""
    return 1 / math.sqrt(d) if scale is None else float(scale)


def _in_inner_precision(q, k, v):
    """q, k, v in the precision the computation runs in, one kv head per query head; and the storage dtype."""
    dtype = q.dtype
    q, k, v = (x.astype(_inner(dtype)) for x in (q, k, v))
    return (q, *_keys_and_values(q, k, v), dtype)


def _masked_scores(q, k, scale, causal, mask, cols=slice(None), factor=1.0):
    """q k^T times the scale (and `factor`) for key columns `cols`, -inf where hidden; and the visibility."""
    scores = (q @ k[:, :, cols].swapaxes(-1, -2)) * q.dtype.type(_scale(scale, q.shape[-1]) * factor)
    allowed = _visible(q.shape[2], k.shape[2], causal, mask, cols=cols)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return scores, allowed


def exp2_with_folded_scale(q, k, v, *, scale=None, causal=False, mask=None):
    """2^(x log2 e) as FlashAttention's kernels compute exp: log2(e) folded into the scale."""
    q, k, v, dtype = _in_inner_precision(q, k, v)
    scores, allowed = _masked_scores(q, k, scale, causal, mask, factor=math.log2(math.e))
    top = scores.max(axis=-1, keepdims=True)
    p = np.exp2(scores - np.where(np.isinf(top) & (top < 0), 0, top))
    total = p.sum(axis=-1, keepdims=True)
    return ((p @ _unseen_to_zero(v, allowed)) / np.where(total == 0, 1, total)).astype(dtype)


exp2_with_folded_scale.attention_capabilities = {"dtypes": ALL_DTYPES}


def _online(q, k, v, scale, causal, mask, *, block, reverse):
    """Online softmax over key blocks of `block` keys, walked forwards or backwards, in float64/32."""
    q, k, v, dtype = _in_inner_precision(q, k, v)
    n_k = k.shape[2]
    top = np.full(q.shape[:3] + (1,), -np.inf, dtype=q.dtype)
    total = np.zeros(q.shape[:3] + (1,), dtype=q.dtype)
    acc = np.zeros(q.shape[:3] + (v.shape[-1],), dtype=q.dtype)
    starts = list(range(0, n_k, block))
    for c0 in reversed(starts) if reverse else starts:
        cols = slice(c0, min(c0 + block, n_k))
        scores, allowed = _masked_scores(q, k, scale, causal, mask, cols)
        new_top = np.maximum(top, scores.max(axis=-1, keepdims=True))
        shift = np.where(np.isinf(new_top) & (new_top < 0), 0, new_top)
        p = np.exp(scores - shift)
        correction = np.exp(top - shift)
        total = total * correction + p.sum(axis=-1, keepdims=True)
        acc = acc * correction + p @ _unseen_to_zero(v[:, :, cols], allowed)
        top = new_top
    return (acc / np.where(total == 0, 1, total)).astype(dtype)


def keys_streamed_in_reverse(q, k, v, *, scale=None, causal=False, mask=None):
    """Online softmax over blocks of 7 keys, last block first."""
    return _online(q, k, v, scale, causal, mask, block=7, reverse=True)


def one_key_per_block(q, k, v, *, scale=None, causal=False, mask=None):
    """Online softmax with B_c = 1: every key rescales the running output."""
    return _online(q, k, v, scale, causal, mask, block=1, reverse=False)


for _fn in (keys_streamed_in_reverse, one_key_per_block):
    _fn.attention_capabilities = {"dtypes": ALL_DTYPES}


def split_kv_merged_by_lse(q, k, v, *, scale=None, causal=False, mask=None, return_lse=False):
    """Three key splits attended separately and merged through their log-sum-exps (flash-decoding)."""
    q, k, v, dtype = _in_inner_precision(q, k, v)
    n_k = k.shape[2]
    outs, lses = [], []
    for cols in np.array_split(np.arange(n_k), min(3, n_k)):
        scores, allowed = _masked_scores(q, k, scale, causal, mask, cols)
        top = scores.max(axis=-1, keepdims=True)
        empty = np.isinf(top) & (top < 0)
        p = np.exp(scores - np.where(empty, 0, top))
        total = p.sum(axis=-1, keepdims=True)
        outs.append((p @ _unseen_to_zero(v[:, :, cols], allowed)) / np.where(total == 0, 1, total))
        with np.errstate(divide="ignore"):
            lses.append(np.where(empty, -np.inf, top + np.log(np.where(total == 0, 1, total))))
    stacked = np.stack(lses)
    top = stacked.max(axis=0)
    empty = np.isinf(top) & (top < 0)
    shift = np.where(empty, 0, top)
    weights = np.exp(stacked - shift)
    lse = np.where(empty, -np.inf, shift + np.log(np.where(empty, 1, weights.sum(axis=0))))
    out = sum(np.where(empty, 0, np.exp(part - np.where(empty, 0, lse))) * o
              for part, o in zip(lses, outs, strict=True))
    out = out.astype(dtype)
    return (out, lse[..., 0]) if return_lse else out


split_kv_merged_by_lse.attention_capabilities = {"dtypes": ALL_DTYPES, "lse": True}


def float16_storage_float32_accumulation(q, k, v, *, scale=None, causal=False, mask=None):
    """float16 in and out; scores, softmax and P V in float32 (what FlashAttention's fp16 kernels do)."""
    return exp2_with_folded_scale(*(x.astype(np.float32) for x in (q, k, v)), scale=scale, causal=causal,
                                  mask=mask).astype(np.float16)


float16_storage_float32_accumulation.attention_capabilities = {"dtypes": ("float16",)}


def float64_behind_float32(q, k, v, *, scale=None, causal=False, mask=None):
    """A float32 interface computing in float64: more accurate than asked, never less."""
    return one_key_per_block(*(x.astype(np.float64) for x in (q, k, v)), scale=scale, causal=causal,
                             mask=mask).astype(np.float32)


float64_behind_float32.attention_capabilities = {"dtypes": ("float32",)}


def output_as_strided_view(q, k, v, *, scale=None, causal=False, mask=None):
    """Computed into a [batch, seq, heads, dim] buffer and returned as a transposed (non-contiguous) view."""
    out = keys_streamed_in_reverse(q, k, v, scale=scale, causal=causal, mask=mask)
    buffer = np.empty((out.shape[0], out.shape[2], out.shape[1], out.shape[3]), dtype=out.dtype)
    buffer[...] = out.transpose(0, 2, 1, 3)
    return buffer.transpose(0, 2, 1, 3)


output_as_strided_view.attention_capabilities = {"dtypes": ALL_DTYPES}


def torch_tensor_output(q, k, v, *, scale=None, causal=False, mask=None):
    """Returns a torch tensor (CONTRACT 1 allows NumPy, torch or CuPy outputs)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(exp2_with_folded_scale(q, k, v, scale=scale, causal=causal,
                                                                        mask=mask)))


torch_tensor_output.attention_capabilities = {"dtypes": ALL_DTYPES}


def log_domain_weights(q, k, v, *, scale=None, causal=False, mask=None):
    """Weights as exp(S - logsumexp(S)) straight from the log domain, no division."""
    q, k, v, dtype = _in_inner_precision(q, k, v)
    scores, allowed = _masked_scores(q, k, scale, causal, mask)
    top = scores.max(axis=-1, keepdims=True)
    empty = np.isinf(top) & (top < 0)
    shift = np.where(empty, 0, top)
    lse = shift + np.log(np.where(empty, 1, np.exp(scores - shift).sum(axis=-1, keepdims=True)))
    weights = np.where(empty, 0, np.exp(scores - np.where(empty, 0, lse)))
    return (weights @ _unseen_to_zero(v, allowed)).astype(dtype)


log_domain_weights.attention_capabilities = {"dtypes": ALL_DTYPES}

# -- score modifications beyond the seeds (docs/checking-your-implementation.md): top-left offset 0 -------
def _window(n_q, n_k, window_size):
    """The band as key - query distances: j - i within [-left, right], a negative side unbounded (None: no window)."""
    if window_size is None:
        return None
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2 or not all(
            isinstance(side, (int, np.integer)) and not isinstance(side, (bool, np.bool_)) for side in window_size):
        raise ValueError(f"window_size must be a pair of integers (left, right), got {window_size!r}")
    left, right = window_size
    distance = np.arange(n_k)[None, :] - np.arange(n_q)[:, None]
    return ((distance >= -left) | (left < 0)) & ((distance <= right) | (right < 0))


def _weighted(scores, v, allowed):
    """softmax(scores) v with -inf scores hidden and a row with nothing visible giving 0, in the log domain; a
    score of +inf (a sink's) takes its row's every weight, the softmax's limit."""
    top = scores.max(axis=-1, keepdims=True)
    empty, flooded = np.isneginf(top), np.isposinf(top)
    shift = np.where(empty | flooded, 0, top)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf in a flooded row, replaced below
        lse = shift + np.log(np.where(empty, 1, np.exp(scores - shift).sum(axis=-1, keepdims=True)))
        weights = np.where(empty, 0, np.exp(scores - np.where(empty, 0, lse)))
    infinite = np.isposinf(scores)
    weights = np.where(flooded, infinite / np.maximum(infinite.sum(axis=-1, keepdims=True), 1), weights)
    return weights @ _unseen_to_zero(v, allowed)


def window_as_boolean_mask(q, k, v, *, scale=None, causal=False, mask=None, window_size=None):
    """The window folded into the boolean mask (causal's right bound 0 is implied by causal itself)."""
    band = _window(q.shape[2], k.shape[2], window_size)
    both = mask if band is None else band if mask is None else band & mask
    return exp2_with_folded_scale(q, k, v, scale=scale, causal=causal, mask=both)


def window_as_minus_inf_bias(q, k, v, *, scale=None, causal=False, mask=None, window_size=None):
    """The window as an additive bias of 0 inside and -inf outside; a -inf entry replaces its score."""
    q, k, v, dtype = _in_inner_precision(q, k, v)
    scores, allowed = _masked_scores(q, k, scale, causal, mask)
    band = _window(q.shape[2], k.shape[2], window_size)
    if band is not None:
        bias = np.where(band, 0, -np.inf).astype(scores.dtype)
        scores = np.where(np.isneginf(bias), -np.inf, scores + bias)
        allowed = np.broadcast_to(band, scores.shape) if allowed is None else allowed & band
    return _weighted(scores, v, allowed).astype(dtype)


def softcap_through_exp(q, k, v, *, scale=None, causal=False, mask=None, softcap=0.0):
    """c tanh(x / c) written as c (1 - 2 / (exp(2 x / c) + 1)); exp's overflow to inf gives the cap itself, and a
    hidden key's -inf stays -inf (the formula would send it to -c)."""
    if not np.isfinite(softcap):
        raise ValueError(f"softcap must be a finite number (0: none), got {softcap!r}")
    q, k, v, dtype = _in_inner_precision(q, k, v)
    scores, allowed = _masked_scores(q, k, scale, causal, mask)
    if softcap > 0:
        c = scores.dtype.type(softcap)
        with np.errstate(over="ignore"):
            scores = np.where(np.isneginf(scores), scores, c * (1 - 2 / (np.exp(2 * scores / c) + 1)))
    return _weighted(scores, v, allowed).astype(dtype)


def sinks_as_extra_key(q, k, v, *, scale=None, causal=False, mask=None, sinks=None):
    """Each head's sink as a key before the first, seen by every row, scored by the sink, with a zero value."""
    floating = sinks is not None and np.issubdtype(np.asarray(sinks).dtype, np.floating)
    if sinks is not None and (np.shape(sinks) != (q.shape[1],) or not floating or np.isnan(sinks).any()):
        raise ValueError(f"sinks must be one floating-point logit per head ({q.shape[1]}), without NaN: got "
                         f"{np.asarray(sinks).dtype} of shape {np.shape(sinks)}")
    q, k, v, dtype = _in_inner_precision(q, k, v)
    scores, allowed = _masked_scores(q, k, scale, causal, mask)
    if sinks is not None:
        sink = np.broadcast_to(np.asarray(sinks, scores.dtype)[None, :, None, None], scores.shape[:3] + (1,))
        scores = np.concatenate([sink, scores], axis=-1)
        v = np.concatenate([np.zeros_like(v[:, :, :1]), v], axis=2)
        if allowed is not None:
            allowed = np.concatenate([np.ones(allowed.shape[:-1] + (1,), bool), allowed], axis=-1)
    return _weighted(scores, v, allowed).astype(dtype)


for _fn in (window_as_boolean_mask, window_as_minus_inf_bias, softcap_through_exp, sinks_as_extra_key):
    _fn.attention_capabilities = {"dtypes": ALL_DTYPES}

CORRECT = ("exp2_with_folded_scale", "keys_streamed_in_reverse", "one_key_per_block", "split_kv_merged_by_lse",
           "float16_storage_float32_accumulation", "float64_behind_float32", "output_as_strided_view",
           "torch_tensor_output", "log_domain_weights", "window_as_boolean_mask", "window_as_minus_inf_bias",
           "softcap_through_exp", "sinks_as_extra_key")
