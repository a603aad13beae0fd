"""torch.nn.attention.flex_attention as models call it on the CPU: eager (the unfused path) and under torch.compile
(inductor's fused CPU kernel).

The mapping, FlexAttention's documented semantics: q, k, v in (batch, heads, n, d), the protocol's layout; `scale`
as flex's scale (None: 1/sqrt(d)); GQA through `enable_gqa`. The protocol's score modifications become one
`score_mod(score, b, h, q_idx, kv_idx)` on the scaled score, composed in the protocol's order (cap, ALiBi, bias);
what hides a key becomes one `mask_mod(b, h, q_idx, kv_idx)` turned into a BlockMask by `create_block_mask`: causal
as kv_idx <= q_idx (top-left, as flex's own causal example), the window as q_idx - left <= kv_idx <= q_idx + right
(a negative side unbounded), and the boolean mask (True = may attend) read at its index. Every value the two
functions read is a captured tensor (flex's "captured buffers"), never a Python number, so that a compiled flex
traces them as inputs instead of compiling again for each value. Flex takes none of the modifications as an
argument, so the adapter checks them against the protocol (impls.score_mod_checks) and hands torch contiguous
copies (it shares no negative strides); bfloat16 arrives as ml_dtypes' NumPy type and reaches torch through float32,
exactly. torch 2.13 refuses flex's backward on the CPU ("FlexAttention does not support backward on CPU"), so
neither record declares gradients: the gradient properties are not run, with that reason.

Eager: float64 and float32, the LSE from `return_aux=AuxRequest(lse=True)` (natural log, (batch, heads, n_q)), and
only the modifications a call asks for; its varlen face (protocol.faces) is flex's document masking: the pack as one
sequence of one batch entry, a mask_mod letting a row see only the keys of its own document (ids and positions as
captured vectors), causal and the window counted in positions within the document.

Compiled: `torch.compile(flex_attention, dynamic=False)`, one static kernel per shape (the default, dynamic=None,
compiles the second shape with dynamic sizes, and inductor's CPU template then fails to compile a mask_mod that
reads a tensor: docs/findings/flex_compiled_dynamic_shapes_mask_buffer.py); inductor's CPU lowering takes float32,
float16 and bfloat16 only and "only supports inference and `return_lse` is not supported yet", so the record has
float32 and bfloat16 and no LSE. It passes every modification on every call, neutral where the protocol has none (a
cap of 0 selected away, slopes and bias of 0, windows wider than both lengths, a mask of True), so the calls of one
shape and dtype share one compiled kernel. A scale, a Python float, would be a constant of that kernel (a kernel per
value, about 4 s each here): a scale the call gives multiplies the score in score_mod, as a captured tensor, with
flex's own scale 1 (flex's own application of `scale` is flex-eager's to check); without one flex applies its
default 1/sqrt(d) itself. Dynamo's recompile limit, past which torch would quietly run the eager path instead, is
raised and made an error.
"""

from __future__ import annotations

import functools
import os
import tempfile
import warnings
from typing import NamedTuple

import numpy as np

from impls.peers.availability import installed
from impls.score_mod_checks import checked_mods
from protocol.registry import attention_impl
from specs.validation import resolve_scale
from specs.varlen import Packing, packing_of


def _score_mod(scale, cap, slopes, bias):
    """The protocol's modifications of the scaled score (specs.score_mods' order: cap, ALiBi, bias), after a `scale`
    flex did not apply; None: absent."""
    import torch

    def score_mod(score, b, h, q_idx, kv_idx):
        if scale is not None:
            score = score * scale
        if cap is not None:  # a cap <= 0 is none (the compiled record's neutral cap is 0)
            score = torch.where(cap > 0, cap * torch.tanh(score / cap), score)
        if slopes is not None:
            score = score - slopes[b, h] * torch.abs(q_idx - kv_idx)
        if bias is not None:
            score = score + bias[b, h, q_idx, kv_idx]
        return score

    return score_mod


class Documents(NamedTuple):
    """A pack of sequences as flex's document masks read it (Packing.places as torch int64 vectors): each row's and
    each key's sequence (-1 where none) and its position in that sequence."""

    query: object
    key: object
    query_position: object
    key_position: object


def documents_of(packing: Packing, total_q: int, total_k: int) -> Documents:
    import torch

    (query, query_position), (key, key_position) = packing.places(total_q), packing.places(total_k, keys=True)
    return Documents(*(torch.from_numpy(x) for x in (query, key, query_position, key_position)))


def _mask_mod(left, right, mask, documents: Documents | None = None):
    """Key kv_idx visible from query q_idx: within `left` before and `right` after it, where allowed by `mask`; with
    `documents`, only a key of the query's own sequence, the window counted in positions within it."""
    def mask_mod(b, h, q_idx, kv_idx):
        visible = kv_idx >= 0  # a tensor of True: the conditions below narrow it
        i, j = q_idx, kv_idx
        if documents is not None:
            visible = visible & (documents.query[q_idx] == documents.key[kv_idx]) & (documents.query[q_idx] >= 0)
            i, j = documents.query_position[q_idx], documents.key_position[kv_idx]
        if left is not None:
            visible = visible & (j >= i - left)
        if right is not None:
            visible = visible & (j <= i + right)
        if mask is not None:
            visible = visible & mask[b, h, q_idx, kv_idx]
        return visible

    return mask_mod


def _tensor(x: np.ndarray):
    """A contiguous torch copy of `x`; ml_dtypes' bfloat16 goes through float32, which holds it exactly."""
    import torch

    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(x, order="C"))  # a copy, of any rank (0-d stays 0-d)


def _numpy(x, dtype: np.dtype) -> np.ndarray:
    import torch

    return x.detach().to(torch.float64).numpy().astype(dtype)


def _sides(causal: bool, window) -> tuple[int | None, int | None]:
    """The window's (left, right) bounds with causal folded in (top-left: right <= 0); None where unbounded."""
    left, right = window if window is not None else (-1, -1)
    left = left if left >= 0 else None
    right = right if right >= 0 else None
    if causal:
        right = 0 if right is None else min(right, 0)
    return left, right


def flex_call(flex, q, k, v, *, scale, causal, mask, bias, window_size, softcap, alibi_slopes, return_lse,
              every_modification: bool, documents: Documents | None = None):
    """One flex_attention call on NumPy inputs, NumPy back; `every_modification`: each one passed, neutral where
    the call has none (one compiled kernel per shape); `documents`: a pack's sequences, each attending alone."""
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

    mods = checked_mods(q, k, v, bias=bias, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)
    batch, heads, n_q, n_k = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    full = (batch, heads, n_q, n_k)
    real = np.dtype(np.float64 if q.dtype == np.float64 else np.float32)  # the cap's and the slopes' (specs.problems)

    def captured(value, neutral: np.ndarray):
        """`value` as a torch tensor; where absent None, or `neutral` when every modification is passed."""
        if value is None and not every_modification:
            return None
        return _tensor(neutral if value is None else value)

    # a scale in flex's own keyword is a constant of the compiled kernel (every value compiles one), so where every
    # modification is passed a scale asked for is applied in score_mod with flex's scale 1; else flex applies it
    folded = every_modification and scale is not None
    scale_t = captured(np.asarray(resolve_scale(scale, q.shape[-1]), real) if folded else None, np.ones((), real))
    cap = captured(np.asarray(mods.softcap, real) if mods.softcap > 0 else None, np.zeros((), real))
    slopes = captured(None if alibi_slopes is None else np.broadcast_to(alibi_slopes, (batch, heads)),
                      np.zeros((batch, heads), real))
    bias_t = captured(None if bias is None else np.broadcast_to(bias, full), np.zeros(full, q.dtype))
    left, right = (captured(None if side is None else np.asarray(side, np.int64), np.asarray(n_q + n_k, np.int64))
                   for side in _sides(causal, mods.window))  # n_q + n_k: wider than any query-key distance
    mask_t = captured(None if mask is None else np.broadcast_to(mask, full), np.ones(full, bool))
    block_mask = None
    if any(x is not None for x in (left, right, mask_t, documents)):
        block_mask = create_block_mask(_mask_mod(left, right, mask_t, documents), batch, heads, n_q, n_k,
                                       device="cpu")
    aux = AuxRequest(lse=True) if return_lse else None
    qt, kt, vt = (_tensor(x) for x in (q, k, v))
    result = flex(qt, kt, vt, score_mod=_score_mod(scale_t, cap, slopes, bias_t), block_mask=block_mask,
                  scale=1.0 if folded else scale,
                  enable_gqa=heads != k.shape[1], return_aux=aux)
    if not return_lse:
        return _numpy(result, q.dtype)
    out, aux_out = result
    return _numpy(out, q.dtype), _numpy(aux_out.lse, np.dtype(np.float64))


FLEX = dict(backend="peers", causal_alignment="top_left", probe=installed("torch"))


def _eager_call(q, k, v, **keywords):
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():  # the eager path is the record's point: torch's advice to compile is not news
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile", category=UserWarning)
        return flex_call(flex_attention, q, k, v, every_modification=False, **keywords)


@attention_impl(name="flex-eager", dtypes=("float64", "float32"), lse=True, faces=("dense", "varlen"), **FLEX)
def flex_eager(q, k, v, *, scale=None, causal=False, mask=None, bias=None, window_size=None, softcap=0.0,
               alibi_slopes=None, return_lse=False):
    return _eager_call(q, k, v, scale=scale, causal=causal, mask=mask, bias=bias, window_size=window_size,
                       softcap=softcap, alibi_slopes=alibi_slopes, return_lse=return_lse)


def flex_eager_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale=None, causal=False,
                      window_size=None, softcap=0.0, seqused_k=None, return_lse=False):
    """The varlen face (protocol.faces) as flex's document masks: the pack as one sequence of one batch entry, a
    row seeing only the keys of its own document (causal and the window in positions within it)."""
    packing = packing_of(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    result = _eager_call(*(np.swapaxes(x, 0, 1)[None] for x in (q, k, v)), scale=scale, causal=causal, mask=None,
                         bias=None, window_size=window_size, softcap=softcap, alibi_slopes=None,
                         return_lse=return_lse, documents=documents_of(packing, q.shape[0], k.shape[0]))
    if not return_lse:
        return np.swapaxes(result[0], 0, 1)
    out, lse = result
    return np.swapaxes(out[0], 0, 1), lse[0]


flex_eager.attention_varlen = flex_eager_varlen


@functools.cache
def compiled_flex_attention():
    """torch.compile(flex_attention, dynamic=False), once per process (a kernel per shape); past Dynamo's recompile
    limit torch would run the eager path in its place, so the limit is raised and reaching it made an error. Each
    process compiles into a cache directory of its own (unless TORCHINDUCTOR_CACHE_DIR names one): two test workers
    sharing /tmp/torchinductor_<user> raced on one kernel's .so, one loading it half written ("file too short")."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="torchinductor-"))
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.config.recompile_limit = 1024
    torch._dynamo.config.accumulated_recompile_limit = 1024
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch.compile(flex_attention, dynamic=False)


@attention_impl(name="flex-compiled", dtypes=("float32", "bfloat16"), fused=True, compiles_per_shape=True, **FLEX)
def flex_compiled(q, k, v, *, scale=None, causal=False, mask=None, bias=None, window_size=None, softcap=0.0,
                  alibi_slopes=None):
    return flex_call(compiled_flex_attention(), q, k, v, scale=scale, causal=causal, mask=mask, bias=bias,
                     window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, return_lse=False,
                     every_modification=True)
