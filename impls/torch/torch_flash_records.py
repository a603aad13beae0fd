"""The project's FlashAttention (impls.torch.torch_flash) as records, and the unfused operator sequence it must equal.

Seed 000 § Fused Attention: MatMul -> Scale -> Softmax -> Dropout -> MatMul. `torch-flash-tiled` does them per
tile in one pass and never holds the weights; `torch-unfused` runs them as five separate torch operators on
the whole n_q x n_k matrix, with the same counter-based dropout mask (specs.dropout_mask), so the two can be
compared with and without dropout, forward and backward.
"""

from __future__ import annotations

import math

import torch

from impls.torch.torch_flash import flash_attention_tiled
from protocol.registry import attention_impl
from specs.dropout_mask import check_dropout, keep_from_row_keys, row_keys
from specs.validation import AttentionInputError, resolve_scale

FLASH_CAPABILITIES = dict(backend="torch", dtypes=("float64", "float32", "float16", "bfloat16"), tensors="torch",
                          tile_keywords=("block_rows", "block_cols"), lse=True, fused=True,
                          differentiable_mods=("bias", "sinks"))


def _tiled(causal_alignment: str):
    def tiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
              causal: bool = False, mask: torch.Tensor | None = None, dropout_p: float = 0.0,
              dropout_seed: int | None = None, block_rows: int = 256, block_cols: int = 512,
              return_lse: bool = False, bias: torch.Tensor | None = None, window_size: tuple[int, int] | None = None,
              softcap: float = 0.0, alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None):
        return flash_attention_tiled(q, k, v, scale=scale, causal=causal, causal_alignment=causal_alignment,
                                     mask=mask, dropout_p=dropout_p, dropout_seed=dropout_seed,
                                     block_rows=block_rows, block_cols=block_cols, return_lse=return_lse, bias=bias,
                                     window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)

    tiled.__doc__ = f"impls.torch.torch_flash.flash_attention_tiled, causal aligned {causal_alignment}."
    return tiled


flash_tiled = attention_impl(name="torch-flash-tiled", causal_alignment="top_left",
                             **FLASH_CAPABILITIES)(_tiled("top_left"))
flash_tiled_bottom_right = attention_impl(name="torch-flash-tiled-bottom-right", causal_alignment="bottom_right",
                                          **FLASH_CAPABILITIES)(_tiled("bottom_right"))


# float64 and float32 only: in float16 and bfloat16 the unfused operators round S and P to the storage type,
# which a fused kernel (float32 inside) does not, so the two differ by more than either's own allowance would say
@attention_impl(name="torch-unfused", backend="torch", dtypes=("float64", "float32"), tensors="torch")
def unfused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                      causal: bool = False, mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                      dropout_seed: int = 0) -> torch.Tensor:
    """Five operators, each on the whole (batch, heads, n_q, n_k) tensor; causal top-left; a row with no
    visible key has zero weights, and a value no query of its head sees is replaced by 0 (0 * NaN is NaN)."""
    p, seed = check_dropout(dropout_p, dropout_seed)
    batch, heads, n_q, d = q.shape
    n_k = k.shape[2]
    if v.shape[2] != n_k:
        raise AttentionInputError(f"k has n_k={n_k} keys but v has {v.shape[2]} values")
    group = heads // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2))  # MatMul
    scores = scores * resolve_scale(scale, d)  # Scale
    visible = torch.ones((n_q, n_k), dtype=torch.bool)
    if causal:
        visible = visible.tril()
    if mask is not None:
        visible = visible & mask
    scores = scores.masked_fill(~visible, -math.inf)
    weights = torch.where(visible.any(dim=-1, keepdim=True), torch.softmax(scores, dim=-1), 0.0)  # Softmax
    v = torch.where(visible.any(dim=-2)[..., None], v, 0.0)  # a value no query sees is never multiplied
    if p > 0:  # Dropout
        b, h, i, j = (torch.arange(n) for n in (batch, heads, n_q, n_k))
        keys = row_keys(seed, b[:, None, None, None], h[None, :, None, None], i[None, None, :, None])
        weights = weights * keep_from_row_keys(keys, j, p) / (1.0 - p)
    return torch.matmul(weights, v)  # MatMul
