"""The project's FlashAttention (impls.torch.torch_flash) with the varlen and kv-cache faces (issue 22).

Varlen: FlashAttention 2's flash_attn_varlen_func over the packed tensors. Each sequence is a view of its rows of
the pack (specs.varlen.Packing), tiled by flash_attention_tiled on its own, so the work is the sum of the sequences'
n_q x n_k, never batch x max_seqlen_q x max_seqlen_k as padding to the longest costs; rows past cu_seqlens_q[-1]
are 0, and keys past cu_seqlens_k[-1] or seqused_k are never read. Forward and backward (autograd through the
views), causal aligned bottom-right per sequence, the window, softcap, ALiBi and sinks per sequence, dropout.

KV cache: flash_attn_with_kvcache. The new keys and values are written into the cache in place at cache_seqlens;
each sequence then attends over its slots leftpad .. seqlen + n_new - 1, gathered from its cache row or its pages
(specs.kv_cache.CacheLayout), so no slot outside them is read. Forward only.
"""

from __future__ import annotations

import torch

from impls.torch.torch_flash import flash_attention_tiled
from protocol.registry import attention_impl
from specs.kv_cache import check_kv_cache
from specs.score_mods import check_score_mods
from specs.validation import AttentionInputError, AttentionShape
from specs.varlen import check_packing


def _check_packed(q, k, v) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or not x.is_floating_point():
            raise AttentionInputError(f"{name} must be a floating-point torch tensor (total, heads, dim), got "
                                      f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}")
    if k.shape[:2] != v.shape[:2]:
        raise AttentionInputError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must share total_k and heads_kv")
    if k.shape[2] != q.shape[2] or not k.shape[1] or q.shape[1] % k.shape[1]:
        raise AttentionInputError(f"q {tuple(q.shape)} and k {tuple(k.shape)}: q and k share the head dim, and heads "
                                  "is a multiple of heads_kv")


def _check_mods(sequences: int, heads: int, heads_kv: int, d: int, d_v: int, window_size, softcap, alibi_slopes,
                sinks) -> None:
    """The modifications against the protocol once per call, so an error names the keyword even when no sequence
    has a key to score (slopes of shape (sequences, heads) give one row per sequence)."""
    def numpy_view(x):
        return x.detach().to(torch.float64).numpy() if isinstance(x, torch.Tensor) else x

    check_score_mods(AttentionShape(sequences, heads, heads_kv, 1, 1, d, d_v), window_size=window_size,
                     softcap=softcap, alibi_slopes=numpy_view(alibi_slopes), sinks=numpy_view(sinks))


def _empty_rows(n: int, heads: int, d_v: int, q: torch.Tensor, sinks) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of a sequence with no key: output 0, log-sum-exp the sink's (-inf without one)."""
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    lse = torch.full((heads, n), -torch.inf, dtype=lse_dtype) if sinks is None else \
        sinks.to(lse_dtype)[:, None].expand(heads, n)
    return q.new_zeros((n, heads, d_v)), lse


def _dense(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(0, 1).unsqueeze(0)


def flash_attn_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                      cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, *, scale: float | None = None,
                      causal: bool = False, dropout_p: float = 0.0, seqused_k: torch.Tensor | None = None,
                      block_rows: int = 256, block_cols: int = 512, return_lse: bool = False,
                      window_size: tuple[int, int] | None = None, softcap: float = 0.0,
                      alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None):
    """Packed q (total_q, heads, d), k (total_k, heads_kv, d), v (total_k, heads_kv, d_v) -> (total_q, heads, d_v),
    and with return_lse (out, lse (heads, total_q)); alibi_slopes (heads,) or (sequences, heads)."""
    _check_packed(q, k, v)
    packing = check_packing(q.shape[0], k.shape[0], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            seqused_k)
    heads, d_v = q.shape[1], v.shape[2]
    _check_mods(packing.batch, heads, k.shape[1], q.shape[2], d_v, window_size, softcap, alibi_slopes, sinks)
    outs, lses = [], []
    for i, rows, keys in packing.sequences():
        n = rows.stop - rows.start
        if n and keys.stop == keys.start:
            out, lse = _empty_rows(n, heads, d_v, q, sinks)
        elif n:
            slopes = alibi_slopes[i] if alibi_slopes is not None and alibi_slopes.ndim == 2 else alibi_slopes
            out, lse = flash_attention_tiled(
                _dense(q[rows]), _dense(k[keys]), _dense(v[keys]), scale=scale, causal=causal,
                causal_alignment="bottom_right", dropout_p=dropout_p, block_rows=block_rows, block_cols=block_cols,
                return_lse=True, window_size=window_size, softcap=softcap, alibi_slopes=slopes, sinks=sinks)
            out, lse = out[0].transpose(0, 1), lse[0]
        else:
            continue
        outs.append(out)
        lses.append(lse)
    tail = q.shape[0] - int(packing.cu_q[-1])
    out, lse = _empty_rows(tail, heads, d_v, q, None)
    out, lse = torch.cat([*outs, out]), torch.cat([*lses, lse], dim=1)
    if q.requires_grad and out.grad_fn is None:  # no sequence both queries and keys: the graph through an empty
        out = out + q[:0].sum()  # slice's sum, which adds 0 and carries no NaN of the rows no sequence uses
    return (out, lse) if return_lse else out


def flash_attn_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            k: torch.Tensor | None = None, v: torch.Tensor | None = None, *,
                            cache_seqlens: torch.Tensor, cache_batch_idx: torch.Tensor | None = None,
                            cache_leftpad: torch.Tensor | None = None, block_table: torch.Tensor | None = None,
                            scale: float | None = None, causal: bool = False, return_lse: bool = False,
                            window_size: tuple[int, int] | None = None, softcap: float = 0.0,
                            alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None):
    """q (batch, n_q, heads, d) over a cache (specs.kv_cache) -> (batch, n_q, heads, d_v), and with return_lse
    (out, lse (batch, heads, n_q)); k, v (batch, n_new, heads_kv, d) are written into the cache first."""
    layout = check_kv_cache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                            cache_leftpad=cache_leftpad, block_table=block_table)
    batch, n_q, heads, d = q.shape
    d_v = v_cache.shape[3]
    _check_mods(batch, heads, k_cache.shape[2], d, d_v, window_size, softcap, alibi_slopes, sinks)
    with torch.no_grad():
        for b in range(layout.batch if k is not None else 0):
            where = tuple(torch.as_tensor(i) for i in layout.where(b, layout.written(b)))
            k_cache[where] = k[b]
            v_cache[where] = v[b]
    outs, lses = [], []
    for b in range(batch):
        slots = layout.slots(b)
        if not len(slots):
            out, lse = _empty_rows(n_q, heads, d_v, q, sinks)
            outs.append(out)
            lses.append(lse)
            continue
        where = tuple(torch.as_tensor(i) for i in layout.where(b, slots))
        slopes = alibi_slopes[b] if alibi_slopes is not None and alibi_slopes.ndim == 2 else alibi_slopes
        out, lse = flash_attention_tiled(_dense(q[b]), _dense(k_cache[where]), _dense(v_cache[where]), scale=scale,
                                         causal=causal, causal_alignment="bottom_right", return_lse=True,
                                         window_size=window_size, softcap=softcap, alibi_slopes=slopes, sinks=sinks)
        outs.append(out[0].transpose(0, 1))
        lses.append(lse[0])
    out, lse = torch.stack(outs), torch.stack(lses)
    return (out, lse) if return_lse else out


# issue 22's faces as one record: varlen first (the dense problems reach it packed among decoys,
# protocol.dense_adapters), the kv cache as fn.attention_kvcache (properties/test_kv_cache.py); dropout without
# dropout_seed, as the pack moves a sequence's batch index. One dtype per compute path of torch-flash-tiled beneath
# it (float64 inside; float32 inside with a rounded output): torch-flash-tiled itself runs all four
flash_attn_varlen = attention_impl(name="torch-flash-varlen", backend="torch", causal_alignment="bottom_right",
                                   dtypes=("float64", "bfloat16"), tensors="torch",
                                   tile_keywords=("block_rows", "block_cols"), lse=True,
                                   differentiable_mods=("sinks",), faces=("varlen", "kvcache"))(flash_attn_varlen)
flash_attn_varlen.attention_kvcache = flash_attn_with_kvcache
