"""Correct dropout as most users write it: the mask drawn from a global generator, no `dropout_seed` keyword.

Plain functions with no attributes, as a user outside the project brings them. The suite seeds the global
generators where the call runs (harness.call_state), so the one-hot call that reads the mask and the call
that uses it draw the same mask, in process and in an isolated worker alike.
"""

import numpy as np
import torch

from tests.outside_impls import einsum_attention


def _visible_softmax(q, k, *, scale, causal, mask):
    group = q.shape[1] // k.shape[1]
    scores = q @ np.repeat(k, group, axis=1).swapaxes(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    visible = np.ones(scores.shape[-2:], dtype=bool)
    if causal:
        visible = np.tril(visible)
    if mask is not None:
        visible = visible & mask
    scores = np.where(visible, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


def torch_global_dropout(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """torch.nn.functional.dropout on the weights, drawn from torch's default generator."""
    weights = torch.from_numpy(_visible_softmax(q, k, scale=scale, causal=causal, mask=mask))
    dropped = torch.nn.functional.dropout(weights, p=dropout_p, training=True)
    values = torch.from_numpy(np.repeat(v, q.shape[1] // v.shape[1], axis=1))
    return dropped @ values


def numpy_global_dropout(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """A keep mask from NumPy's legacy global generator (np.random.random), drawn only when dropping."""
    if not dropout_p:
        return einsum_attention(q, k, v, scale=scale, causal=causal, mask=mask)
    weights = _visible_softmax(q, k, scale=scale, causal=causal, mask=mask)
    keep = np.random.random(weights.shape) >= dropout_p
    return (weights * keep / (1 - dropout_p)) @ np.repeat(v, q.shape[1] // v.shape[1], axis=1)


def draws_before_its_mask(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """Wrong: its mask depends on how many calls came before (a draw per call that the seed does not reset
    is modelled by a generator of its own, seeded once)."""
    weights = _visible_softmax(q, k, scale=scale, causal=causal, mask=mask)
    keep = _OWN_GENERATOR.random(weights.shape) >= dropout_p
    return (weights * keep / (1 - dropout_p)) @ np.repeat(v, q.shape[1] // v.shape[1], axis=1)


_OWN_GENERATOR = np.random.default_rng(0)


def torch_settings_as_output(q, k, v):
    """Not attention: out[..., :3] holds torch's intra-op threads, whether the default dtype is float64, and
    whether deterministic algorithms are on, as the call saw them (the isolation test reads them back)."""
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    out[..., 0] = torch.get_num_threads()
    out[..., 1] = torch.get_default_dtype() == torch.float64
    out[..., 2] = torch.are_deterministic_algorithms_enabled()
    return out
