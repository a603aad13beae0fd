"""Seed 002 § 3.2.3 and § 3.2.5: the two blockwise attentions (impls/seeds/seed_code/seed002_blockwise.py) as records.

Both normalise each (query block, key block) tile with its own softmax and add
the tiles' outputs, without the online-softmax rescaling of seed 000. Once the
keys span more than one block, a row's effective weights sum to the number of
key blocks, not to 1, and the output is no longer softmax attention. Both read
the key length from q (`batch_size, seq_len, d_model = q.shape`), so they are
self-attention only, and `torch.zeros_like(q)` makes d_v equal d. The adapter
flattens (batch, heads) into the seed's batch axis.
"""

from __future__ import annotations

import numpy as np

from impls.seeds.seed_code.seed002_blockwise import HardwareAwareAttention, MemoryOptimizedAttention
from protocol.registry import attention_impl
from protocol.torch_convert import as_tensor


def _flatten_heads(q, k, v):
    return [x.reshape(-1, *x.shape[2:]) for x in map(as_tensor, (q, k, v))]


@attention_impl(name="seed002-memory-optimized-tiled", backend="torch", dtypes=("float64",),
                gqa=False, cross=False, value_dim=False, tile_keywords=("block_size",))
def memory_optimized_tiled_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
                                     block_size: int = 32) -> np.ndarray:
    output, _ = MemoryOptimizedAttention(block_size).tiled_attention(*_flatten_heads(q, k, v))
    return output.reshape(q.shape[:2] + tuple(output.shape[1:])).numpy()


@attention_impl(name="seed002-hardware-aware", backend="torch", dtypes=("float64",),
                gqa=False, cross=False, value_dim=False)
def hardware_aware_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    module = HardwareAwareAttention(d_model=q.shape[-1], seq_len=q.shape[2], device="cpu")
    output, _ = module.hardware_optimized_attention(*_flatten_heads(q, k, v))
    return output.reshape(q.shape[:2] + tuple(output.shape[1:])).numpy()
