"""ring-flash-attention (ring-flash-attn 0.1.8): ring, zigzag and stripe attention over flash-attn's Triton backend,
in the suite's process groups (the sharded face), under Triton's interpreter where no GPU is.

The library's documented semantics: q, k, v (batch, n_local, heads, d) on every rank of `group` (the protocol's
(batch, heads, n_local, d) transposed, a view), `softmax_scale` None is 1/sqrt(d), causal as flash-attn's, out in the
same layout and, with return_attn_probs=True, the LSE (batch, heads, n_local). Its three functions take three layouts:
`ring_flash_attn_func` contiguous shards; `zigzag_ring_flash_attn_func` chunks r and 2W - 1 - r; and
`stripe_flash_attn_func` every W-th position from r. zigzag and stripe assert causal=True ("zigzag ring is
meaningless for causal=False"; "if not causal, use ring flash attn instead"): for a call without causal their records
call ring_flash_attn_func, as the library says (attention without a mask reads no position, so any layout is the
ring's). The ring halves a rank's chunks and pairs shards by rank, so every shard must have one length (even_shards),
and causal is aligned for equal lengths only (cross=False); d_v = d (value_dim False), as flash-attn's. Gradients
through the library's own ring backward.

Each rank runs flash-attn's Triton kernels as impls.peers.flash_attn_triton does (its CUDA-only custom ops registered
for the CPU; float32 and float16: the interpreter mishandles bfloat16 dots, triton-lang/triton#11584). The library's
package __init__ imports its transformers adapters, which need transformers; the records never use them, so a stub
module stands in for `ring_flash_attn.adapters` (the one change to the library as installed).
"""

from __future__ import annotations

import functools
import sys
import types

from impls.peers.availability import installed
from impls.peers.flash_attn_triton import _flash_attn
from protocol.registry import attention_impl
from protocol.triton_interpreter import interpreted_max_seq

PROBE = installed("ring_flash_attn", "flash_attn", "triton", installer="tox -e distributed-peers")
FUNCTIONS = {"contiguous": "ring_flash_attn_func", "zigzag": "zigzag_ring_flash_attn_func",
             "stripe": "stripe_flash_attn_func"}


@functools.cache
def _ring_flash_attn():
    """ring_flash_attn over flash-attn's Triton backend, its transformers adapters stubbed out."""
    _flash_attn()
    adapters = types.ModuleType("ring_flash_attn.adapters")
    adapters.substitute_hf_flash_attn = adapters.update_ring_flash_attn_params = None
    sys.modules.setdefault("ring_flash_attn.adapters", adapters)
    import ring_flash_attn

    return ring_flash_attn


def _ring_face(layout: str):
    """The sharded face of the library's function for `layout`."""

    def ring_flash_attention(q, k, v, *, group, scale=None, causal=False, return_lse=False):
        """ring-flash-attention of this rank's shards (the module's docstring)."""
        library = _ring_flash_attn()
        function = getattr(library, FUNCTIONS[layout] if causal else FUNCTIONS["contiguous"])
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        out, lse, _ = function(q, k, v, softmax_scale=scale, causal=bool(causal), return_attn_probs=True, group=group)
        out = out.transpose(1, 2)
        return (out, lse) if return_lse else out

    ring_flash_attention.__qualname__ = f"ring_flash_attention_{layout}"
    return ring_flash_attention


RING_FLASH_ATTN = dict(backend="peers", dtypes=("float32", "float16"), tensors="torch", causal_alignment="top_left",
                       cross=False, value_dim=False, lse=True, even_shards=True, ring_merge=True, faces=("sharded",),
                       max_seq=interpreted_max_seq(), probe=PROBE)


def _record_of(face):
    """A function of this module for a record, calling the shared face (the declarations go on it)."""

    def record(q, k, v, *, group, scale=None, causal=False, return_lse=False):
        return face(q, k, v, group=group, scale=scale, causal=causal, return_lse=return_lse)

    record.__doc__ = face.__doc__
    return record


ring_flash_attn_ring = attention_impl(name="ring-flash-attn", sharding="contiguous", **RING_FLASH_ATTN)(
    _record_of(_ring_face("contiguous")))
ring_flash_attn_zigzag = attention_impl(name="ring-flash-attn-zigzag", sharding="zigzag", **RING_FLASH_ATTN)(
    _record_of(_ring_face("zigzag")))
ring_flash_attn_stripe = attention_impl(name="ring-flash-attn-stripe", sharding="stripe", **RING_FLASH_ATTN)(
    _record_of(_ring_face("stripe")))
