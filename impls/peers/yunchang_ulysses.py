"""yunchang's Ulysses attention (yunchang 0.6.4, `UlyssesAttention` with its flash-attn kernel, AttnType.FA) in the
suite's process groups (the sharded face), over flash-attn's Triton backend under Triton's interpreter where no GPU is.

The library's documented semantics: q, k, v (batch, n_local, heads, d) on every rank of `sequence_process_group`, a
contiguous shard of the sequence each (the protocol's (batch, heads, n_local, d) transposed, a view); two all-to-alls
around flash-attn's `flash_attn_func` (scatter the heads, gather the sequence, and back); `softmax_scale` None is
1/sqrt(d); out in the same layout, no LSE (the module drops it). The heads, and the kv heads with them, are scattered
among the ranks, so both must divide by W: the record declares heads_divisible and one head count for q, k and v
(gqa False); d_v = d (value_dim False), as flash-attn's. The all-to-alls exchange equal blocks, so every rank's
shard has the same length (even_shards): given shards of different lengths, gloo aborts the ranks ("Received data
size doesn't match expected size", SIGABRT). Float32 and float16 (the interpreter mishandles bfloat16
dots, triton-lang/triton#11584). Gradients through the library's all-to-all autograd functions and flash-attn's
backward. Its hybrid (Ulysses x ring) attention needs process groups made by every rank of the world
(`set_seq_parallel_pg`), which a call on a subgroup of the suite's pool cannot make: not offered.
"""

from __future__ import annotations

import functools

from impls.peers.availability import installed
from impls.peers.flash_attn_triton import _flash_attn
from protocol.registry import attention_impl
from protocol.triton_interpreter import interpreted_max_seq


@functools.cache
def _yunchang():
    """yunchang over flash-attn's Triton backend (chosen before yunchang imports flash_attn)."""
    _flash_attn()
    import yunchang

    return yunchang


@attention_impl(name="yunchang-ulysses", backend="peers", dtypes=("float32", "float16"), tensors="torch",
                causal_alignment="top_left", cross=False, gqa=False, value_dim=False, heads_divisible=True,
                even_shards=True, faces=("sharded",), max_seq=interpreted_max_seq(),
                probe=installed("yunchang", "flash_attn", "triton", installer="tox -e distributed-peers"))
def yunchang_ulysses(q, k, v, *, group, scale=None, causal=False):
    """yunchang's UlyssesAttention of this rank's shards (the module's docstring)."""
    yunchang = _yunchang()
    layer = yunchang.UlyssesAttention(sequence_process_group=group, attn_type=yunchang.kernels.AttnType.FA)
    out = layer(*(x.transpose(1, 2) for x in (q, k, v)), softmax_scale=scale, causal=bool(causal))
    return out.transpose(1, 2)
