"""torch.nn.attention.flex_attention as models call it, eager (the unfused path), on the CPU.

The mapping, FlexAttention's documented semantics: q, k, v in (batch, heads, n, d), the protocol's layout; `scale`
as flex's scale (None: 1/sqrt(d)); GQA through `enable_gqa`. The protocol's score modifications become one
`score_mod(score, b, h, q_idx, kv_idx)` on the scaled score, composed in the protocol's order (cap, ALiBi, bias);
what hides a key becomes one `mask_mod(b, h, q_idx, kv_idx)` turned into a BlockMask by `create_block_mask`: causal
as kv_idx <= q_idx (top-left, as flex's own causal example), the window as q_idx - left <= kv_idx <= q_idx + right
(a negative side unbounded), and the boolean mask (True = may attend) read at its index. Flex takes none of the
modifications as an argument, so the adapter checks them against the protocol (impls.score_mod_checks) and hands
torch contiguous copies (it shares no negative strides). The LSE comes from `return_aux=AuxRequest(lse=True)`,
natural log, (batch, heads, n_q). torch 2.13 refuses flex's backward on the CPU ("FlexAttention does not support
backward on CPU"), so the record declares no gradients: the gradient properties are not run, with that reason.
"""

from __future__ import annotations

import warnings

import numpy as np

from impls.peers.availability import installed
from impls.score_mod_checks import checked_mods
from protocol.registry import attention_impl


def _score_mod(softcap: float, alibi_slopes, bias):
    """The protocol's modifications of the scaled score (specs.score_mods' order: cap, ALiBi, bias)."""
    import torch

    def score_mod(score, b, h, q_idx, kv_idx):
        if softcap > 0:
            score = softcap * torch.tanh(score / softcap)
        if alibi_slopes is not None:
            score = score - alibi_slopes[b, h] * torch.abs(q_idx - kv_idx)
        if bias is not None:
            score = score + bias[b, h, q_idx, kv_idx]
        return score

    return score_mod


def _mask_mod(causal: bool, window_size, mask):
    def mask_mod(b, h, q_idx, kv_idx):
        visible = kv_idx >= 0  # a tensor of True: the conditions below narrow it
        if causal:
            visible = visible & (kv_idx <= q_idx)
        if window_size is not None:
            left, right = window_size
            if left >= 0:
                visible = visible & (kv_idx >= q_idx - left)
            if right >= 0:
                visible = visible & (kv_idx <= q_idx + right)
        if mask is not None:
            visible = visible & mask[b, h, q_idx, kv_idx]
        return visible

    return mask_mod


def flex_call(flex, q, k, v, *, scale, causal, mask, bias, window_size, softcap, alibi_slopes, return_lse):
    """One flex_attention call on NumPy inputs, NumPy back."""
    import torch
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

    checked_mods(q, k, v, bias=bias, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)

    def tensor(x):
        return torch.from_numpy(np.ascontiguousarray(x))

    qt, kt, vt = (tensor(x) for x in (q, k, v))
    batch, heads, n_q, n_k = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    full = (batch, heads, n_q, n_k)
    mask_t = None if mask is None else torch.from_numpy(np.broadcast_to(mask, full).copy())
    bias_t = None if bias is None else tensor(np.broadcast_to(bias, full).copy())
    slopes = None if alibi_slopes is None else tensor(np.broadcast_to(alibi_slopes, (batch, heads)).copy())
    block_mask = None
    if causal or window_size is not None or mask is not None:
        block_mask = create_block_mask(_mask_mod(causal, window_size, mask_t), batch, heads, n_q, n_k,
                                       device="cpu")
    aux = AuxRequest(lse=True) if return_lse else None
    result = flex(qt, kt, vt, score_mod=_score_mod(float(softcap or 0.0), slopes, bias_t), block_mask=block_mask,
                  scale=scale, enable_gqa=heads != k.shape[1], return_aux=aux)
    if not return_lse:
        return _numpy(result, q.dtype)
    out, aux_out = result
    return _numpy(out, q.dtype), _numpy(aux_out.lse, np.dtype(np.float64))


def _numpy(x, dtype: np.dtype) -> np.ndarray:
    import torch

    return x.detach().to(torch.float64).numpy().astype(dtype)


@attention_impl(name="flex-eager", backend="peers", dtypes=("float64", "float32"), causal_alignment="top_left",
                lse=True, probe=installed("torch"))
def flex_eager(q, k, v, *, scale=None, causal=False, mask=None, bias=None, window_size=None, softcap=0.0,
               alibi_slopes=None, return_lse=False):
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():  # the eager path is the record's point: torch's advice to compile is not news
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile", category=UserWarning)
        return flex_call(flex_attention, q, k, v, scale=scale, causal=causal, mask=mask, bias=bias,
                         window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, return_lse=return_lse)
