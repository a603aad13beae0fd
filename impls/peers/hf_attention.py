"""Hugging Face transformers' attention functions as its models call them, without a model: the llama family's
`eager_attention_forward`, gemma2's (softcap), gpt-oss' (sinks), and the `sdpa` integration of the attention-
function registry.

transformers' semantics, mapped: q (batch, heads, n_q, d) and k, v (batch, heads_kv, n_k, d), the protocol's layout,
with the attention module's attributes the functions read (`num_key_value_groups` = heads // heads_kv, `training`
False, `head_dim`, `is_causal`, gpt-oss' `sinks`); `scaling` the scale (None: 1/sqrt(d), as the models set it); the
output comes back (batch, n_q, heads, d_v) and is transposed. What hides a key is one mask, built as transformers'
masking_utils builds a model's: the causal pattern is its `causal_mask_function` with the queries at positions n_k -
n_q .. n_k - 1 (a prefill after a cache, so causal aligns bottom-right), and-ed with the protocol's boolean mask;
for the eager functions it becomes an additive float mask of 0 and torch.finfo(dtype).min, as
`masking_utils.eager_mask` writes it, plus the protocol's bias; the sdpa integration takes the boolean mask as it
is, and the bias as its `position_bias` (T5's relative bias goes there). A mask keeps its heads' dimension (a
model's masks have one head); a bias has the full (batch, heads, n_q, n_k) a model's has. transformers has no bias
argument, a model builds its sinks' parameter itself and reads its softcap from a config, so the adapter checks all
three against the protocol (impls.score_mod_checks); `scaling` is typed float and the adapter passes one. Gemma2's
sliding window is masking_utils' `sliding_window_overlay(W)` over the causal mask, FlashAttention's window (W - 1,
0): the protocol's window (left, right) is that overlay with W = left + 1, and a bounded right side (transformers'
windows end at the diagonal) the adapter's own mask function, and-ed by masking_utils' `and_masks`, aligned
bottom-right as the causal mask is.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from impls.peers.availability import installed
from impls.score_mod_checks import checked_mods
from protocol.registry import attention_impl


def _attention_module(heads: int, heads_kv: int, head_dim: int, sinks=None) -> SimpleNamespace:
    """The attributes of an attention module that the functions read (an evaluation-mode module)."""
    return SimpleNamespace(num_key_value_groups=heads // heads_kv, head_dim=head_dim, is_causal=True, sinks=sinks,
                           training=False)


def _at_most_after(right: int):
    """A window's right side, as a masking_utils mask function (transformers has none: its windows end at the
    diagonal, causal)."""
    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return kv_idx <= q_idx + right

    return inner_mask


def _visible(q, k, causal: bool, mask, window=None):
    """The boolean mask (True = attend), (batch, heads or 1, n_q, n_k), or None where every key is visible."""
    import torch
    from transformers.masking_utils import and_masks, causal_mask_function, sdpa_mask, sliding_window_overlay

    batch, n_q, n_k = q.shape[0], q.shape[2], k.shape[2]
    left, right = window if window is not None else (-1, -1)
    functions = [causal_mask_function] if causal else []
    if left >= 0:  # gemma2's window (W - 1, 0) is sliding_window_overlay(W) over the causal mask
        functions.append(sliding_window_overlay(left + 1))
    if right >= 0:
        functions.append(_at_most_after(right))
    visible = None
    if functions:
        visible = sdpa_mask(batch_size=batch, q_length=n_q, kv_length=n_k, q_offset=n_k - n_q,
                            mask_function=and_masks(*functions), allow_is_causal_skip=False)
    if mask is not None:
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        mask = torch.broadcast_to(mask, (batch, mask.shape[1], n_q, n_k))
        visible = mask if visible is None else visible & mask
    return visible


def _additive(visible, bias, dtype):
    """masking_utils.eager_mask's form: 0 where visible, finfo(dtype).min elsewhere; plus the bias."""
    import torch

    if visible is None:
        return bias
    additive = torch.where(visible, torch.zeros((), dtype=dtype), torch.full((), torch.finfo(dtype).min, dtype=dtype))
    return additive if bias is None else additive + bias


def _hf_call(forward, q, k, v, *, scale, causal, mask, bias=None, position_bias=False, sinks=None, softcap=0.0,
             window_size=None, **keywords):
    """One call of `forward` as a model makes it; `position_bias`: the bias goes as the sdpa integration's
    `position_bias` beside the boolean mask, else into the eager functions' additive mask."""
    import torch

    mods = checked_mods(q, k, v, bias=bias, sinks=sinks, softcap=softcap, window_size=window_size)
    if softcap > 0:  # gemma2's: None is no cap, where the protocol's is 0 or negative
        keywords["softcap"] = softcap
    if bias is not None:  # a model's bias is (batch, heads, n_q, n_k), as T5's position_bias
        bias = torch.broadcast_to(bias, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
    module = _attention_module(q.shape[1], k.shape[1], q.shape[3], sinks)
    visible = _visible(q, k, causal, mask, mods.window)
    if position_bias:
        keywords["position_bias"] = bias
        attention_mask = visible
    else:
        attention_mask = _additive(visible, bias, q.dtype)
    scaling = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)  # transformers types it `float`
    out, _ = forward(module, q, k, v, attention_mask, scaling=scaling, dropout=0.0, **keywords)
    return out.transpose(1, 2)


HF = dict(backend="peers", dtypes=("float64", "float32", "bfloat16"), causal_alignment="bottom_right",
          tensors="torch", differentiable_mods=("bias",), probe=installed("torch", "transformers"))


@attention_impl(name="hf-llama-eager", **HF)
def llama_eager(q, k, v, *, scale=None, causal=False, mask=None, bias=None):
    from transformers.models.llama.modeling_llama import eager_attention_forward

    return _hf_call(eager_attention_forward, q, k, v, scale=scale, causal=causal, mask=mask, bias=bias)


@attention_impl(name="hf-gemma2-eager", **HF)
def gemma2_eager(q, k, v, *, scale=None, causal=False, mask=None, bias=None, softcap=0.0, window_size=None):
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    return _hf_call(eager_attention_forward, q, k, v, scale=scale, causal=causal, mask=mask, bias=bias,
                    softcap=softcap, window_size=window_size)


@attention_impl(name="hf-gpt-oss-eager", **{**HF, "differentiable_mods": ("bias", "sinks")})
def gpt_oss_eager(q, k, v, *, scale=None, causal=False, mask=None, bias=None, sinks=None):
    import torch
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    if sinks is None:  # the model always has sinks: none is a sink of -inf
        sinks = torch.full((q.shape[1],), float("-inf"), dtype=q.dtype)
    return _hf_call(eager_attention_forward, q, k, v, scale=scale, causal=causal, mask=mask, bias=bias,
                    sinks=sinks)


@attention_impl(name="hf-sdpa", **HF)
def hf_sdpa(q, k, v, *, scale=None, causal=False, mask=None, bias=None):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return _hf_call(sdpa_attention_forward, q, k, v, scale=scale, causal=causal, mask=mask, bias=bias,
                    position_bias=True, is_causal=False)
